# %% [markdown]
# # 00 · A tour of the compendium
#
# **Claim (compendium, all papers):** every numbered claim of the two papers is listed in
# `papers/<paper>/claims.yaml` with the paper's value and its source, mapped to the notebook
# that checks it (or marked as not yet covered), and the claims tables are built only from
# values that notebooks recorded.
#
# **Checked here:** the claims ledger is complete and consistent (every notebook it names
# exists and every notebook records the claims it owns); the offline corpus that stands in for
# FineWeb-Edu is present, checksummed, and split into disjoint train and validation documents.
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
import pandas as pd
import matplotlib.pyplot as plt

from compendium import claims, data, paths, plotting, profiles, runner

PROFILE = profiles.check(PROFILE)
plotting.use_style()
print(f"profile: {PROFILE} ({profiles.PROFILES[PROFILE]})")

# %% [markdown]
# ## The claims ledger
# Each row is one claim. `source` says where the paper's number was read: the full text of the
# papers could not be read for this compendium, so some numbers come from the authors' summary
# ("brief"), third-party summaries ("aggregator") or reviews. Those are marked in every table.

# %%
rows = []
for paper in claims.paper_ids():
    for c in claims.load_paper(paper).claims.values():
        rows.append({"paper": paper, "claim": c.id, "where": c.where, "paper value": c.paper_value,
                     "unit": c.unit, "source": c.source, "notebook": c.notebook or "—"})
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
plotting.savefig(fig, "tour/claims_coverage", profile=PROFILE)
plt.show()

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
plotting.savefig(fig, "tour/corpus_sources", profile=PROFILE)
plt.show()

# %% [markdown]
# ## Check

# %%
missing = sorted(named - set(notebooks))
# Planned notebooks are allowed to be absent only while their claims say notebook: null.
assert not missing, f"claims.yaml names notebooks that do not exist: {missing}"
assert set(train["id"]).isdisjoint(valid["id"]), "a document is in both splits"
assert len(valid) > 100 and len(train) > 20 * len(valid)
print(f"{len(ledger)} claims, {len(named)} notebooks named, {len(train)} train / {len(valid)} validation documents")
