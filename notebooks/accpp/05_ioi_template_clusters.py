# %% [markdown]
# # ACC++ 05: do per-prompt IOI circuits cluster by template?
#
# **Claim (accpp, §5, IOI clustering):** per-prompt ACC++ circuits of the IOI task cluster by
# template: with the Jaccard distance between the circuits' component sets and average-linkage
# clustering, GPT-2's circuits split by ABBA vs BABA order, Pythia's by wording (template), and
# Gemma-2's less clearly.
#
# **Checked here:** a balanced IOI set (templates x ABBA/BABA x prompts per cell; only correctly
# solved prompts are traced, since a prompt with logit difference <= 0 has no circuit), one ACC++
# circuit per prompt, its position-free component set (heads and MLPs) and signal set (sender,
# receiver head, query/key side, singular index). Jaccard distance matrix, average-linkage
# dendrogram coloured by template and by order, a heatmap sorted by (template, order), and how
# well each labelling (template, order, template x order) explains the distances and the
# k-cluster cut: adjusted Rand index (ARI) and NMI of the cut with k = number of labels,
# within- vs between-label mean distance, and permutation p-values (999 seeded shuffles; the
# template labels are shuffled within each order and the order labels within each template, so
# one factor cannot masquerade as the other). At `cpu`: SmolLM2-135M (offline), 5 templates x 2
# orders x 3 prompts = 30 traced prompts, so effects are small-sample estimates. At `paper`: the
# paper's balanced set, all 15 templates x (100 ABBA + 100 BABA) (correctly solved ones traced),
# on Gemma-3-270M or the Hub model named in MODEL (e.g. "gpt2" to compare with the paper's GPT-2).

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import json
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from accpp import clustering as cl
from accpp import datasets, ioi, item_cache
from accpp import multilingual as ml
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, notebook, paths, plotting

nb = notebook.start("accpp/05_ioi_template_clusters", PROFILE, SEED, DEVICE, threads=1)
PROTOCOL = claims.protocol("accpp/ioi-template-clusters", nb.profile)   # registered in claims.yaml
MODEL = MODEL or PROTOCOL["model"]
TEMPLATES = list(PROTOCOL["templates"])
DRAWN = PROTOCOL["drawn"]  # prompts drawn per (template, order)
PER_CELL = PROTOCOL["per_cell"]  # traced per cell: the first correctly solved ones
N_PERM = PROTOCOL["n_perm"]
OUT = paths.output_dir() / "accpp" / "05_ioi_template_clusters"
OUT.mkdir(parents=True, exist_ok=True)
t_start = time.perf_counter()

# %% [markdown]
# ## 1. The balanced set and the model's behaviour per cell
# The cpu templates differ in wording: "Then, ... went to the [PLACE]. [B] gave a [OBJECT] to",
# "... had a long argument, and afterwards [B] said to", "When ... got a [OBJECT] at the [PLACE],
# [B] decided to give it to", "While ... were commuting to the [PLACE], ...", "The [PLACE] [B] and
# [A] went to had a [OBJECT]. [B] gave it to". (Template 14 is left out at cpu: SmolLM2 solves
# fewer than half of its ABBA prompts.)

# %%
t0 = time.perf_counter()
model, tok = load_model(MODEL, device=nb.device)
load_s = time.perf_counter() - t0
drawn = datasets.ioi_balanced(tok, per_order=DRAWN, seed=SEED, templates_idx=TEMPLATES)
metrics = datasets.evaluate(model, drawn)
behaviour = (pd.DataFrame(dict(template=[p.template for p in drawn], order=[p.order for p in drawn],
                               logit_diff=metrics.logit_diff.numpy()))
             .groupby(["template", "order"])["logit_diff"]
             .agg(mean="mean", accuracy=lambda x: float((x > 0).mean())).unstack("order"))
prompts = []
for t in TEMPLATES:
    for order in ("ABBA", "BABA"):
        prompts += [p for p, ld in zip(drawn, metrics.logit_diff.tolist())
                    if p.template == t and p.order == order and ld > 0][:PER_CELL]
print(f"{MODEL}: loaded in {load_s:.1f} s; accuracy {metrics.accuracy:.3f} over {len(drawn)} drawn prompts; "
      f"{len(prompts)} to trace")
behaviour.round(2)

# %% [markdown]
# ## 2. One circuit per prompt
# Position-free sets (`accpp.multilingual`): components `A{layer}.{head}` / `M{layer}`; signals
# (sender, receiver head, side, singular index k).

# %%
tracer = Tracer(model, tok, name=MODEL)
tracer.svd  # per-head SVDs, cached on disk per model
t0 = time.perf_counter()
circuits = ioi.trace_many(tracer, prompts, cache=item_cache.for_run())  # a resumed run reads back the finished ones
trace_s = time.perf_counter() - t0
comp = [ml.component_set(c.graph) for c in circuits]
sig = [ml.signal_set(c.graph) for c in circuits]
table = pd.DataFrame(dict(template=[p.template for p in prompts], order=[p.order for p in prompts],
                          logit_diff=[c.logit_diff for c in circuits], firings=[c.n_firings for c in circuits],
                          components=[len(s) for s in comp], signals=[len(s) for s in sig],
                          seconds=[c.seconds for c in circuits]))
(OUT / "sets.json").write_text(json.dumps([dict(text=p.text, template=p.template, order=p.order,
                                                components=sorted(a), signals=sorted(map(list, b)))
                                           for p, a, b in zip(prompts, comp, sig)]))
print(f"traced {len(circuits)} prompts in {trace_s:.0f} s")
table.groupby(["template", "order"])[["logit_diff", "firings", "components", "signals", "seconds"]].mean().round(2)

# %% [markdown]
# ## 3. Distances and average-linkage clustering
# Jaccard distance 1 - |a & b| / |a | b| between every pair of circuits; UPGMA (average linkage).

# %%
template = np.array([f"T{p.template}" for p in prompts])
order = np.array([p.order for p in prompts])
D = {"components": cl.distance_matrix(comp), "signals": cl.distance_matrix(sig)}
Z = {level: cl.average_linkage(m) for level, m in D.items()}
fig = cl.dendrogram_with_labels(Z["components"], {"template": template, "order": order},
                                palettes={"order": "Set2"}, figsize=(11, 4.5),
                                title=f"Average linkage of IOI circuits (component sets), {MODEL}")
plotting.savefig(fig, "accpp/05_ioi_dendrogram", profile=nb.profile)

# %%
keys = [(p.template, p.order) for p in prompts]
fig, axes = plt.subplots(1, 3, figsize=(17, 5), gridspec_kw=dict(width_ratios=[1, 1, 0.75], wspace=0.3))
for ax, level in zip(axes, D):
    cl.sorted_heatmap(D[level], keys, ax=ax, title=f"Jaccard distance, {level}", fmt=lambda k: f"T{k[0]} {k[1]}")
cells = pd.concat([cl.distance_by_cell(D[level], {"template": template, "order": order}).assign(level=level)
                   for level in D])
cells["pair"] = cells["template"] + "\n" + cells["order"]
sns.barplot(data=cells, x="pair", y="mean", hue="level", ax=axes[2],
            order=[f"{a}\n{b}" for a in ("same", "diff") for b in ("same", "diff")])
axes[2].set_ylabel("mean Jaccard distance")
axes[2].set_xlabel("template / order of the two prompts")
axes[2].set_ylim(0, 1.15)
axes[2].set_title("mean distance by pair type", fontsize=9)
axes[2].legend(fontsize=8, loc="upper left", ncol=2)
fig.suptitle(f"IOI circuit distances, {MODEL}, {len(prompts)} prompts")
plotting.savefig(fig, "accpp/05_ioi_distances", profile=nb.profile)
cells.pivot_table(index=["template", "order"], columns="level", values=["mean", "count"]).round(3)

# %% [markdown]
# ## 4. Which labelling do the clusters follow?
# For each labelling, the dendrogram is cut into k clusters (k = its number of labels) and the cut
# is compared with the labels (ARI, NMI); `within`/`between` are mean distances over pairs with the
# same / different label. p-values: one-sided, 999 seeded shuffles (template within order, order
# within template, template x order unrestricted), for the ARI and for the gap between - within.

# %%
LABELLINGS = {"template": (template, order), "order": (order, template),
              "template x order": (np.char.add(np.char.add(template, " "), order), None)}
align = pd.DataFrame([dict(level=level, labelling=name,
                           **cl.label_alignment(D[level], Z[level], lab, n_perm=N_PERM, seed=nb.seed, strata=strata))
                      for level in D for name, (lab, strata) in LABELLINGS.items()]).set_index(["level", "labelling"])
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
for ax, col, what in zip(axes, ["ari", "gap"], ["ARI of the k-cluster cut vs the labels",
                                                 "between-label - within-label mean distance"]):
    sns.barplot(data=align.reset_index(), x="labelling", y=col, hue="level", ax=ax)
    ax.set_title(what, fontsize=9)
    ax.set_xlabel("")
    ax.set_ylabel(col.upper() if col == "ari" else "distance gap")
    ax.axhline(0, color="0.3", lw=1)
    for bars, level in zip(ax.containers, D):
        ax.bar_label(bars, labels=[f"p={align.loc[(level, lab), 'p_' + col]:.3f}" for lab in LABELLINGS], fontsize=7)
axes[1].get_legend().remove()
fig.suptitle(f"Which labelling do the circuits follow? {MODEL}, {len(prompts)} prompts "
             f"(p: {N_PERM} seeded shuffles)", y=1.03)
plotting.savefig(fig, "accpp/05_ioi_alignment", profile=nb.profile)
align.round(3)

# %% [markdown]
# ## 5. Two-way PERMANOVA: template x order, circuit size as covariate
# The main statistic. The k-cut ARI above depends on the linkage and the cut and cannot separate
# template from order or from circuit size (larger circuits are closer in Jaccard distance by
# chance); PERMANOVA tests each term on the whole distance matrix, adjusted for the others
# (`accpp.clustering.permanova`: Freedman-Lane permutations, seeded).

# %%
sizes = np.array([len(c_) for c_ in comp])
perm = {level: cl.permanova(D[level], {"template": template, "order": order},
                            {"size": [len(x) for x in (comp if level == "components" else sig)]},
                            n_perm=N_PERM, seed=nb.seed) for level in D}
pd.concat(perm, names=["level", "term"]).round(4)

# %% [markdown]
# ## 6. The claim's check
# The pre-registered check (papers/accpp/claims.yaml) reads the PERMANOVA's template term on the
# component distances: p <= 0.05 (its R2 is recorded beside it, not judged: a ratio of sums of squares,
# above 0 on any data). The p is a Monte-Carlo estimate from `N_PERM`
# permutations, (1 + count) / (N_PERM + 1) with count the permutations whose F reaches the observed
# one; it is decided by its 95% Monte-Carlo interval (Clopper-Pearson of count over N_PERM), so it
# holds only if the whole interval is at most 0.05. The labelling (template or order) whose k-cut
# agrees best with the clusters (ARI, permutation p, distance gap) and the other terms are recorded
# beside it.

# %%
runtime_s = time.perf_counter() - t_start
config = dict(model=MODEL, templates=TEMPLATES, per_cell=PER_CELL, drawn_per_cell=DRAWN, n_traced=len(prompts),
              n_perm=N_PERM, distance="Jaccard on component sets (heads + MLPs)", linkage="average",
              permanova="template + order + template x order + size (type II, Freedman-Lane)",
              variant=circuits[0].meta["variant"])
assert all(len(s_) > 0 for s_ in comp), "an empty circuit"
assert np.allclose(D["components"], D["components"].T) and np.all(np.diag(D["components"]) == 0)
m = cl.measure_template_clusters(align, perm, cells, N_PERM, n_traced=len(prompts),
                                n_planned=len(TEMPLATES) * 2 * PER_CELL, config=config)
assert m.claim == "accpp/ioi-template-clusters"
v = claims.conclude(m, profile=nb.profile, seed=nb.seed)
print(f"notebook {runtime_s:.0f} s")
v
