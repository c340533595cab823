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
# effect splits between heads and MLPs by layer. Two checks that do not use the tracer: each head's
# attention from the answer position to YY, and knocking out the traced year heads at the answer
# position against knocking out as many random heads. At `cpu`: SmolLM2-135M (offline), 32 prompts
# for behaviour, 16 traced. At `paper`: 256 prompts, 64 traced, on Gemma-3-270M or the Hub model in
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
import random
import time
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from accpp import figures
from accpp import greater_than as gt
from accpp.graph import save_circuit, signal_ranks
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, paths, plotting, profiles

PROFILE = profiles.check(PROFILE)
plotting.use_style()
torch.manual_seed(SEED)
torch.set_num_threads(2)
MODEL = MODEL or profiles.pick(PROFILE, cpu="smollm2-135m", paper="gemma-3-270m")
N_BEHAVIOUR = profiles.pick(PROFILE, cpu=32, paper=256)
N_TRACE = profiles.pick(PROFILE, cpu=16, paper=64)
N_RANDOM = profiles.pick(PROFILE, cpu=19, paper=99)  # random head sets for the knock-out baseline
OUT = paths.output_dir() / "accpp" / "02_greater_than"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Model and Greater-Than behaviour
# The end year's distribution is exact: for digit tokenizers P(YY' = 10a + b) = P(a | prompt) P(b | prompt, a),
# from one batch of ten continuations per prompt. Probabilities are raw: mass on other tokens counts for neither side.

# %%
t0 = time.perf_counter()
model, tok = load_model(MODEL)
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
offset = np.arange(-99, 100)
mean_by_offset = np.array([float(np.nanmean([dist[i, int(yy[i]) + o].item() if 0 <= int(yy[i]) + o < 100 else np.nan
                                              for i in range(len(prompts))])) for o in offset])
axes[1].plot(offset, mean_by_offset, color="#4C72B0")
axes[1].axvline(0.5, color="0.3", ls="--", lw=1)
axes[1].set(xlim=(-40, 60), xlabel="YY' - YY", ylabel="mean probability", title="probability against the offset from YY")
fig.suptitle(f"Greater-Than behaviour, {MODEL}: P(YY' > YY) - P(YY' <= YY) = {behaviour['prob_diff']:.2f} "
             f"on {len(prompts)} prompts")
plotting.savefig(fig, "accpp/02_greater_than_behaviour", profile=PROFILE)

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
fig, ax = plt.subplots(figsize=(12, 7))
figures.draw_circuit(c.graph, c.tokens, ax=ax, title=f"{c.meta['text']!r} + tens digit (YY={c.meta['yy']:02d})")
fig.suptitle(f"ACC++ Greater-Than circuit, {MODEL} (blue: query-side signals, green: key-side, red: seeds)")
plotting.savefig(fig, "accpp/02_greater_than_circuit", profile=PROFILE)

# %% [markdown]
# ## 3. Where the direct effect comes from: seeds by kind and layer
# Seeds are the components of the final residual that carry the metric (their projections on the
# metric's direction). Summed over the traced prompts, by layer:

# %%
seed_rows = []
for c in circuits:
    for u, _, d in c.graph.edges(data=True):
        if d["side"] == "seed":
            node = c.graph.nodes[u]
            seed_rows.append(dict(kind=node["kind"], layer=node["layer"], attribution=d["attribution"]))
seeds_df = pd.DataFrame(seed_rows)
by_layer = seeds_df.pivot_table(index="layer", columns="kind", values="attribution", aggfunc="sum", fill_value=0.0)
by_layer = by_layer.reindex(range(L), fill_value=0.0) / len(circuits)
fig, ax = plt.subplots(figsize=(9, 3.6))
by_layer.plot.bar(stacked=True, ax=ax, width=0.85, color={"head": "#4C72B0", "mlp": "#DD8452", "emb": "0.6"})
ax.axvspan(LATE_FROM - 0.5, L - 0.5, color="0.92", zorder=0, label="last third of the layers")
ax.set(xlabel="layer", ylabel="mean seed attribution (logit units)",
       title=f"seeds of {len(circuits)} Greater-Than circuits by layer, {MODEL}")
ax.legend()
plotting.savefig(fig, "accpp/02_greater_than_seeds_by_layer", profile=PROFILE)
mlp_total = seeds_df.query("kind == 'mlp' and attribution > 0")["attribution"].sum()
late_mlp = seeds_df.query("kind == 'mlp' and attribution > 0 and layer >= @LATE_FROM")["attribution"].sum()
late_mlp_share = float(late_mlp / mlp_total) if mlp_total > 0 else float("nan")
mlp_share = float(seeds_df.query("kind == 'mlp' and attribution > 0")["attribution"].sum()
                  / seeds_df.query("attribution > 0")["attribution"].sum())
print(f"MLPs carry {mlp_share:.2f} of the positive seed attribution; layers >= {LATE_FROM} carry {late_mlp_share:.2f} of the MLPs'")

# %% [markdown]
# ## 4. Year heads: traced, attending, and needed
# Left: each head's attention from the answer position to the start year's YY tokens (mean over the
# traced prompts), with the heads that fire onto YY in at least one traced circuit circled. Right:
# the units-digit probability difference when the traced year heads write nothing at the answer
# position, against knocking out as many heads drawn at random from the other heads (seeded).

# %%
att = gt.attention_to_year(model, tok, chosen)
counts = Counter(h for c in circuits for h in gt.year_heads(c.graph, c.meta["pos"]))
traced_heads = [tuple(int(x) for x in h[1:].split(".")) for h in counts]
rank = torch.argsort(torch.argsort(att.flatten(), descending=True))  # 0 = most attention to YY
percentile = [1 - float(rank[layer * H + head]) / (L * H) for layer, head in traced_heads]
others = [(layer, head) for layer in range(L) for head in range(H) if (layer, head) not in set(traced_heads)]
rng = random.Random(SEED)
head_sets = [[], traced_heads] + [rng.sample(others, len(traced_heads)) for _ in range(N_RANDOM)]
knocked = gt.units_prob_diff_knockouts(tracer, chosen, head_sets, progress=True)  # (sets, prompts)
base_u, ko = knocked[0], knocked[1]
year_drop = float((base_u - ko).mean())
random_drops = (base_u[None] - knocked[2:]).mean(1).numpy()
p_random = float((1 + (random_drops >= year_drop).sum()) / (1 + len(random_drops)))
heads_table = pd.DataFrame([dict(head=f"A{l}.{h}", circuits=counts[f"A{l}.{h}"], attention_to_yy=float(att[l, h]),
                                 attention_percentile=pct) for (l, h), pct in zip(traced_heads, percentile)])
print(f"knocking out {len(traced_heads)} traced year heads: units prob_diff {float(base_u.mean()):.3f} -> "
      f"{float(ko.mean()):.3f} (drop {year_drop:.3f}); random heads: drop {random_drops.mean():.3f} "
      f"(max {random_drops.max():.3f}), p = {p_random:.3f}")
heads_table.sort_values("circuits", ascending=False).round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.5, 1]})
sns.heatmap(att.T.numpy(), ax=axes[0], cmap="mako_r", cbar_kws={"label": "attention from answer to YY"},
            xticklabels=2, yticklabels=1)
for layer, head in traced_heads:
    axes[0].add_patch(plt.Circle((layer + 0.5, head + 0.5), 0.45, fill=False, color="#C44E52", lw=2))
axes[0].set(xlabel="layer", ylabel="head", title="attention to the start year's YY (circles: traced year heads)")
sns.stripplot(y=random_drops, ax=axes[1], color="0.55", size=6, jitter=0.15, label="random heads")
axes[1].scatter([0], [year_drop], color="#C44E52", s=120, zorder=3, marker="D", label="traced year heads")
axes[1].axhline(0, color="0.3", lw=1)
axes[1].set(ylabel="drop in units prob_diff", xticks=[], title=f"knock-out of {len(traced_heads)} heads at the answer position")
handles, labels = axes[1].get_legend_handles_labels()
axes[1].legend(handles[-2:], labels[-2:], loc="upper right", fontsize=8)
fig.suptitle(f"Greater-Than year heads, {MODEL}")
plotting.savefig(fig, "accpp/02_greater_than_year_heads", profile=PROFILE)

# %% [markdown]
# ### Reading the result
# At the `cpu` profile (SmolLM2-135M, 16 traced prompts) the late-MLP half of the claim is what the
# tracer sees first: in most circuits the seeds are MLPs of the last third of the layers and nothing
# else, so the circuit stops there (MLPs are leaves). Year heads appear in the few circuits where a
# head also writes the answer directly; the heads found that way are among the 3% of heads that
# attend most from the answer to YY, and knocking out just those few heads at the answer position
# removes nearly all of the Greater-Than behaviour while random heads do nothing. So the heads are
# there and necessary, but most of their effect runs through the late MLPs, which the paper's
# tracing rule does not expand: a per-prompt circuit that ends at an MLP seed is incomplete in a
# predictable way, and the fraction recorded below measures that, not the heads' importance.
#
# At the `paper` profile (Gemma-3-270M, 256 behaviour and 64 traced prompts, run on a CPU) the picture
# is the same for the MLPs (0.80 of the seed attribution, 0.99 of that from the last third) and a
# quarter of the circuits contain a year head (three heads, among the 17% attending most to YY),
# but the knock-out does not single them out: removing them halves the probability difference
# (0.76 -> 0.36), while some random three-head sets remove even more (up to 1.5; p = 0.19 over 99
# sets), so that part of the check, and with it the claim, is recorded as not holding there.

# %% [markdown]
# ## 5. Checks at this scale, and the claims ledger
# * the model does Greater-Than: mean probability difference > 0.5 over the behaviour prompts;
# * late MLPs: MLPs carry most of the circuits' direct effect (> 50% of the positive seed
#   attribution) and the last third of the layers carries most of the MLPs' part (> 50%);
# * year heads: at least one traced circuit has a head firing from the answer position onto YY,
#   and knocking out the traced year heads lowers the units probability difference more than
#   every one of the random head sets of the same size.
# The recorded value is the fraction of traced circuits with at least one year head; the recorded
# check is all of the above. At `cpu` the checks are also asserted (they hold there, and the asserts
# keep that result in place); at `paper` the verdict is recorded as it comes.

# %%
frac_year = float((table["n_year_heads"] > 0).mean())
ranks = [r for c in circuits for r in signal_ranks(c.graph)]
config = dict(model=MODEL, mode=prompts[0].mode, n_behaviour=len(prompts), n_traced=len(circuits),
              late_from=LATE_FROM, n_random=N_RANDOM, year_heads=sorted(counts))
checks = {"does Greater-Than": behaviour["prob_diff"] > 0.5, "MLPs carry the direct effect": mlp_share > 0.5,
          "late MLPs carry the MLPs' part": late_mlp_share > 0.5, "a traced year head": frac_year > 0,
          "year heads needed beyond random heads": year_drop > random_drops.max()}
holds = all(checks.values())
assert len(circuits) >= min(8, N_TRACE), f"only {len(circuits)} prompts solved at the traced position"
claims.record("accpp/greater-than-circuit", frac_year, unit="fraction of circuits with a year head",
              profile=PROFILE, seed=SEED, config=config, check=bool(holds),
              note=f"{MODEL}, {len(circuits)} traced prompts; prob_diff {behaviour['prob_diff']:.2f}; MLPs carry "
                   f"{mlp_share:.2f} of the seed attribution, layers >= {LATE_FROM} {late_mlp_share:.2f} of the MLPs'; "
                   f"{len(traced_heads)} year heads ({', '.join(sorted(counts))}); knocking them out drops the units "
                   f"prob_diff by {year_drop:.3f} vs {random_drops.mean():.3f} for random heads (max {random_drops.max():.3f})")
print(dict(prob_diff=behaviour["prob_diff"], frac_year=frac_year, mlp_share=mlp_share, late_mlp_share=late_mlp_share,
           year_drop=year_drop, random_drop_max=float(random_drops.max()), holds=bool(holds),
           rank1=sum(r == 1 for r in ranks) / max(len(ranks), 1)))
if PROFILE == "cpu":  # the measured cpu result, held in place; at `paper` the verdict is recorded as it comes
    assert holds, {k: bool(v) for k, v in checks.items()}
