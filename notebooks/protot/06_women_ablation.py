# %% [markdown]
# # ProtoT 06: the "women" prototype, found by its label, and what its mask does
#
# **Claim (protot, §6 intervention):** reinitialising or masking the "women/female" prototype
# (L9 P7 of the large model; male: L9 P18) lowers p("women") (the paper's size of the drop is in
# `claims.yaml`), while perplexity changes by less than 1%.
#
# **Checked here:** as the paper finds its prototype, by its label. On the **training** split, the
# alive prototype (gate share at least a tenth of an even share) whose write or read profile most
# singles out female words (" women", " woman", " girls", " she", " her", " mother", " female" ...)
# against matched non-gender words (" workers", " person", " students", " they", " their",
# " friend", " adult" ...) is selected; its label must earn the name (female words get on average
# at least twice the gate of their matched words, and at least half of them are among its top-10
# tokens), otherwise the claim is *inconclusive* with that named. The selected prototype is then
# masked and reinitialised on **validation** contexts before " women", reported per stratum:
# **coordination** (the context ends in " and"/" or"), **topical** (a gender word earlier in the
# window), and the **rest**. Specificity: non-gender human groups (" people", " children") and
# gender-free coordination continuations ("supply and -> demand") must drop less; " girls",
# " female", " mothers" are shown (a female prototype should lower them too). Controls: masks of
# alive prototypes of the same layer only. Perplexity on 128 random validation blocks with a
# bootstrap interval, against the same controls.
#
# **The causal scan stays as its own, weaker claim** (`women-causal-scan`): every prototype masked
# on training contexts, the largest drop of p(" women") wins, judged the same way; the class of
# its winner (female / coordination / other) is recorded. Every rule, word list and sample size
# was written in `claims.yaml` before this notebook measured them.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from compendium import claims, notebook, plotting, profiles
from protot import ablation, concepts, women
from protot.train import packing

nb = notebook.start("protot/06_women_ablation", PROFILE, SEED, DEVICE,
                    threads=profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
# The registered protocol (papers/protot/claims.yaml, shared by the three women claims): model,
# selection rule, sample sizes and aggregation per profile.
PROTOCOL = claims.protocol("protot/women-prototype-ablation", nb.profile)
SETTINGS = women.women_settings(PROTOCOL, seed=nb.seed)
MODEL = MODEL or PROTOCOL["model"]
WORD = PROTOCOL["word"]
PAPER_DROP = claims.get_claim("protot/women-prototype-ablation").paper_value       # % (claims.yaml)
PAPER_PPL = claims.get_claim("protot/women-ablation-ppl").paper_value              # % upper bound

lm = concepts.load_model(MODEL, device=nb.device)
model, tok = lm.model, lm.tokenizer
print("model:", lm.description)
train_stream, val = packing.token_stream("train"), packing.token_stream("validation")
weights_before = {n: v.detach().clone() for n, v in model.state_dict().items()}

# %% [markdown]
# ## Selection by label (training split), causal scan (training split), judgement (validation)

# %%
label_m, ppl_m, scan_m = women.measure_women(model.to(nb.device), tok, train_stream, val, word=WORD, seed=nb.seed,
                                              model_name=lm.description, **SETTINGS)
ev, v = label_m.evidence, label_m.values
print(f"selected by label: {ev['prototype']} ({ev['selection_gate']} gate; score {ev['selection_score']:.3f} = mean "
      f"ln(gate on female word / gate on matched word); female words among its top-10 tokens: "
      f"{100 * ev['female_top_share']:.0f}%); labelled female: {v['labelled_female']}; runner-up {ev['runner_up']}")
print("  top write tokens:", ev["label"]["write_tokens"])
print("  top read tokens: ", ev["label"]["read_tokens"])
print("  top contexts:    ", ev["label"]["top_contexts"])
print(f"{ev['dead_prototypes']} dead prototypes (alive per layer {ev['alive_per_layer']})")
label_m.tables["women_label_scores"].head(8).round(3)

# %% [markdown]
# ## The strata table: drop of mean p(" women") under each selected prototype's mask

# %%
strata = label_m.tables["women_strata"]
strata[["selected_by", "prototype", "stratum", "contexts", "p_intact", "p_edited", "drop_pct", "ci_low_pct",
        "ci_high_pct"]].round(4)

# %%
sv, sev = scan_m.values, scan_m.evidence
print(f"causal scan: {sev['candidates_scanned']} prototypes on {sev['selection_contexts']} training contexts; winner "
      f"{sev['prototype']} (training drop {sev['selected_train_drop_pct']:.2f}%, runner-up {sev['runner_up']} "
      f"{sev['runner_up_train_drop_pct']:.2f}%); class {sev['class']!r}; labelled female: {sev['label']['labelled']}")
print("  top write tokens:", sev["label"]["write_tokens"])
print("  top read tokens: ", sev["label"]["read_tokens"])
pd.concat([label_m.tables["women_specificity"].assign(selected_by="label"),
           scan_m.tables["women_scan_specificity"].assign(selected_by="scan")])[
    ["selected_by", "word", "split", "contexts", "p_intact", "p_edited", "drop_pct", "ci_low_pct", "ci_high_pct"]].round(4)

# %%
ppl_table = ppl_m.tables["women_ppl"]
print(f"perplexity on {ppl_m.values['ppl_blocks']} random validation blocks: intact {ppl_m.evidence['ppl_intact']:.2f}")
ppl_table.round(4)

# %% [markdown]
# ## Figure
# Left: drop of mean p(" women") per stratum with 95% intervals, for the prototype selected by
# label and for the causal scan's winner; the paper's value dashed. Middle: the same masks on other
# words and gender-free coordination continuations. Right: perplexity change (128 random blocks,
# 95% interval) of the label-selected prototype's edits and of its alive same-layer controls.

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.4, 1.6, 1.3]})
ax = axes[0]
for i, (key, g) in enumerate(strata.groupby("selected_by", sort=False)):
    x = np.arange(len(g)) + (i - 0.5) * 0.35 * (strata.selected_by.nunique() - 1)
    ax.bar(x, g.drop_pct, width=0.35, label=f"{key}: {g.prototype.iloc[0]}", color=f"C{i}")
    ax.errorbar(x, g.drop_pct, yerr=[g.drop_pct - g.ci_low_pct, g.ci_high_pct - g.drop_pct], fmt="none", color="k", capsize=3)
ax.set_xticks(range(3), [f"{s}\n(n={n})" for s, n in zip(strata.stratum[:3], strata.contexts[:3])])
plotting.paper_line(ax, PAPER_DROP, f"paper (L9 P7): {PAPER_DROP:g}%")
ax.axhline(0, color="0.6", lw=0.8)
ax.set_ylabel('drop of mean p(" women") (%)'); ax.legend(fontsize=8)
ax.set_title("Per stratum (validation)", fontsize=10)
ax = axes[1]
spec = pd.concat([label_m.tables["women_specificity"].assign(selected_by="label"),
                  scan_m.tables["women_scan_specificity"].assign(selected_by="scan")])
words = list(dict.fromkeys(spec.word))
for i, (key, g) in enumerate(spec.groupby("selected_by", sort=False)):
    g = g.set_index("word").loc[words]
    x = np.arange(len(words)) + (i - 0.5) * 0.35
    ax.bar(x, g.drop_pct, width=0.35, color=f"C{i}", label=key)
    ax.errorbar(x, g.drop_pct, yerr=[g.drop_pct - g.ci_low_pct, g.ci_high_pct - g.drop_pct], fmt="none", color="k", capsize=2)
ax.set_xticks(range(len(words)), [w.replace("gender-free coordination", "coord.\npairs") for w in words], fontsize=8)
ax.axhline(0, color="0.6", lw=0.8); ax.legend(fontsize=8)
ax.set_ylabel("drop of mean p(word) (%)"); ax.set_title("Specificity", fontsize=10)
ax = axes[2]
y = np.arange(len(ppl_table))
ax.errorbar(ppl_table.ppl_change_pct, y, xerr=[ppl_table.ppl_change_pct - ppl_table.ci_low_pct,
                                               ppl_table.ci_high_pct - ppl_table.ppl_change_pct],
            fmt="o", color="k", capsize=3)
ax.set_yticks(y, ppl_table.edit, fontsize=7.5); ax.invert_yaxis()
ax.axvline(0, color="0.6", lw=0.8)
ax.axvline(PAPER_PPL, color="C2", ls="--", lw=1, label=f"paper: < {PAPER_PPL:g}%")
ax.set_xlabel("perplexity change (%)"); ax.legend(fontsize=8)
ax.set_title(f"Perplexity ({ppl_m.values['ppl_blocks']} random blocks)", fontsize=10)
fig.tight_layout()
plotting.savefig(fig, "protot/women_ablation", profile=nb.profile)
plt.show()

# %% [markdown]
# ## Verdicts
# `conclude` records each measurement in this run's folder, then applies the check registered in
# `claims.yaml` before this measurement (its `history` gives the earlier checks and verdicts). Every
# condition is decided by its 95% interval over contexts (or blocks): whole interval on the claim's side
# passes, wholly on the other side fails, straddling leaves the verdict inconclusive.
# women-prototype-ablation: the label must earn "female" (precondition), and the mask must lower
# p(" women") by at least 5%, in the topical stratum by more than 0, more than for human groups and
# gender-free coordination continuations (specificity margin > 0), and more than any alive same-layer
# control (control margin > 0), on at least 30 validation contexts (min_units). women-ablation-ppl: the
# perplexity change within [-1%, 1%] and the edit more targeted than its controls, on at least 128 blocks.
# women-causal-scan: the scan's winner by the same tests, without the label and topical conditions.

# %%
assert all(torch.equal(t, weights_before[n]) for n, t in model.state_dict().items()), "the edits were not undone exactly"
assert all(not m.mask_write and not m.mask_read for m in model.mixers())
assert ppl_m.values["ppl_blocks"] == SETTINGS["ppl_blocks"] and set(strata.stratum) == set(ablation.STRATA)


def strata_text(m):
    return "; ".join(f"{s} {m.values[f'{s}_drop_pct']:.2f}% [{m.values[f'{s}_ci_low_pct']:.2f}, "
                     f"{m.values[f'{s}_ci_high_pct']:.2f}] (n={m.values[f'{s}_contexts']})" for s in ablation.STRATA)


scale = f"Model: {lm.description}; the paper's L9 P7 does not exist in it."
label_m.note = (
    f"Selected by label on the training split: {ev['prototype']} ({ev['selection_gate']} gate, score {ev['selection_score']:.3f}, "
    f"female words among its top-10 tokens {100 * ev['female_top_share']:.0f}%; top write tokens [{ev['label']['write_tokens']}]); "
    f"labelled female: {v['labelled_female']}. On {ev['validation_contexts']} validation contexts its mask lowers mean p(women) "
    f"by {v['drop_pct']:.2f}% (95% CI {v['ci_low_pct']:.2f}..{v['ci_high_pct']:.2f}); per stratum: {strata_text(label_m)}. "
    "Other words: " + ", ".join(f"{w!r} {d:+.2f}%" for w, d in ev["other_drops_pct"].items())
    + f"; largest alive same-layer control drop {max(ev['control_drops_pct'].values(), default=float('nan')):.2f}%. "
    f"Specificity margin {v['specificity_margin']:+.2f} points (95% CI {v['specificity_margin_ci_low']:+.2f}.."
    f"{v['specificity_margin_ci_high']:+.2f}), control margin {v['control_margin']:+.2f} ({v['control_margin_ci_low']:+.2f}.."
    f"{v['control_margin_ci_high']:+.2f}). "
    f"Context effect on ' women' {v['context_effect_nats']:.3f} nats. " + scale)
ppl_m.note = (
    f"Perplexity on {ppl_m.values['ppl_blocks']} random validation blocks: {ppl_m.evidence['ppl_intact']:.2f} intact, "
    f"{ppl_m.values['ppl_change_pct']:+.3f}% with {ppl_m.evidence['prototype']} masked (95% CI "
    f"{ppl_m.values['ppl_ci_low_pct']:+.3f}..{ppl_m.values['ppl_ci_high_pct']:+.3f}); alive same-layer controls: "
    + ", ".join(f"{e.replace('control ', '')} {c:+.3f}%" for e, c in ppl_m.evidence["control_ppl_change_pct"].items())
    + f"; target_vs_controls {ppl_m.values['target_vs_controls']:.2f} points (95% CI "
    f"{ppl_m.values['target_vs_controls_ci_low']:.2f}..{ppl_m.values['target_vs_controls_ci_high']:.2f}). " + scale)
scan_m.note = (
    f"Causal scan winner {sev['prototype']} ({sev['candidates_scanned']} prototypes, {sev['selection_contexts']} training "
    f"contexts; training drop {sev['selected_train_drop_pct']:.2f}%), class {sev['class']!r} (top write tokens "
    f"[{sev['label']['write_tokens']}]). Validation drop {sv['drop_pct']:.2f}% (95% CI {sv['ci_low_pct']:.2f}.."
    f"{sv['ci_high_pct']:.2f}); per stratum: {strata_text(scan_m)}. Other words: "
    + ", ".join(f"{w!r} {d:+.2f}%" for w, d in sev["other_drops_pct"].items())
    + f". Specificity margin {sv['specificity_margin']:+.2f} points (95% CI {sv['specificity_margin_ci_low']:+.2f}.."
    f"{sv['specificity_margin_ci_high']:+.2f}), control margin {sv['control_margin']:+.2f} ({sv['control_margin_ci_low']:+.2f}.."
    f"{sv['control_margin_ci_high']:+.2f}). " + scale)
assert (label_m.claim, ppl_m.claim, scan_m.claim) == (
    "protot/women-prototype-ablation", "protot/women-ablation-ppl", "protot/women-causal-scan")
label_v = claims.conclude(label_m, profile=nb.profile, seed=nb.seed)
ppl_v = claims.conclude(ppl_m, profile=nb.profile, seed=nb.seed)
scan_v = claims.conclude(scan_m, profile=nb.profile, seed=nb.seed)
display(label_v)
display(ppl_v)
scan_v
