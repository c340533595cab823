# %% [markdown]
# # ACC++ 06: gendered-pronoun circuits
#
# **Claim (accpp, §4 and §5, gendered pronouns; three claims):** the paper's third task is gendered pronouns: after
# "So {name} is a really great friend, isn't" the model should prefer " he" for a male name and " she"
# for a female one. ACC++ traces a circuit per prompt, and its circuits are 2-10x smaller than those of
# its predecessor ACC on the same prompts (the paper's statement over all its tasks). Three claims are
# checked here, each with a check registered in papers/accpp/claims.yaml:
#
# 1. `pronoun-behaviour`: the model does the task (mean logit difference logit(correct pronoun) -
#    logit(other) > 0, with accuracy >= 0.8, each decided by its interval over prompts); the other two
#    claims take the accuracy as a precondition.
# 2. `pronoun-smaller-than-acc`: the geometric mean over prompts of the ACC / ACC++ node ratio lies in the
#    paper's range [2, 10], decided by its interval over prompts.
# 3. `pronoun-name-paths`: the pronoun's direct effect traces back to the name token. Head seeds are the
#    head outputs at the answer position (split per source token) that the tracer keeps as seeds; a head
#    seed reaches token p when its firing or an ancestor in the circuit is a head firing whose source is
#    p. Per circuit: the share of the head seeds' positive attribution that reaches the name, and its
#    margin over the most-reached other token (every position except 0, the name and the answer
#    position). The check: over the traced prompts, the mean share is above one half and the mean margin
#    above zero, each decided by its interval over prompts.
#
# **The task's source and our prompts.** The paper takes the task from ACC (Franco & Crovella, NeurIPS 2025), whose code
# (`gp_dataset.py` in the authors' ACC repository) builds 5 templates x (10 male + 10 female names) with
# answers " he" / " she", adapted from Mathwin and Corlouer's gendered-pronoun circuit study in GPT-2 small
# (2023). The claims are measured over template families (`accpp.families`): the authors' five templates
# (`authors`), five of ours in the same shape (`so`), five of ours with the name inside the sentence
# (`other`) and five of ours whose second sentence begins with the name (`sentence`), each with our own
# 12 + 12 names, kept where they are single tokens for the model in use (`accpp.pronouns`). A fifth
# family, `initial` (the name begins the prompt), is measured for behaviour only (section 1b): there the
# name is written without its leading space, often as several tokens, and for SmolLM2 (no
# beginning-of-sequence token) it stands at position 0, where the attention sink is, so a path to the
# name cannot be told from a read of the sink.
#
# **Checked here:** model, families and sample sizes are the registered protocol (claims.yaml). At `cpu`:
# SmolLM2-135M, every template x name of the four families for behaviour (480 prompts), 40 traced prompts
# (10 per family, half male and half female names, spread over each family's templates), 32 of them
# (8 per family) compared with ACC. At `paper`: both offline models (SmolLM2-135M, Gemma-3-270M), 64 traced
# prompts each (16 per family), 32 of them compared with ACC. Values per family are recorded as evidence.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODELS = ""  # comma-separated model names to use instead of the protocol's

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from accpp import families, figures, item_cache, viewer
from accpp import pronouns as pr
from accpp.graph import save_circuit
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, notebook, paths, plotting, stats

nb = notebook.start("accpp/06_gendered_pronoun", PROFILE, SEED, DEVICE, threads=1)
# The registered protocol (papers/accpp/claims.yaml, shared by this notebook's three claims): models,
# template families, sample sizes, selection rule and aggregation per profile.
PROTOCOL = claims.protocol("accpp/pronoun-name-paths", nb.profile)
MODEL_LIST = [m.strip() for m in MODELS.split(",") if m.strip()] or list(PROTOCOL["models"])
FAMILIES = list(PROTOCOL["families"])  # the claims' template families
N_TRACE = PROTOCOL["n_trace_per_family"]  # traced prompts per family
N_ACC = PROTOCOL["n_acc_per_family"]  # of them also traced by ACC, per family
N_BOOT = PROTOCOL["n_boot"]
OUT = paths.output_dir() / "accpp" / "06_gendered_pronoun"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Behaviour, ACC++ circuits and the ACC baseline, per model
# Behaviour on every template x name of every family. Traced prompts: per family, a seeded sample of the
# prompts the model solves, half male and half female names, spread over the family's templates, ordered
# so that every prefix is spread over the families (`pronouns.family_sample`). ACC is the authors' ACC
# (`accpp.acc`, default config) on the first `N_ACC` traced prompts of each family; sizes are graph node
# counts.

# %%
results, family_rows = {}, []
for name in MODEL_LIST:
    t0 = time.perf_counter()
    model, tok = load_model(name, device=nb.device)
    everything = families.pronoun_families_set(tok, families.PRONOUN_FAMILIES)
    all_metrics = pr.evaluate(model, everything)
    family_rows.append(families.behaviour_table(everything, all_metrics.logit_diff, by=("family", "answer_in_prompt"),
                                                model=name))
    keep = [i for i, p in enumerate(everything) if p.family in FAMILIES]
    prompts = [everything[i] for i in keep]
    metrics = pr.PronounMetrics(all_metrics.logit_diff[keep], all_metrics.male[keep],
                                tuple(all_metrics.family[i] for i in keep))
    solved = [p for p, ld in zip(prompts, metrics.logit_diff.tolist()) if ld > 0]
    chosen = pr.family_sample(solved, FAMILIES, N_TRACE, seed=nb.seed)
    tracer = Tracer(model, tok, name=name)
    circuits = pr.trace_many(tracer, chosen, cache=item_cache.for_run())  # a resumed run reads back the finished ones
    n_acc = N_ACC * len(FAMILIES)  # the first N_ACC of each family (family_sample's order)
    sizes = pd.DataFrame(pr.size_rows(tracer, chosen[:n_acc], circuits[:n_acc], cache=item_cache.for_run()))
    results[name] = dict(prompts=prompts, metrics=metrics, chosen=chosen, circuits=circuits, sizes=sizes,
                         paths=pr.name_path_table(circuits), seconds=time.perf_counter() - t0)
    biggest = max(range(len(circuits)), key=lambda i: circuits[i].graph.number_of_nodes())
    save_circuit(circuits[biggest], OUT / f"circuit_{name}.json")
    print(f"{name}: {len(prompts)} prompts in {len(FAMILIES)} families, e.g. {prompts[0].text!r}; "
          f"{len(circuits)} traced, {len(sizes)} compared with ACC; {results[name]['seconds']:.0f} s")
    del model, tracer

behaviour = pd.concat({m: pd.DataFrame({"all": r["metrics"].summary(), **r["metrics"].by_family()}).T
                       for m, r in results.items()})
behaviour.round(3)

# %%
rows = [dict(model=m, template=f"{p.family}: " + families.PRONOUN_FAMILIES[p.family][p.template].replace("{name}", "X"),
             gender=p.gender, logit_diff=ld)
        for m, r in results.items() for p, ld in zip(r["prompts"], r["metrics"].logit_diff.tolist())]
beh_df = pd.DataFrame(rows)
fig, axes = plt.subplots(1, len(results), figsize=(8 * len(results), 0.32 * beh_df["template"].nunique() + 1.5),
                         squeeze=False)
for ax, m in zip(axes[0], results):
    sns.stripplot(data=beh_df[beh_df.model == m], y="template", x="logit_diff", hue="gender", dodge=True,
                  palette={"male": "#4C72B0", "female": "#C44E52"}, size=3, ax=ax)
    ax.axvline(0, color="0.3", lw=1)
    ax.tick_params(axis="y", labelsize=7)
    ax.set(xlabel="logit(correct pronoun) - logit(other)", ylabel="",
           title=f"{m}: accuracy {results[m]['metrics'].accuracy:.2f}")
fig.suptitle("Gendered pronouns: per-prompt logit difference by template family, template and the name's gender")
plotting.savefig(fig, "accpp/06_gendered_pronoun_behaviour", profile=nb.profile)

# %% [markdown]
# ### 1b. Behaviour per template family, the `initial` family included
# Every family of `accpp.families` (the claims' families and `initial`, measured for behaviour only; see the
# header). `answer_in_prompt` says whether the pronoun's token occurs in the prompt. Saved as
# `06_gendered_pronoun_behaviour_by_family.csv`.

# %%
by_family = pd.concat(family_rows, ignore_index=True)
by_family.to_csv(nb.out / "06_gendered_pronoun_behaviour_by_family.csv", index=False)
by_family.round(3)

# %% [markdown]
# ## 2. One circuit per model
# The largest traced circuit of each model (red: seeds; blue: query-side signals; orange dashed: key-side).

# %%
fig, axes = plt.subplots(len(results), 1, figsize=(10, 7 * len(results)), squeeze=False)
for ax, (m, r) in zip(axes[:, 0], results.items()):
    c = max(r["circuits"], key=lambda c: c.graph.number_of_nodes())
    figures.draw_circuit(c.graph, c.tokens, ax=ax, title=f"{m}: {c.meta['text']!r} -> {pr.PRONOUNS[c.meta['gender']]!r}")
fig.suptitle("ACC++ gendered-pronoun circuits (largest traced prompt per model)")
plotting.savefig(fig, "accpp/06_gendered_pronoun_circuit", profile=nb.profile)

circuit_table = pd.DataFrame([dict(model=m, family=c.meta["family"], text=c.meta["text"], gender=c.meta["gender"],
                                   logit_diff=c.logit_diff, nodes=c.graph.number_of_nodes(), firings=c.n_firings,
                                   head_seeds=len(pr.head_seeds(c.graph)), seconds=c.seconds)
                              for m, r in results.items() for c in r["circuits"]])
circuit_table.round(3)

# %% [markdown]
# The same circuits in the interactive viewer, one page per model (also saved beside the figures as
# `accpp/06_gendered_pronoun_circuit_<model>_viewer.html`; they open in any browser without a network).

# %%
for m, r in results.items():
    c = max(r["circuits"], key=lambda c: c.graph.number_of_nodes())
    viewer.save(c, f"accpp/06_gendered_pronoun_circuit_{m}",
                title=f"{m}: {c.meta['text']!r} -> {pr.PRONOUNS[c.meta['gender']]!r}")

# %% [markdown]
# ## 3. ACC++ against ACC on the same prompts
# Node counts of both circuits per prompt; the grey band is the paper's range of ratios (2-10x). The title
# gives the geometric mean of the ratios over the compared prompts.

# %%
size_df = pd.concat([r["sizes"].assign(model=m) for m, r in results.items()], ignore_index=True)
fig, ax = plt.subplots(figsize=(5.8, 4.6))
lim = [1, max(size_df["acc_nodes"].max(), size_df["accpp_nodes"].max()) * 2]
xs = np.geomspace(*lim, 50)
ax.fill_between(xs, 2 * xs, 10 * xs, color="0.9", label="paper: ACC 2-10x larger")
ax.plot(xs, xs, color="0.5", lw=1, ls=":", label="equal size")
sns.scatterplot(data=size_df, x="accpp_nodes", y="acc_nodes", hue="family", style="model", s=50, ax=ax)
ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="ACC++ nodes", ylabel="ACC nodes",
       title=f"geometric mean ACC / ACC++ ratio {stats.geometric_mean(size_df['ratio']):.1f} over {len(size_df)} prompts")
ax.legend(fontsize=7)
plotting.savefig(fig, "accpp/06_gendered_pronoun_sizes", profile=nb.profile)
size_df.drop(columns=["text"]).round(2)

# %% [markdown]
# ## 4. Where the head seeds' attribution comes from
# Per traced prompt (`pronouns.name_path_table`): the share of its head seeds' positive attribution whose
# firing, or an ancestor firing in the circuit, reads the name (left), and that share minus the share of
# the most-reached other token (right), by family; diamonds: the family's mean. MLPs are leaves of ACC++
# circuits (the paper's rule), so information that attention moves from the name to a later token and that
# token's MLPs then rewrite reaches the answer through a path that ends at those MLPs: such a path counts for
# the later token, not for the name. The table lists, per family, the mean share and margin, the share
# pooled by attribution, the share read directly from the answer position, and the other tokens reached
# most often.

# %%
path_df = pd.concat([r["paths"].assign(model=m) for m, r in results.items()], ignore_index=True)
fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.6 * len(results)), squeeze=False)
for row, m in zip(axes, results):
    d = path_df[path_df.model == m]
    for ax, col, ref, label in ((row[0], "name_path_share", 0.5, "share reaching the name"),
                                (row[1], "name_path_margin", 0.0, "margin over the next token")):
        sns.stripplot(data=d, x="family", y=col, order=FAMILIES, hue="gender", palette={"male": "#4C72B0",
                      "female": "#C44E52"}, size=4, jitter=0.2, ax=ax)
        means = d.groupby("family")[col].mean().reindex(FAMILIES)
        ax.scatter(range(len(FAMILIES)), means, marker="D", color="0.1", s=40, zorder=3, label="family mean")
        ax.axhline(ref, color="0.3", ls="--", lw=1)
        ax.set(xlabel="", ylabel=label, title=f"{m}: {label}, mean {d[col].mean():.2f} over {len(d)} prompts")
        ax.legend(fontsize=7)
fig.suptitle("How much of the head seeds' attribution reaches the name, per traced prompt")
plotting.savefig(fig, "accpp/06_gendered_pronoun_name_paths", profile=nb.profile)
pd.DataFrame({key: pr.name_path_summary(g) for key, g in path_df.groupby(["model", "family"])}).T

# %% [markdown]
# ## 5. The claims' checks
# Each claim's registered check (papers/accpp/claims.yaml) gives its verdict; with several models the
# values are the smallest (or, for the ratio's upper end, the largest) over models, each with its interval.

# %%
accuracy = min(r["metrics"].accuracy for r in results.values())
config = dict(models=MODEL_LIST, families=FAMILIES, n_behaviour={m: len(r["prompts"]) for m, r in results.items()},
              n_traced={m: len(r["circuits"]) for m, r in results.items()},
              n_acc={m: len(r["sizes"]) for m, r in results.items()}, n_boot=N_BOOT,
              variant=next(iter(results.values()))["circuits"][0].meta["variant"],
              templates={f: list(families.PRONOUN_FAMILIES[f]) for f in FAMILIES})
measurements = [
    pr.measure_behaviour({m: r["metrics"] for m, r in results.items()}, config=config, n_boot=N_BOOT, seed=nb.seed),
    pr.measure_size_ratio({m: r["sizes"] for m, r in results.items()}, accuracy, config=config, n_boot=N_BOOT,
                          seed=nb.seed),
    pr.measure_name_paths({m: r["paths"] for m, r in results.items()}, accuracy, config=config, n_boot=N_BOOT,
                          seed=nb.seed),
]
assert [m.claim for m in measurements] == ["accpp/pronoun-behaviour", "accpp/pronoun-smaller-than-acc",
                                          "accpp/pronoun-name-paths"]
verdicts = claims.conclude_all(measurements, profile=nb.profile, seed=nb.seed)
for v in verdicts:
    print(v)
