# %% [markdown]
# # ProtoT 07: robustness of the next-token distribution to meaning-preserving edits
#
# **Claim (protot, §6, robustness):** next-token distributions are robust to meaning-preserving
# edits; Jensen-Shannon divergence (JSD) per edit type: abbreviation 0.0498, punctuation 0.3982,
# spelling 0.026, synonym 0.1132, typos 0.2074 (values from an aggregator, not verified against the
# paper; their unit, log base and protocol are unknown to us). The paper's brief adds that the
# robustness is mediated by prototype routing.
#
# **Checked here:** our own rule-based, seeded edit generators (`protot.robustness`: hand-written
# word lists for abbreviations, US/UK spelling and synonyms; punctuation rules; one-letter typos)
# applied to contexts of 150-400 characters (~30-90 tokens) from the **validation** split. The edit
# falls anywhere before the last word; we compare the next-token distribution at the **end** of the
# context (same continuation point) between original and edited text, as JSD in **bits** (base 2,
# bounded by 1; nats = bits x ln 2), for our two small CPU models trained on the same data and
# tokenizer: ProtoT (`models/protot-cpu`) and LLaMA (`models/llama-cpu`), 4 layers x 256, ~2 M
# training tokens, validation perplexity ~190 and ~249 — weak models whose next-token distributions
# are broad, so divergences are not on the paper's scale and any difference between the models is
# a statement about these two small models only. "Robust" is judged against a meaning-*changing*
# control of the same size (one word replaced by a random unrelated word). We also report the JSD
# right after the edit (the prediction of the first token after it), which is on the paper's
# order of magnitude, and for ProtoT the *routing change*: the total-variation distance between the
# read-gate distributions over prototypes at the final position, its correlation with the JSD, and
# how much JSD remains when the edited run's final-position read gates are set to the original's.
# The `paper` profile uses paper-scale models when they are committed and 10x more pairs.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from compendium import claims, data, plotting, profiles
from protot import robustness as rb
from protot.train import pretrained
from protot.train import tokenizer as tk

PROFILE = profiles.check(PROFILE)
plotting.use_style()
torch.set_num_threads(profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
torch.manual_seed(SEED)
T0 = time.time()
N_PER_TYPE = profiles.pick(PROFILE, cpu=200, paper=2000)    # pairs per edit type (at most: one per context)
MIN_PAIRS = profiles.pick(PROFILE, cpu=200, paper=400)      # required per type (abbreviation/spelling sites are rare)
N_CONTROL = profiles.pick(PROFILE, cpu=100, paper=1000)     # meaning-changing control pairs
MIN_CHARS, MAX_CHARS = 150, 400                             # context length (characters)
BATCH = profiles.pick(PROFILE, cpu=32, paper=128)
N_BOOT = 2000
PAPER = rb.PAPER_JSD
TYPES = list(rb.EDIT_TYPES)

# models: the committed CPU models; at the paper profile the paper-scale ones when committed
wanted = profiles.pick(PROFILE, cpu=[("protot-cpu", "llama-cpu")],
                       paper=[("protot-large", "llama-large"), ("protot-paper", "llama-paper"), ("protot-cpu", "llama-cpu")])
NAMES = next(pair for pair in wanted if set(pair) <= set(pretrained.available()))
if PROFILE == "paper" and NAMES == ("protot-cpu", "llama-cpu"):
    print("WARNING: no paper-scale models are committed (models/); using the CPU models with more pairs")
models = {"ProtoT": pretrained.load(NAMES[0], device=DEVICE), "LLaMA": pretrained.load(NAMES[1], device=DEVICE)}
for k, m in models.items():
    print(f"{k}: {pretrained.describe(m.name)}")
tok = models["ProtoT"].tokenizer
BOS = tk.eos_id()        # documents are separated by <|endoftext|> in training: it opens every context

# %% [markdown]
# ## Edit pairs from the validation split
# One context per paragraph (a sentence start to just before a word), contexts visited in a seeded
# order per edit type, each used at most once per type. The rule mix shows what each type is made of.

# %%
docs = data.load_corpus("validation")
contexts = rb.make_contexts(docs["text"], min_chars=MIN_CHARS, max_chars=MAX_CHARS, seed=SEED)
pairs = rb.make_pairs(contexts, {**{t: N_PER_TYPE for t in TYPES}, rb.CONTROL: N_CONTROL},
                      types=rb.ALL_TYPES, seed=SEED)
print(f"{len(docs)} validation documents -> {len(contexts)} contexts; {len(pairs)} pairs")
rule_mix = (pairs.groupby("edit_type")["rule"].value_counts(normalize=True).groupby(level=0).head(4)
            .rename("share").reset_index())
display(pairs.groupby("edit_type").agg(pairs=("rule", "size"), rules_used=("rule", "nunique"),
                                        median_chars_after_edit=("chars_after", "median")))
rule_mix.round(3)

# %%
rng = np.random.default_rng(SEED)
pd.set_option("display.max_colwidth", 120)
ex = pairs.groupby("edit_type", sort=False).head(3).copy()
ex["context (end)"] = ["..." + o[-90:] for o in ex.original]
ex[["edit_type", "rule", "before", "after", "chars_after", "context (end)"]]

# %% [markdown]
# ## Next-token divergences
# Both texts of every pair through both models (batched by token length, no padding). `jsd`: at
# the end of the context; `jsd_after_edit`: the prediction of the first token after the edit. For
# ProtoT also the routing change and the JSD with the final-position routing restored.

# %%
t = time.time()
scores = {name: rb.score_pairs(lm.model, tok, pairs, batch_size=BATCH, device=DEVICE, bos=BOS,
                               restore_routing=name == "ProtoT", desc=name)
          for name, lm in models.items()}
print(f"scored {len(pairs)} pairs with both models in {time.time() - t:.0f} s")
df = pd.concat([pairs] + [s.add_prefix(f"{n}_") for n, s in scores.items()], axis=1)
long = pd.concat([pairs[["edit_type"]].assign(model=n, jsd=s.jsd, jsd_after_edit=s.jsd_after_edit,
                                              tokens_after=s.tokens_after) for n, s in scores.items()],
                 ignore_index=True)


def summarise(col):
    rows = []
    for (typ, model), g in long.groupby(["edit_type", "model"], sort=False):
        lo, hi = rb.bootstrap_ci(g[col], n_boot=N_BOOT, seed=SEED)
        rows.append({"edit_type": typ, "model": model, "mean": g[col].mean(), "ci_lo": lo, "ci_hi": hi,
                     "median": g[col].median(), "n": len(g)})
    return pd.DataFrame(rows)


end, after = summarise("jsd"), summarise("jsd_after_edit")
order = TYPES + [rb.CONTROL]
table = (end.pivot(index="edit_type", columns="model", values=["mean", "ci_lo", "ci_hi", "median"])
         .reindex(order))
table.columns = [f"{m} {s}" for s, m in table.columns]
table = table[[f"{m} {s}" for m in models for s in ("mean", "ci_lo", "ci_hi", "median")]]
table["ProtoT after edit"] = after.query("model == 'ProtoT'").set_index("edit_type")["mean"]
table["LLaMA after edit"] = after.query("model == 'LLaMA'").set_index("edit_type")["mean"]
table["paper"] = pd.Series(PAPER)
table["n"] = pairs.groupby("edit_type").size()
print("JSD in bits (mean with 95% bootstrap interval, median); 'after edit': mean JSD of the prediction "
      "of the first token after the edit")
table.round(5)

# %% [markdown]
# ## Figure: JSD per edit type, both models, paper values marked
# Log scale: the end-of-context divergences are ~100x smaller than the paper's values; the
# divergences right after the edit are on the paper's scale.

# %%
palette = {"ProtoT": "C0", "LLaMA": "C1"}
fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.6), sharey=True)
for ax, summ, title in [(axes[0], end, "at the end of the context (the claim's measure here)"),
                        (axes[1], after, "just after the edit (first token after it)")]:
    for j, model in enumerate(models):
        s = summ[summ.model == model].set_index("edit_type").reindex(order)
        x = np.arange(len(order)) + (j - 0.5) * 0.22
        ax.errorbar(x, s["mean"], yerr=[s["mean"] - s.ci_lo, s.ci_hi - s["mean"]], fmt="o", ms=7, capsize=3,
                    color=palette[model], label=f"{model}: mean, 95% CI")
        ax.scatter(x, s["median"], marker="_", s=120, color=palette[model], lw=2,
                   label=f"{model}: median" if ax is axes[0] else None)
    ax.scatter(np.arange(len(TYPES)), [PAPER[t] for t in TYPES], marker="D", s=55, color="k", zorder=5,
               label="paper (aggregator; unit unknown)")
    ax.axvspan(len(TYPES) - 0.5, len(TYPES) + 0.5, color="0.92", zorder=0)
    ax.set_xticks(np.arange(len(order)), [o if o != rb.CONTROL else "control:\nrandom word" for o in order],
                  rotation=25, ha="right", rotation_mode="anchor")
    ax.set_yscale("log"); ax.set_title(title, fontsize=10.5)
    ax.set_xlim(-0.5, len(order) - 0.5)
axes[0].set_ylabel("JSD of next-token distributions (bits)")
handles, labels = axes[0].get_legend_handles_labels()
fig.suptitle(f"Meaning-preserving edits: {N_PER_TYPE} pairs per type from the validation split, "
             f"ProtoT vs LLaMA (small CPU models)", fontsize=11.5, fontweight="bold")
fig.tight_layout(rect=(0, 0.05, 1, 1))
fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, -0.01))
plotting.savefig(fig, "protot/07_robustness_jsd", profile=PROFILE)
plt.show()

# %% [markdown]
# ## ProtoT vs LLaMA, paired over the same edits
# Difference of mean end-of-context JSD (ProtoT - LLaMA), with a paired bootstrap interval; negative
# means ProtoT's next-token distribution moved less.

# %%
cmp_rows = []
for typ in order:
    g = df[df.edit_type == typ]
    lo, hi = rb.paired_bootstrap_ci(g.ProtoT_jsd, g.LLaMA_jsd, n_boot=N_BOOT, seed=SEED)
    lo2, hi2 = rb.paired_bootstrap_ci(g.ProtoT_jsd_after_edit, g.LLaMA_jsd_after_edit, n_boot=N_BOOT, seed=SEED)
    cmp_rows.append({"edit_type": typ, "ProtoT - LLaMA (end)": g.ProtoT_jsd.mean() - g.LLaMA_jsd.mean(),
                     "ci_lo": lo, "ci_hi": hi, "ProtoT < LLaMA pairs (end)": (g.ProtoT_jsd < g.LLaMA_jsd).mean(),
                     "ProtoT - LLaMA (after edit)": g.ProtoT_jsd_after_edit.mean() - g.LLaMA_jsd_after_edit.mean(),
                     "ci_lo (after)": lo2, "ci_hi (after)": hi2})
compare = pd.DataFrame(cmp_rows).set_index("edit_type")
compare.round(5)

# %% [markdown]
# ## Is the divergence carried by the prototype routing? (ProtoT)
# `route_tv`: total-variation distance between original and edited read-gate distributions at the
# final position, averaged over the 4 layers. Both it and the JSD shrink with the distance between
# edit and end, so the rank correlation is also shown controlling for that distance and for the
# LLaMA JSD of the same pair (a model-independent measure of how disruptive the edit is).
# `restored`: the end JSD when the edited run reads its channels with the original run's
# final-position read gates (all layers; the channel contents still carry the edit).

# %%
P = df[df.edit_type != rb.CONTROL]
rho = rb.spearman(P.ProtoT_route_tv, P.ProtoT_jsd)
rho_ci = rb.spearman_ci(P.ProtoT_route_tv, P.ProtoT_jsd, n_boot=500, seed=SEED)
rho_dist = rb.partial_spearman(P.ProtoT_route_tv, P.ProtoT_jsd, P.ProtoT_tokens_after)
rho_llama = rb.partial_spearman(P.ProtoT_route_tv, P.ProtoT_jsd, P.LLaMA_jsd)
rho_dist_jsd = rb.spearman(P.ProtoT_tokens_after, P.ProtoT_jsd)
restored_share = 1 - P.ProtoT_jsd_restored.sum() / P.ProtoT_jsd.sum()
restored_ci = rb.bootstrap_ci(P.ProtoT_jsd - P.ProtoT_jsd_restored, n_boot=N_BOOT, seed=SEED)
route_rows = []
for typ in order:
    g = df[df.edit_type == typ]
    route_rows.append({"edit_type": typ, "route_tv mean": g.ProtoT_route_tv.mean(),
                       **{f"route_tv L{l}": g[f"ProtoT_route_tv_L{l}"].mean()
                          for l in range(models["ProtoT"].model.config.num_hidden_layers)},
                       "spearman(route_tv, jsd)": rb.spearman(g.ProtoT_route_tv, g.ProtoT_jsd),
                       "JSD mean": g.ProtoT_jsd.mean(), "JSD restored mean": g.ProtoT_jsd_restored.mean(),
                       "share removed": 1 - g.ProtoT_jsd_restored.sum() / g.ProtoT_jsd.sum()})
routing = pd.DataFrame(route_rows).set_index("edit_type")
print(f"pooled over the {len(P)} meaning-preserving pairs: Spearman(route_tv, JSD) = {rho:.3f} "
      f"(95% CI {rho_ci[0]:.3f}..{rho_ci[1]:.3f}); controlling for tokens between edit and end {rho_dist:.3f}; "
      f"controlling for the LLaMA JSD {rho_llama:.3f}; Spearman(tokens after edit, JSD) = {rho_dist_jsd:.3f}")
print(f"restoring the final-position routing removes {100 * restored_share:.1f}% of the summed end JSD "
      f"(mean reduction per pair {P.ProtoT_jsd.mean() - P.ProtoT_jsd_restored.mean():.2e} bits, 95% CI "
      f"{restored_ci[0]:.2e}..{restored_ci[1]:.2e}); median per-pair share "
      f"{100 * np.median(1 - P.ProtoT_jsd_restored / P.ProtoT_jsd):.1f}%")
routing.round(5)

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
hue_order = order
pal = dict(zip(order, sns.color_palette("colorblind", len(order))))
ax = axes[0]
sns.scatterplot(data=df, x="ProtoT_route_tv", y="ProtoT_jsd", hue="edit_type", hue_order=hue_order, palette=pal,
                s=14, alpha=0.6, linewidth=0, ax=ax)
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("routing change: TV of final read gates (mean over layers)"); ax.set_ylabel("ProtoT JSD at the end (bits)")
ax.set_title(f"Routing change vs JSD (Spearman {rho:.2f};\npartial | distance {rho_dist:.2f}, | LLaMA JSD {rho_llama:.2f})",
             fontsize=10)
ax.legend(fontsize=7.5, markerscale=1.5, title=None, loc="upper left")
ax = axes[1]
bins = [1, 4, 8, 16, 32, 64, 1000]
bin_names = ["1-3", "4-7", "8-15", "16-31", "32-63", "64+"]
long["dist"] = pd.cut(long.tokens_after, bins, right=False, labels=bin_names)
dist = long[long.edit_type != rb.CONTROL].groupby(["model", "dist"], observed=False)["jsd"].agg(["mean", "median", "size"]).reset_index()
for model in models:
    d = dist[(dist.model == model) & (dist["size"] > 0)]
    xs = [bin_names.index(b) for b in d.dist]
    ax.plot(xs, d["mean"], "o-", color=palette[model], label=f"{model}: mean")
    ax.plot(xs, d["median"], "s--", color=palette[model], alpha=0.6, ms=4, label=f"{model}: median")
counts = dist[dist.model == "ProtoT"].set_index("dist")["size"]
ax.set_xticks(range(len(bin_names)), [f"{b}\n(n={counts.get(b, 0)})" for b in bin_names], fontsize=8.5)
ax.set_yscale("log")
ax.set_xlabel("tokens between the edit and the end"); ax.set_ylabel("JSD at the end (bits)")
ax.set_title("Divergence fades with distance from the edit\n(all meaning-preserving types)", fontsize=10)
ax.legend(fontsize=7.5)
ax = axes[2]
x = np.arange(len(order))
ax.bar(x - 0.2, routing["JSD mean"], 0.4, color="C0", label="ProtoT: edited")
ax.bar(x + 0.2, routing["JSD restored mean"], 0.4, color="C0", alpha=0.45, hatch="//",
       label="edited, final read gates restored")
ax.set_xticks(x, [o if o != rb.CONTROL else "control" for o in order], rotation=20)
ax.set_ylabel("mean JSD at the end (bits)")
ax.set_title("Restoring the final-position routing", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
plotting.savefig(fig, "protot/07_robustness_routing", profile=PROFILE)
plt.show()

# %% [markdown]
# ## What this scale shows (cpu profile, seed 0)
# * At the end of the context the divergences are tiny (means ~1e-3 bit, medians ~1e-4 bit) and
#   heavy-tailed: a few pairs with the edit close to the end carry the mean (middle panel above:
#   the JSD falls by ~100x from 1-3 to 32-63 tokens between edit and end, for both models).
# * The meaning-*changing* control is not clearly above the meaning-preserving edits at the end of
#   the context (its mean lies inside their range, for both models): these small models' next-token
#   distribution is little affected by *any* one-word edit ~20 tokens back, so the small JSDs here
#   are insensitivity more than robustness to meaning. Just after the edit the divergences are on the
#   paper's scale (0.15-0.36 bit), and only synonym and spelling edits fall clearly below the
#   control there.
# * ProtoT vs LLaMA: no difference at the end of the context (paired intervals include 0 for every
#   type); just after the edit ProtoT moves *more* than LLaMA for spelling, synonym and typos.
# * Routing: the change of ProtoT's final read gates tracks the JSD (Spearman ~0.65, ~0.5 after
#   controlling for distance or for the LLaMA JSD of the same pair), and setting the edited run's
#   final read gates back to the original's removes ~20% of the summed JSD (median per pair ~0%):
#   the routing at the predicting position carries a minority of the divergence; most of it goes
#   through the channel contents. Correlation is not mediation, and these are 4-layer models.
#
# ## Check
# The checks below were fixed after a pilot run of the five edit types at this profile (same seed),
# before the control was measured; they are recorded as measured whichever way they come out.
#
# * Sanity: every JSD finite and within [0, 1] bit, every pair's last word unchanged.
# * **Robust** (the claim's qualitative part): for ProtoT, every meaning-preserving edit type has a
#   lower mean end-of-context JSD than the meaning-changing control, with the 95% bootstrap interval
#   of the difference below 0.
# * **Per-type values** (the quantitative part): the magnitudes are not comparable (the unit, the
#   position of the edit and the measured position are unknown for the paper, and our models are
#   weak), so we test the unit-free part: the ordering of the five edit types by ProtoT's mean JSD
#   must agree with the paper's (Spearman rho >= 0.7, i.e. at most a few adjacent swaps).
# * The claim's check holds only if both hold. ProtoT vs LLaMA and the routing analysis are
#   reported, not part of the check: the paper reports ProtoT's values only, and at this scale a
#   correlation between routing change and JSD cannot separate routing from any other internal
#   change.

# %%
assert np.isfinite(df.filter(like="jsd")).all().all() and (df.filter(like="jsd") >= 0).all().all()
assert (df.filter(like="jsd") <= 1).all().all(), "a JSD above 1 bit"
assert all(o.split()[-1] == e.split()[-1] for o, e in zip(df.original, df.edited))
assert (pairs.groupby("edit_type").size().reindex(TYPES) >= MIN_PAIRS).all(), "too few pairs for some type"
ctrl = df[df.edit_type == rb.CONTROL]
vs_control = {}
for typ in TYPES:
    g = df[df.edit_type == typ]
    vs_control[typ] = rb.unpaired_bootstrap_ci(g.ProtoT_jsd, ctrl.ProtoT_jsd, n_boot=N_BOOT, seed=SEED)
robust = all(hi < 0 for lo, hi in vs_control.values())
vs_control_after = {t: rb.unpaired_bootstrap_ci(df.loc[df.edit_type == t, "ProtoT_jsd_after_edit"], ctrl.ProtoT_jsd_after_edit,
                                                n_boot=N_BOOT, seed=SEED) for t in TYPES}
below_after = [t for t, (lo, hi) in vs_control_after.items() if hi < 0]
ours = {t: float(df.loc[df.edit_type == t, "ProtoT_jsd"].mean()) for t in TYPES}
ours_after = {t: float(df.loc[df.edit_type == t, "ProtoT_jsd_after_edit"].mean()) for t in TYPES}
rho_order = rb.spearman([ours[t] for t in TYPES], [PAPER[t] for t in TYPES])
rho_order_after = rb.spearman([ours_after[t] for t in TYPES], [PAPER[t] for t in TYPES])
rho_order_llama = rb.spearman([df.loc[df.edit_type == t, "LLaMA_jsd"].mean() for t in TYPES], [PAPER[t] for t in TYPES])
order_holds = rho_order >= 0.7
print("ProtoT mean end JSD minus control, 95% CI:", {t: tuple(round(v, 5) for v in ci) for t, ci in vs_control.items()})
print("same just after the edit:", {t: tuple(round(v, 4) for v in ci) for t, ci in vs_control_after.items()})
print(f"robust vs control for every type: {robust}; ordering vs paper: rho {rho_order:.2f} (end), "
      f"{rho_order_after:.2f} (after edit), LLaMA {rho_order_llama:.2f} (end) -> holds: {order_holds}")
print(f"notebook time {time.time() - T0:.0f} s")

# %%
ci = {t: rb.bootstrap_ci(df.loc[df.edit_type == t, "ProtoT_jsd"], n_boot=N_BOOT, seed=SEED) for t in TYPES}
ci_llama = {t: rb.bootstrap_ci(df.loc[df.edit_type == t, "LLaMA_jsd"], n_boot=N_BOOT, seed=SEED) for t in TYPES}
fmt = lambda d: ", ".join(f"{t} {v:.4g}" for t, v in d.items())
config = {"models": {k: pretrained.describe(m.name) for k, m in models.items()}, "pairs_per_type": N_PER_TYPE,
          "control_pairs": N_CONTROL, "contexts": len(contexts), "context_chars": [MIN_CHARS, MAX_CHARS],
          "split": "validation", "jsd_unit": "bits (base 2)", "measured_at": "end of context (last word never edited)",
          "bos": "<|endoftext|>", "n_boot": N_BOOT}
claims.record(
    "protot/robustness-jsd", {t: round(v, 6) for t, v in ours.items()}, unit="JSD (bits)",
    profile=PROFILE, seed=SEED, config=config, check=robust and order_holds,
    note=(f"ProtoT ({NAMES[0]}), mean JSD in bits of the next-token distribution at the end of a 150-400 character "
          f"validation context, original vs edited ({N_PER_TYPE} pairs per type; the edit falls before the last word, "
          f"median {int(df.ProtoT_tokens_after.median())} tokens before the end). 95% CIs: "
          + "; ".join(f"{t} {ours[t]:.4g} ({ci[t][0]:.4g}..{ci[t][1]:.4g})" for t in TYPES)
          + f". LLaMA ({NAMES[1]}): " + "; ".join(
              f"{t} {df.loc[df.edit_type == t, 'LLaMA_jsd'].mean():.4g} ({ci_llama[t][0]:.4g}..{ci_llama[t][1]:.4g})"
              for t in TYPES)
          + f". Meaning-changing control (random word): ProtoT {ctrl.ProtoT_jsd.mean():.4g}, LLaMA {ctrl.LLaMA_jsd.mean():.4g}; "
          f"robust vs control for every type: {robust}. Ordering of the types vs the paper's: Spearman {rho_order:.2f} "
          f"(check needs >= 0.7). Magnitudes at the end of the context are {min(PAPER[t] / ours[t] for t in TYPES):.0f}-"
          f"{max(PAPER[t] / ours[t] for t in TYPES):.0f}x below the paper's values; just after the edit "
          f"(prediction of the first token after it) ProtoT gives {fmt(ours_after)} (ordering rho {rho_order_after:.2f}), "
          f"the paper's order of magnitude, vs control {ctrl.ProtoT_jsd_after_edit.mean():.3g} (below the control with "
          f"CI < 0 only for: {', '.join(below_after) or 'none'}); the paper's unit (bits/nats, JSD or JS distance) and protocol are unknown. "
          f"Routing (ProtoT): Spearman(read-gate TV at the final position, JSD) {rho:.2f} (CI {rho_ci[0]:.2f}..{rho_ci[1]:.2f}), "
          f"partial given edit-to-end distance {rho_dist:.2f}, given LLaMA JSD {rho_llama:.2f}; restoring the final-position "
          f"read gates removes {100 * restored_share:.0f}% of the summed JSD. Weak models (validation ppl ~190 / ~249, "
          f"~2 M training tokens): not the paper's scale."))
