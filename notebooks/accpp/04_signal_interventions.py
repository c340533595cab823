# %% [markdown]
# # ACC++ 04: removing a traced signal at one head's query or key input
#
# **Claim (accpp, §5, interventions):** removing a traced signal (the upstream component's part on
# the signal's singular directions of W_Q W_K^T, at the downstream head's query or key input only)
# moves the task metric a lot while the residual stream barely changes (cosine about 0.99), unlike
# removing a random subspace of the same size.
#
# **Checked here:** IOI prompts that the model solves are traced with ACC++; for the signal edges
# of highest attribution into the seed firings (the head firings that write the logit difference,
# mostly name movers), the signal is removed at that head's query (query-side edge) or key
# (key-side edge) input alone, and so is a random subspace of the same rank drawn from the head's
# other singular directions (same component, same token, several seeded draws). Measured: the
# change of the IOI logit difference logit(IO) - logit(S), the change of the downstream firing's
# attention weight A_ds, and the cosine between the final residual at the answer position with and
# without the intervention (also the cosine at the head's input, for the size of the removal). At
# `cpu`: SmolLM2-135M (offline), 5 traced prompts x 4 edges x (signal + 4 random draws). At
# `paper`: Gemma-3-270M (or the Hub model named in MODEL), 48 prompts x 8 edges x (signal + 10 draws).
# The intervention's derivation is in the docstring of `accpp.interventions`.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from accpp import datasets, ioi
from accpp.interventions import Intervener, compare_subspaces, top_seed_edges
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, plotting, profiles

PROFILE = profiles.check(PROFILE)
plotting.use_style()
torch.manual_seed(SEED)
torch.set_num_threads(2)
MODEL = MODEL or profiles.pick(PROFILE, cpu="smollm2-135m", paper="gemma-3-270m")
N_CANDIDATES = profiles.pick(PROFILE, cpu=16, paper=128)  # prompts evaluated to find solved ones
N_PROMPTS = profiles.pick(PROFILE, cpu=5, paper=48)  # traced and intervened on
EDGES_PER_PROMPT = profiles.pick(PROFILE, cpu=4, paper=8)
N_RANDOM = profiles.pick(PROFILE, cpu=4, paper=10)
t_start = time.perf_counter()

# %% [markdown]
# ## 1. Solved IOI prompts and their circuits

# %%
model, tok = load_model(MODEL)
prompts = datasets.ioi_mixed(tok, n=N_CANDIDATES, seed=SEED)
metrics = datasets.evaluate(model, prompts)
good = [p for p, ld in zip(prompts, metrics.logit_diff.tolist()) if ld > 0]
abba = [p for p in good if p.order == "ABBA"]
baba = [p for p in good if p.order == "BABA"]
chosen = ([p for pair in zip(abba, baba) for p in pair] + abba[len(baba):] + baba[len(abba):])[:N_PROMPTS]
tracer = Tracer(model, tok, name=MODEL)
t0 = time.perf_counter()
circuits = [ioi.trace_ioi(tracer, p) for p in chosen]
trace_s = time.perf_counter() - t0
print(f"{MODEL}: {len(good)}/{len(prompts)} prompts solved; traced {len(circuits)} in {trace_s:.0f} s")
pd.DataFrame([ioi.circuit_row(c) for c in circuits])[["order", "text", "logit_diff", "firings", "signal_edges"]]

# %% [markdown]
# ## 2. Interventions: each signal vs random same-size subspaces
# Edges: per prompt, the `EDGES_PER_PROMPT` signal edges of highest attribution into the seed
# firings. Random draws use the seeds `1000 * SEED + 100 * edge + r`, so they are reproducible.

# %%
rows = []
t0 = time.perf_counter()
for i, (p, c) in enumerate(zip(chosen, circuits)):
    iv = Intervener(tracer, p.ids(), p.io_id, p.s_id)
    for j, spec in enumerate(top_seed_edges(c.graph, EDGES_PER_PROMPT)):
        for r in compare_subspaces(iv, spec, N_RANDOM, seed=1000 * SEED + 100 * (i * EDGES_PER_PROMPT + j)):
            rows.append(r.row() | dict(prompt=i, order=p.order, edge=f"p{i}:{j}"))
interv_s = time.perf_counter() - t0
df = pd.DataFrame(rows)
df["abs_ld_change"] = df["metric_change"].abs()
df["rel_ld_change"] = df["metric_change"] / df["metric_before"]
df["attn_drop"] = df["attn_before"] - df["attn_after"]
n_edges = int((df["subspace"] == "signal").sum())
print(f"{n_edges} signal edges x (1 + {N_RANDOM} random) = {len(df)} interventions in {interv_s:.0f} s")
sig = df[df["subspace"] == "signal"]
sig[["signal", "rank", "metric_before", "metric_change", "attn_before", "attn_after", "traced_drop",
     "final_resid_cos", "head_input_cos"]].round(4)

# %% [markdown]
# The model's A_ds after removing a signal should equal the tracer's own prediction for that edge
# (A_ds minus the edge's `drop`): same score change, now through the real forward pass (float32
# model, so agreement to ~1e-6, not 1e-12).

# %%
consistency = float((sig["attn_after"] - (sig["attn_before"] - sig["traced_drop"])).abs().max())
print(f"max |A_after - (A - traced drop)| over {n_edges} signal removals: {consistency:.2e}")

# %% [markdown]
# ## 3. Summary: signal vs random

# %%
summary = df.groupby("subspace").agg(
    interventions=("metric_change", "size"),
    median_abs_ld_change=("abs_ld_change", "median"),
    mean_ld_change=("metric_change", "mean"),
    median_rel_ld_change=("rel_ld_change", "median"),
    median_attn_drop=("attn_drop", "median"),
    median_final_resid_cos=("final_resid_cos", "median"),
    min_final_resid_cos=("final_resid_cos", "min"),
    median_head_input_cos=("head_input_cos", "median"),
    median_removed_norm=("removed_norm_ratio", "median"),
).T
# per edge: does the signal move the metric more than every one of its random draws?
rand_max = df[df["subspace"] == "random"].groupby("edge")["abs_ld_change"].max()
sig_abs = sig.set_index("edge")["abs_ld_change"]
beats_all = float((sig_abs > rand_max.reindex(sig_abs.index)).mean())  # aligned by edge id, not by order
ld_ratio = summary.loc["median_abs_ld_change", "signal"] / summary.loc["median_abs_ld_change", "random"]
cos_med = float(summary.loc["median_final_resid_cos", "signal"])
cos_min = float(summary.loc["min_final_resid_cos", "signal"])
print(f"median |dLD| signal / random = {ld_ratio:.1f}; signal beats all its random draws on {beats_all:.0%} of edges")
summary.round(4)

# %%
palette = {"signal": sns.color_palette("colorblind")[3], "random": sns.color_palette("colorblind")[7]}
order = ["signal", "random"]
fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))
kw = dict(data=df, x="subspace", order=order, hue="subspace", hue_order=order, palette=palette, legend=False)
sns.boxplot(ax=axes[0], y="metric_change", showfliers=False, width=0.5, **kw)
sns.stripplot(ax=axes[0], y="metric_change", size=3.5, alpha=0.6, jitter=0.2, **kw)
axes[0].axhline(0, color="0.3", lw=0.8)
axes[0].set(ylabel="change of logit(IO) - logit(S)", xlabel="", title="(a) task metric")
sns.boxplot(ax=axes[1], y="attn_drop", showfliers=False, width=0.5, **kw)
sns.stripplot(ax=axes[1], y="attn_drop", size=3.5, alpha=0.6, jitter=0.2, **kw)
axes[1].axhline(0, color="0.3", lw=0.8)
axes[1].set(ylabel="drop of A_ds (downstream firing)", xlabel="", title="(b) attention weight")
cos_long = df.melt(id_vars=["subspace"], value_vars=["final_resid_cos", "head_input_cos"], var_name="where",
                   value_name="cos")
cos_long["where"] = cos_long["where"].map({"final_resid_cos": "final residual", "head_input_cos": "head input"})
cos_long["1 - cos"] = (1 - cos_long["cos"]).clip(lower=1e-9)
sns.boxplot(ax=axes[2], data=cos_long, x="where", y="1 - cos", hue="subspace", hue_order=order, palette=palette,
            showfliers=False, width=0.6, log_scale=True)
axes[2].axhline(0.01, color="0.3", ls="--", lw=0.8)
axes[2].text(-0.45, 0.013, "cos = 0.99 (paper)", ha="left", va="bottom", fontsize=8, color="0.3")
axes[2].set(xlabel="", ylim=(5e-10, 0.1), title="(c) residual change (1 - cosine)")
axes[2].legend(title="", loc="lower left", fontsize=8)
sns.scatterplot(ax=axes[3], data=df, x="removed_norm_ratio", y="abs_ld_change", hue="subspace", hue_order=order,
                palette=palette, s=22, alpha=0.75)
axes[3].set(xscale="log", yscale="log", xlabel="|removed| / |head input|", ylabel="|change of logit diff|",
            title="(d) effect vs size of removal")
axes[3].legend(title="", fontsize=8)
fig.suptitle(f"Removing traced signals vs random same-rank subspaces at one head's input: {MODEL}, "
             f"{len(chosen)} IOI prompts, {n_edges} edges, {N_RANDOM} random draws each")
fig.tight_layout()
plotting.savefig(fig, "accpp/04_signal_interventions", profile=PROFILE)

# %% [markdown]
# Panel (d) shows the sizes: a signal carries more of its component's norm than a random set of
# the same number of singular directions (that is part of what makes it a signal), but at equal
# removed norm the signals still move the metric far more than random directions do.
#
# ## 4. Checks and recorded value
# Thresholds, set after measuring at `cpu` (measured: median |dLD| ratio ~18, the signal beating all
# its random draws on every edge, signal median final-residual cosine ~0.9997, minimum ~0.999):
# the claim counts as holding when the median
# |change of the logit difference| of signal removals is at least 5x that of random same-rank
# removals AND the median final-residual cosine of signal removals is at least 0.99. The recorded
# value is that median cosine (the paper's 0.99). Sanity asserts: the interventions reproduce the
# tracer's predicted attention drops, and removing signals lowers A_ds for every edge. The claim's
# check is recorded at every profile and asserted at `cpu` (where it was measured to hold).

# %%
config = dict(model=MODEL, n_prompts=len(chosen), edges_per_prompt=EDGES_PER_PROMPT, n_edges=n_edges,
              n_random=N_RANDOM, edges="top attribution into seed firings", metric="logit(IO) - logit(S)")
holds = bool(ld_ratio >= 5 and cos_med >= 0.99)
assert consistency < 1e-3, consistency
assert (sig["attn_drop"] > 0).all(), sig[["signal", "attn_drop"]]
med = summary["signal"], summary["random"]
claims.record(
    "accpp/intervention-selective", cos_med, unit="residual cosine", profile=PROFILE, seed=SEED, config=config,
    check=holds,
    note=(f"{MODEL}, {len(chosen)} IOI prompts, {n_edges} signal edges into seed firings, {N_RANDOM} random "
          f"same-rank draws each. Median |dLD| signal {med[0]['median_abs_ld_change']:.3f} vs random "
          f"{med[1]['median_abs_ld_change']:.4f} (x{ld_ratio:.0f}; mean dLD {med[0]['mean_ld_change']:+.3f} vs "
          f"{med[1]['mean_ld_change']:+.4f}; signal beats all its draws on {beats_all:.0%} of edges); median A_ds "
          f"drop {med[0]['median_attn_drop']:.3f} vs {med[1]['median_attn_drop']:.4f}; final-residual cosine "
          f"median {cos_med:.4f} (min {cos_min:.4f}) vs random {med[1]['median_final_resid_cos']:.5f}; "
          f"head-input cosine median {med[0]['median_head_input_cos']:.4f}"))
print(f"total {time.perf_counter() - t_start:.0f} s;", dict(ld_ratio=round(float(ld_ratio), 1), cos_med=cos_med,
                                                            beats_all=beats_all, consistency=consistency))
if PROFILE == "cpu":  # the measured cpu result, held in place; at `paper` the verdict is recorded as it comes
    assert holds, (ld_ratio, cos_med)
