# %% [markdown]
# # 00 · A tour of the compendium
#
# **Claim (compendium, all papers):** every numbered claim of the two papers is listed in
# `papers/<paper>/claims.yaml` with the paper's value, its source and a registered check (naming the
# commit that registered it, and saying so where that came after a first measurement), mapped to the
# notebook that checks it (or marked as not yet covered), and the claims tables are built only from
# what notebooks recorded, with every verdict derived from the recorded values by those checks.
#
# **Checked here:** the claims ledger is complete and consistent (every notebook it names
# exists and every claim a notebook covers has a pre-registered check); the offline corpus that
# stands in for FineWeb-Edu is present, checksummed, and split into disjoint train and validation
# documents. Where every claim stands is drawn below, one verdict board per paper.
#
# The two papers:
#
# 1. **ProtoT** — *Prototype Transformer: Towards Language Model Architectures Interpretable by
#    Design* (arXiv 2602.11852). Self-attention is replaced by a linear-cost *prototype mixer*:
#    R learnable prototypes per layer act as R channels; each token writes into and reads from
#    the channels through softmax gates; each channel keeps a discounted prefix mean.
# 2. **ACC++** — *Finding Interpretable Prompt-Specific Circuits in Language Models*
#    (arXiv 2602.13483). From one forward pass, each attention firing is decomposed into
#    (upstream component × singular direction of $W_Q W_K^\top$) signals, scored with
#    Integrated Gradients, and pruned greedily; the tracer recurses into upstream heads.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, Markdown, display

from compendium import board, claims, data, notebook, plotting, profiles, runner, tables

nb = notebook.start("00_tour", PROFILE, SEED, DEVICE, threads=1)
print(f"profile: {nb.profile} ({profiles.describe(nb.profile)}), seed {nb.seed}, device {nb.device}")

# %% [markdown]
# ## The claims ledger
# Each row is one claim. `source` says where the paper's number was read: the full text of the
# papers could not be read for this compendium, so some numbers come from the authors' summary
# ("brief"), third-party summaries ("aggregator") or reviews. Those are marked in every table.
# `check` is the registered test: a named quantity of the measurement, a comparison and a threshold
# (plus, for some claims, further conditions that must all pass, and the interval that decides a
# condition where the measurement records one). `registration` says whether the check came before
# the claim's first measurement or after it (then its `history` gives the earlier checks and verdicts).

# %%
rows = []
for paper in claims.paper_ids():
    for c in claims.load_paper(paper).claims.values():
        rows.append({"paper": paper, "claim": c.id, "where": c.where, "paper value": c.paper_value,
                     "unit": c.unit, "source": c.source, "notebook": c.notebook or "—",
                     "check": c.check.describe() if c.check else "—",
                     "registration": c.check.registration() if c.check else "—",
                     "measured only at": ", ".join(c.check.measured_only_at) if c.check else "every profile",
                     "preconditions": ", ".join(p.id for p in c.preconditions) or "—"})
ledger = pd.DataFrame(rows)
ledger

# %%
coverage = (ledger.assign(covered=ledger["notebook"] != "—")
            .groupby(["paper", "covered"]).size().unstack(fill_value=0)
            .rename(columns={True: "covered by a notebook", False: "not yet covered"}))
fig, ax = plt.subplots(figsize=(6, 2.6))
coverage.plot.barh(stacked=True, ax=ax, color=["#bbbbbb", "#0173b2"][: coverage.shape[1]])
ax.set_xlabel("claims"); ax.set_ylabel(""); ax.set_title("Claims per paper")
ax.legend(loc="lower right", fontsize=8)
plotting.savefig(fig, "tour/claims_coverage", profile=nb.profile)
plotting.save_table(coverage, "tour/claims_coverage")
plt.show()

# %% [markdown]
# ## How a verdict is decided
# A notebook states what it measured as a `claims.Measurement` (named values, evidence, the tables
# behind its figures) and hands it to `claims.conclude`, which records it first and then applies the
# claim's registered check; every time a claims table is built, the verdict is derived again from the
# recorded values (a verdict written in a results file is never read). There are four verdicts:
#
# * **holds** — every power precondition passed and every condition of the check passed;
# * **does not hold** — the preconditions passed (the measurement could have confirmed the claim),
#   and a condition of the check failed (where the condition has an interval, the whole interval lies
#   on the wrong side of the threshold); the verdict names the condition and the measured value;
# * **inconclusive** — an interval straddles a threshold, or a power precondition failed: the
#   measurement could not have told whether the
#   claim holds (a model that never learned to use context cannot test a context-dependent claim;
#   a sweep that stops before the paper's context cannot place a crossover there). The verdict names
#   the failed precondition, its statement and the measured value;
# * **measured only** — the claim has no check, or its check does not apply at this profile because
#   the result is bound to scale or hardware (a perplexity of a tiny CPU model; a CPU throughput
#   against the paper's GPU claim). The value is recorded and shown, never judged.
#
# A table shows **not judged (recorded under an earlier check)** for a result measured for another
# version of the check (or judged by its notebook before checks were registered).
#
# The check, its preconditions and every later change (in `history`, dated, with the reason) live in
# `claims.yaml`, so a threshold cannot quietly follow the measurement. Below: how the checks of each
# paper apply to the two profiles.

# %%
def applies(c, profile):
    if c.check is None:
        return "no check"
    return "measured only" if profile in c.check.measured_only_at else "judged"


# one row per claim; the columns named after the profiles say how the check applies there
plan = pd.DataFrame([{"article": p, "claim": c.id, **{f"at {prof}": applies(c, prof) for prof in profiles.PROFILES},
                      "asserted at": ", ".join(c.check.assert_at) if c.check else "—"}
                     for p in claims.paper_ids() for c in claims.load_paper(p).claims.values()])
pd.concat({f"at {prof}": pd.crosstab(plan["article"], plan[f"at {prof}"]) for prof in profiles.PROFILES},
          axis=1).fillna(0).astype(int)

# %% [markdown]
# ## Where the claims stand
# One verdict board per paper, built from the published results (`papers/<paper>/results/`, written
# only by `compendium run --publish`) with every verdict derived from the recorded values: one row per
# claim, one column per profile. Hover a cell for the measured value, its 95% interval and the reason;
# a claim links to its block on the claims page (the value beside the paper's, the check, the history),
# its notebook to the notebook's page.

# %%
for paper in claims.paper_ids():
    display(HTML(board.html_for(paper, claims_page=f"../claims/{paper}.html", notebooks_base="",
                                notebooks=runner.list_notebooks())))

# %% [markdown]
# One recorded example of each verdict, where the published results have one (the verdict's reason
# is the text `conclude` wrote when the notebook ran):

# %%
examples = {}
for paper in claims.paper_ids():
    for cid, by_profile in tables.read_results(paper).items():
        for profile, entry in by_profile.items():
            examples.setdefault(entry["verdict"], (f"{paper}/{cid}", profile, entry))
for verdict in claims.VERDICTS:
    if verdict in examples:
        key, profile, entry = examples[verdict]
        reason = entry.get("reason") or "(recorded before verdicts had reasons)"
        display(Markdown(f"**{verdict}** — `{key}` at `{profile}`: {reason}"))
    else:
        display(Markdown(f"**{verdict}** — no published result has this verdict yet."))

# %% [markdown]
# ## The notebooks
# Every notebook is a jupytext pair (`.py` source, `.ipynb` generated). Run one with
# `make notebook NB=<name> PROFILE=cpu`, or all of them with `make all`.

# %%
notebooks = runner.list_notebooks()
named = {c for c in ledger["notebook"] if c != "—"}
for name in notebooks:
    owned = ledger.loc[ledger["notebook"] == name, "claim"].tolist()
    print(f"{name:32s} {', '.join(owned) if owned else '(no claims of its own)'}")

# %% [markdown]
# ## The offline corpus
# The paper trained on FineWeb-Edu (250M tokens). Offline, the stand-in is an educational mix of
# OpenStax textbooks, Wikipedia leads and the Brown corpus (`data/MANIFEST.md` gives sources and
# licences). The split is by document and depends only on the document id.

# %%
train = data.load_corpus("train")
valid = data.load_corpus("validation")
docs = pd.concat([train.to_pandas().assign(split="train"), valid.to_pandas().assign(split="validation")])
docs["characters"] = docs["text"].str.len()
per_source = (docs.groupby(["source", "split"])
              .agg(documents=("id", "size"), characters=("characters", "sum"))
              .unstack("split", fill_value=0)
              .sort_values(("characters", "train"), ascending=False))
per_source

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
top = per_source[("characters", "train")] / 1e6
ax.barh(top.index, top.values, color="#029e73")
ax.invert_yaxis(); ax.set_xlabel("million characters (train split)"); ax.set_title("Sources of the training mix")
plotting.savefig(fig, "tour/corpus_sources", profile=nb.profile)
plotting.save_table(per_source, "tour/corpus_sources")
plt.show()

# %% [markdown]
# ## Check

# %%
missing = sorted(named - set(notebooks))
# Planned notebooks are allowed to be absent only while their claims say notebook: null.
assert not missing, f"claims.yaml names notebooks that do not exist: {missing}"
unchecked = ledger.loc[(ledger["notebook"] != "—") & (ledger["check"] == "—"), "claim"].tolist()
assert not unchecked, f"claims covered by a notebook without a pre-registered check: {unchecked}"
assert set(train["id"]).isdisjoint(valid["id"]), "a document is in both splits"
assert len(valid) > 100 and len(train) > 20 * len(valid)
print(f"{len(ledger)} claims, {len(named)} notebooks named, {len(train)} train / {len(valid)} validation documents")
