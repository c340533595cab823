# %% [markdown]
# # ACC++ 02: Greater-Than circuits
#
# **Claim (accpp, §5, Greater-Than):** on prompts such as "The war lasted from the year 1732 to the
# year 17", ACC++ traces a circuit with year-comparison heads (heads that attend from the answer
# position to the start year's YY) and late MLPs, the structure that path patching found in GPT-2
# small (Hanna et al. 2023: heads 5.1, 5.5, 6.1, 6.9, 7.10, 8.8, 8.11, 9.1 attend to YY; MLPs 8-11
# turn that into probability on later years).
#
# **Checked here:** the model's Greater-Than behaviour (the exact distribution over the end year's
# YY', the probability difference P(YY' > YY) - P(YY' <= YY)), then ACC++ circuits of the year
# comparison: their size, which heads fire from the answer position onto YY, and how the direct
# effect splits between heads and MLPs by layer. Then a held-out test of the year heads: the traced
# prompts are split in two (seeded); heads are chosen on the first half in three ways (traced year
# heads, the heads attending most from the answer position to YY, the heads with the largest direct
# logit attribution) and knocked out at the answer position on the other half, each against 99
# random head sets of the same size. At `cpu`: SmolLM2-135M (offline), 32 prompts for behaviour,
# 16 traced. At `paper`: 256 prompts, 64 traced, on Gemma-3-270M or the Hub model in
# MODEL (e.g. "gpt2", the paper's model, which writes years as two-digit tokens: handled).
#
# How years are traced: SmolLM2 and Gemma write "1732" digit by digit, so the end year takes two
# predictions. The comparison is traced where the units digit is predicted, with the tens digit of
# the start year given ("... to the year 173"), and the metric is the mean logit of the units
# digits above YY's minus that of the others (`accpp.greater_than`, module docstring).

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import math
import time
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from accpp import families, figures
from accpp import greater_than as gt
from accpp import greater_than_claim as gtc
from accpp.graph import save_circuit, signal_ranks
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, notebook, paths, plotting

nb = notebook.start("accpp/02_greater_than", PROFILE, SEED, DEVICE, threads=1)
PROTOCOL = claims.protocol("accpp/greater-than-circuit", nb.profile)   # registered in claims.yaml
MODEL = MODEL or PROTOCOL["model"]
N_BEHAVIOUR = PROTOCOL["n_behaviour"]
N_TRACE = PROTOCOL["n_trace"]
N_RANDOM = PROTOCOL["n_random"]  # random head sets per knock-out
N_BOOT = PROTOCOL["n_boot"]      # bootstrap resamples of the traced prompts for the shares' intervals
OUT = paths.output_dir() / "accpp" / "02_greater_than"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Model and Greater-Than behaviour
# The end year's distribution is exact: for digit tokenizers P(YY' = 10a + b) = P(a | prompt) P(b | prompt, a),
# from one batch of ten continuations per prompt. Probabilities are raw: mass on other tokens counts for neither side.

# %%
t0 = time.perf_counter()
model, tok = load_model(MODEL, device=nb.device)
load_s = time.perf_counter() - t0
prompts = gt.gt_prompts(tok, n=N_BEHAVIOUR, seed=SEED)
yy = torch.tensor([p.yy for p in prompts])
dist = gt.year_distribution(model, tok, prompts, progress=True)
pdiff = gt.prob_diff(dist, yy)
units = gt.units_prob_diff(model, tok, prompts)
behaviour = pd.Series({"prob_diff": float(pdiff.mean()), "prob_diff > 0": float((pdiff > 0).float().mean()),
                       "year mass": float(dist.sum(1).mean()), "units prob_diff (traced position)": float(units.mean()),
                       "units prob_diff > 0": float((units > 0).float().mean())})
print(f"{MODEL}: year tokens as {prompts[0].mode}; loaded in {load_s:.1f} s; e.g. {prompts[0].text!r}")
behaviour.round(3)

# %%
order = torch.argsort(yy, stable=True)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.4, 1]})
sns.heatmap(dist[order].numpy(), ax=axes[0], cmap="viridis", cbar_kws={"label": "P(end year YY')"},
            xticklabels=10, yticklabels=False)
axes[0].plot(yy[order].numpy() + 0.5, np.arange(len(prompts)) + 0.5, color="white", lw=1.2, ls="--", label="YY' = YY")
axes[0].set(xlabel="end year YY'", ylabel="prompts, sorted by start year YY", title="where the probability goes")
axes[0].legend(loc="lower right", fontsize=8)
offset, mean_by_offset, _ = gt.mean_by_offset(dist, yy)  # NaN (not drawn) where no prompt reaches an offset
axes[1].plot(offset.numpy(), mean_by_offset.numpy(), color="#4C72B0")
axes[1].axvline(0.5, color="0.3", ls="--", lw=1)
axes[1].set(xlim=(-40, 60), xlabel="YY' - YY", ylabel="mean probability", title="probability against the offset from YY")
fig.suptitle(f"Greater-Than behaviour, {MODEL}: P(YY' > YY) - P(YY' <= YY) = {behaviour['prob_diff']:.2f} "
             f"on {len(prompts)} prompts")
plotting.savefig(fig, "accpp/02_greater_than_behaviour", profile=nb.profile)

# %% [markdown]
# ### Behaviour per template family (recorded apart from the claims)
# The same task in other wordings (`accpp.families.GT_FAMILIES`): `paper` (the authors' template),
# `other` (five of ours) and `initial` (five of ours that begin with the noun). The metric is the
# probability difference at the traced (units) position; rows are split by `answer_in_prompt`,
# whether a correct units digit already occurs in the traced input (a head could copy it). This
# table is not a claim's check; it is saved beside the figures.

# %%
family_rows = []
for fam_name in families.GT_FAMILIES:
    fam_prompts = families.gt_family_set(tok, fam_name, n=PROTOCOL["n_family"], seed=SEED)
    fam_units = gt.units_prob_diff(model, tok, fam_prompts)
    for by in (("family",), ("family", "answer_in_prompt")):
        family_rows.append(families.behaviour_table(fam_prompts, fam_units, by=by, metric="units_prob_diff",
                                                    model=MODEL))
by_family = pd.concat(family_rows, ignore_index=True)
plotting.save_table(by_family, "accpp/greater_than_behaviour_by_family", index=False)
by_family.round(3)

# %% [markdown]
# ## 2. ACC++ circuits of the year comparison
# Traced prompts: the first `N_TRACE` of the seeded set that the model solves at the traced position.
# Recursion goes through attention heads only; MLPs are leaves (the paper's rule), so a head that
# feeds an MLP rather than the logits shows up only through other heads' firings.

# %%
tracer = Tracer(model, tok, name=MODEL)
tracer.svd  # per-head SVDs, cached per model
L, H = tracer.arch.n_layers, tracer.arch.n_heads
LATE_FROM = math.ceil(2 * L / 3)  # the last third of the layers, as MLPs 8-11 of GPT-2 small's 12
chosen = [p for p, u in zip(prompts, units.tolist()) if u > 0][:N_TRACE]
circuits = [gt.trace_gt(tracer, p) for p in chosen]
rows = []
for c in circuits:
    shares = gt.seed_shares(c, LATE_FROM)
    heads_yy = gt.year_heads(c.graph, c.meta["pos"])
    rows.append(dict(yy=c.meta["yy"], metric=c.logit_diff, nodes=c.graph.number_of_nodes(), firings=c.n_firings,
                     year_heads=", ".join(heads_yy), n_year_heads=len(heads_yy), **shares, seconds=c.seconds))
table = pd.DataFrame(rows)
biggest = int(table["nodes"].idxmax())
save_circuit(circuits[biggest], OUT / "circuit_largest.json")
table.drop(columns=["mlp_layers"]).round(3)

# %%
c = circuits[biggest]
fig, ax = plt.subplots(figsize=(10, 7))
figures.draw_circuit(c.graph, c.tokens, ax=ax, title=f"{c.meta['text']!r} + tens digit (YY={c.meta['yy']:02d})")
fig.suptitle(f"ACC++ Greater-Than circuit, {MODEL} (blue: query-side signals, orange dashed: key-side, red: seeds)")
plotting.savefig(fig, "accpp/02_greater_than_circuit", profile=nb.profile)

# %% [markdown]
# ## 3. Where the direct effect comes from: seeds by kind and layer
# Seeds are the components of the final residual that carry the metric (their projections on the
# metric's direction). Summed over the traced prompts, by layer:

# %%
seeds_df = gtc.seed_table(circuits)  # one row per seed edge, with the index of its prompt
by_layer = seeds_df.pivot_table(index="layer", columns="kind", values="attribution", aggfunc="sum", fill_value=0.0)
by_layer = by_layer.reindex(range(L), fill_value=0.0) / len(circuits)
fig, ax = plt.subplots(figsize=(9, 3.6))
by_layer.plot.bar(stacked=True, ax=ax, width=0.85, color={"head": "#4C72B0", "mlp": "#DD8452", "emb": "0.6"})
ax.axvspan(LATE_FROM - 0.5, L - 0.5, color="0.92", zorder=0, label="last third of the layers")
ax.set(xlabel="layer", ylabel="mean seed attribution (logit units)",
       title=f"seeds of {len(circuits)} Greater-Than circuits by layer, {MODEL}")
ax.legend()
plotting.savefig(fig, "accpp/02_greater_than_seeds_by_layer", profile=nb.profile)
mlp_share, late_mlp_share = gtc.mlp_seed_shares(seeds_df, LATE_FROM)
share_ci = gtc.mlp_share_intervals(seeds_df, LATE_FROM, n_prompts=len(circuits), n_boot=N_BOOT)
print(f"MLPs carry {mlp_share:.2f} of the positive seed attribution (95% interval "
      f"{share_ci['mlp_share_ci_low']:.2f}-{share_ci['mlp_share_ci_high']:.2f}, prompts resampled); layers >= {LATE_FROM} "
      f"carry {late_mlp_share:.2f} of the MLPs' ({share_ci['late_mlp_share_ci_low']:.2f}-"
      f"{share_ci['late_mlp_share_ci_high']:.2f})")

# %% [markdown]
# ## 4. Year heads: chosen on one half, knocked out on the other
# The traced prompts are split in two (seeded). On the selection half, heads are chosen three ways:
# the traced year heads (a firing from the answer position onto YY in at least one circuit), the same
# number of heads with the most attention from the answer position to YY, and the same number with
# the largest direct logit attribution to the traced metric. On the test half each set is knocked out
# at the answer position (its output zeroed there), against 99 random sets of the same size drawn
# from the other heads; p = (1 + random sets dropping the probability difference at least as much) / 100.

# %%
sel_idx, test_idx = gt.split_half(list(range(len(chosen))), seed=nb.seed)
sel = [chosen[i] for i in sel_idx]
test = [chosen[i] for i in test_idx]
counts = Counter(h for i in sel_idx for h in gt.year_heads(circuits[i].graph, circuits[i].meta["pos"]))
traced_heads = sorted(gt.parse_head(h) for h in counts)
k_heads = max(1, len(traced_heads))
att = gt.attention_to_year(model, tok, sel)
dla = gt.head_dla(tracer, sel)
named = {"traced year heads": traced_heads, "attention to YY": gt.top_heads(att, k_heads),
         "direct logit attribution": gt.top_heads(dla, k_heads)}
ko = gt.knockout_comparison(tracer, test, named, n_random=N_RANDOM, seed=nb.seed, progress=True)
ko_table = gtc.knockout_table(ko, named)
print(f"selection {len(sel)} / test {len(test)} prompts; units prob_diff on the test half {ko['base']:.3f}")
ko_table.round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.5, 1]})
sns.heatmap(att.T.numpy(), ax=axes[0], cmap="mako_r", cbar_kws={"label": "attention from answer to YY"},
            xticklabels=2, yticklabels=1)
for layer, head in traced_heads:
    axes[0].add_patch(plt.Circle((layer + 0.5, head + 0.5), 0.45, fill=False, color="#C44E52", lw=2))
axes[0].set(xlabel="layer", ylabel="head", title="attention to YY, selection half (circles: traced year heads)")
for x, r in enumerate(ko["methods"].values()):
    axes[1].scatter(x + np.random.default_rng(x).uniform(-0.15, 0.15, len(r["random_drops"])), r["random_drops"],
                    color="0.6", s=10)
    axes[1].scatter([x], [r["drop"]], color="#C44E52", s=110, marker="D", zorder=3)
axes[1].axhline(0, color="0.3", lw=1)
axes[1].set_xticks(range(len(ko["methods"])))
axes[1].set_xticklabels([f"{n}\n(k={r['k']}, p={r['p']:.2f})" for n, r in ko["methods"].items()], fontsize=8)
axes[1].set(ylabel="drop in units prob_diff (test half)", title="knock-out (red) vs 99 random sets (grey)")
fig.suptitle(f"Greater-Than year heads, {MODEL}")
plotting.savefig(fig, "accpp/02_greater_than_year_heads", profile=nb.profile)

# %% [markdown]
# ## 5. The claim's check
# The pre-registered check (papers/accpp/claims.yaml): a year head in some traced circuit, MLPs
# carrying most of the direct effect and the late MLPs most of that, and the traced year heads'
# held-out knock-out beyond random head sets (knockout_p); the model must do the task
# (precondition). The two other head choices are evidence. Each judged quantity is decided by its
# 95% interval, not its point value: the fraction of circuits with a year head by its Clopper-Pearson
# interval over the traced circuits (its low end is above 0 exactly when one circuit has a year
# head); the two shares, pooled ratios over the traced prompts, by a percentile bootstrap over the
# prompts; knockout_p by its Monte-Carlo interval (Clopper-Pearson of the count of random sets at
# least as extreme, over the number of random sets), so it holds only if the whole interval is at
# most 0.05.

# %%
ranks = [r for c in circuits for r in signal_ranks(c.graph)]
assert len(circuits) >= min(8, N_TRACE), f"only {len(circuits)} prompts solved at the traced position"
m = gtc.measure_greater_than_circuit(
    table, seeds_df, ko, named, ranks, prob_diff=behaviour["prob_diff"], late_from=LATE_FROM, n_random=N_RANDOM,
    config=dict(model=MODEL, mode=prompts[0].mode, n_behaviour=len(prompts), n_traced=len(circuits),
                n_selection=len(sel), n_test=len(test), late_from=LATE_FROM, n_random=N_RANDOM, n_boot=N_BOOT,
                variant=circuits[0].meta["variant"]), n_boot=N_BOOT)
assert m.claim == "accpp/greater-than-circuit"
v = claims.conclude(m, profile=nb.profile, seed=nb.seed)
v
