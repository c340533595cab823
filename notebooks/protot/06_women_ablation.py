# %% [markdown]
# # ProtoT 06: ablating the "women" prototype
#
# **Claim (protot, §6 intervention):** reinitialising or masking the "women/female" prototype
# (L9 P7 of the large model; male: L9 P18) lowers p("women") (the paper's size of the drop is in
# `claims.yaml`), while perplexity changes by less than 1%.
#
# **Checked here:** the paper's L9 P7 does not exist in our small models, so the prototype is
# *chosen by its causal effect* on the **training** split: on windows just before occurrences of
# " women", each candidate (layer, prototype) is masked in turn (removed from the write and read
# softmax of its layer) and the one whose mask lowers the mean p(" women") most is selected. Every
# prototype of every layer is scanned at both profiles (the `paper` profile on more and longer windows);
# `candidates=n` bounds the scan to the n most gate-selective, which on our cpu-small model picks mostly
# prototypes with almost no gate mass (see the claim's history). The selected prototype is then judged on the **validation** split: the drop of mean
# p(" women") under the mask (bootstrap interval over contexts), its specificity (the same mask on
# p(" men"), p(" he"), p(" she")), same-layer control prototypes, random single-prototype masks over
# all layers, and the perplexity change. A power precondition comes first: the model must use
# context to predict " women" at all (`protot.context_use`: mean log p(" women") with 128 tokens of
# left context minus with the last 8). The checks were written in `claims.yaml` before this
# notebook measured them.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = "protot-cpu-small"

# %%
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch

from compendium import claims, notebook, plotting, profiles
from protot import concepts
from protot.train import packing

nb = notebook.start("protot/06_women_ablation", PROFILE, SEED, DEVICE,
                    threads=profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
WORD = " women"
OTHER_WORDS = (" men", " he", " she")                                  # does the edit single out " women"?
SETTINGS = profiles.pick(
    nb.profile,
    cpu=dict(candidates=None, select_windows=48, select_context=64, context=64, max_contexts=None,
             other_contexts=48, n_controls=5, n_random=12, reinit_seeds=(nb.seed,), ppl_blocks=8),
    paper=dict(candidates=None, select_windows=512, select_context=256, context=256, max_contexts=None,
               other_contexts=512, n_controls=None, n_random=64, reinit_seeds=tuple(range(nb.seed, nb.seed + 5)),
               ppl_blocks=512),
)
PAPER_DROP = claims.get_claim("protot/women-prototype-ablation").paper_value       # % (claims.yaml)
PAPER_PPL = claims.get_claim("protot/women-ablation-ppl").paper_value              # % upper bound

lm = concepts.load_model(MODEL, device=nb.device)
model, tok = lm.model, lm.tokenizer
print("model:", lm.description)
train_stream, val = packing.token_stream("train"), packing.token_stream("validation")
weights_before = {n: v.detach().clone() for n, v in model.state_dict().items()}

# %% [markdown]
# ## Select by causal effect (training split), judge on validation

# %%
ablation_m, ppl_m = concepts.measure_women_ablation(
    model.to(nb.device), tok, train_stream, val, word=WORD, other_words=OTHER_WORDS, seed=nb.seed,
    model_name=lm.description, **SETTINGS)
ev, v = ablation_m.evidence, ablation_m.values
scan = ablation_m.tables["women_selection_scan"]
print(f"scanned {ev['candidates_scanned']} prototypes on {ev['selection_contexts']} training contexts: selected "
      f"{ev['selected']} (drop {ev['selected_train_drop_pct']:.2f}% on training contexts; runner-up "
      f"{ev['runner_up']} {ev['runner_up_train_drop_pct']:.2f}%)")
scan.head(8).round(5)

# %%
edits = ablation_m.tables["women_ablation_edits"]
edits[["group", "edit", "p_mean", "drop_pct", "drop_ci_low", "drop_ci_high", "ppl", "ppl_change_pct"]].round(4)

# %%
ablation_m.tables["women_ablation_specificity"].round(5)

# %% [markdown]
# ## Figure: the selected prototype against controls, random masks and the paper
# Left: drop of mean p(" women") on the validation contexts (positive: it went down) for the mask
# and reinitialisations of the selected prototype, masks of same-layer controls and of random
# prototypes of any layer; the paper's value dashed. Middle: the same mask on other words. Right:
# the context effect on " women" (the precondition) and the perplexity change under the mask.

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 4), gridspec_kw={"width_ratios": [2.2, 1.2, 1.3]})
ax = axes[0]
sns.stripplot(data=edits, x="group", y="drop_pct", hue="kind", size=7, ax=ax, order=["selected", "control", "random"],
              palette={"none": "0.7", "mask": "C3", "reinit": "C1"})
sel = edits[edits.group == "selected"].iloc[1:]
ax.errorbar(np.zeros(len(sel)), sel.drop_pct, yerr=[sel.drop_pct - sel.drop_ci_low, sel.drop_ci_high - sel.drop_pct],
            fmt="none", color="k", capsize=3)
plotting.paper_line(ax, PAPER_DROP, f"paper (L9 P7): {PAPER_DROP:g}%")
ax.axhline(0, color="0.6", lw=0.8)
ax.set_ylabel('drop of mean p(" women") (%)'); ax.set_xlabel("")
ax.set_title(f"Selected {ev['selected']} vs controls ({ev['validation_contexts']} validation contexts)", fontsize=10)
ax.legend(fontsize=8)
ax = axes[1]
spec = ablation_m.tables["women_ablation_specificity"]
ax.bar([WORD] + list(spec.word), [v["drop_pct"]] + list(spec.drop_pct), color=["C3"] + ["0.5"] * len(spec))
ax.axhline(0, color="0.6", lw=0.8)
ax.set_ylabel("drop of mean p(word) under the mask (%)"); ax.set_title("Specificity", fontsize=10)
ax = axes[2]
ax.bar(["context effect\n(nats)", "perplexity\nchange (%)"], [v["context_effect_nats"], ppl_m.values["ppl_change_pct"]],
       color=["C0", "C2"])
ax.errorbar([0], [v["context_effect_nats"]], yerr=[[v["context_effect_nats"] - ev["context_effect_ci_low"]],
                                                   [ev["context_effect_ci_high"] - v["context_effect_nats"]]],
            fmt="none", color="k", capsize=4)
ax.axhline(0.1, color="C0", ls=":", lw=1, label="precondition: context effect >= 0.1")
ax.axhline(PAPER_PPL, color="C2", ls="--", lw=1, label=f"paper: perplexity change < {PAPER_PPL:g}%")
ax.set_title("Power and perplexity", fontsize=10); ax.legend(fontsize=7.5)
fig.tight_layout()
plotting.savefig(fig, "protot/women_ablation", profile=nb.profile)
plt.show()

# %% [markdown]
# ## Verdicts
# `conclude` records each measurement in this run's folder, then applies the check registered in
# `claims.yaml` (after a first measurement; its `history` gives the earlier checks and verdicts): the
# ablation claim needs a drop of at least 5% with its interval
# above 0, larger than the drop of p(" men"), p(" he"), p(" she") and than any same-layer control;
# the perplexity claim holds only as a pair (perplexity moves less than 1% *and* the selected mask
# lowers p(" women") more than the 95th percentile of random masks), with the edit's own effect as a
# precondition. Both need the model to use context (precondition uses-context).

# %%
assert all(torch.equal(t, weights_before[n]) for n, t in model.state_dict().items()), "the edits were not undone exactly"
assert all(not m.mask_write and not m.mask_read for m in model.mixers())
scale = f"Model: {lm.description}; the paper's L9 P7 does not exist in it."
ablation_m.note = (
    f"Selected {ev['selected']} by its causal effect on {ev['selection_contexts']} training contexts "
    f"({ev['candidates_scanned']} prototypes scanned). On {ev['validation_contexts']} validation contexts its mask lowers "
    f"mean p(women) by {v['drop_pct']:.2f}% (95% CI {v['ci_low_pct']:.2f}..{v['ci_high_pct']:.2f}%); reinitialising it "
    f"by {', '.join(f'{x:.2f}%' for x in ev['reinit_drop_pct'])}. Other words under the same mask: "
    + ", ".join(f"{w!r} {d:+.2f}%" for w, d in ev["other_word_drops_pct"].items())
    + f"; largest same-layer control drop {max(ev['control_drops_pct']):.2f}%. Context effect on ' women' "
    f"{v['context_effect_nats']:.3f} nats (95% CI {ev['context_effect_ci_low']:.3f}..{ev['context_effect_ci_high']:.3f}); "
    f"mean p(women) with full vs last-8 context {ev['p_full_mean']:.5f} vs {ev['p_short_mean']:.5f}. " + scale)
ppl_m.note = (
    f"Validation perplexity {ppl_m.evidence['ppl_intact']:.2f} intact, {ppl_m.evidence['ppl_masked']:.2f} with "
    f"{ev['selected']} masked ({ppl_m.values['ppl_change_pct']:+.3f}%). Random single-prototype masks "
    f"({len(ppl_m.evidence['random_drops_pct'])}) lower p(women) by at most {max(ppl_m.evidence['random_drops_pct']):.2f}% "
    f"(95th percentile {ppl_m.evidence['random_p95_pct']:.2f}%) vs {v['drop_pct']:.2f}% for the selected one. " + scale)
ablation_v = claims.conclude(ablation_m, profile=nb.profile, seed=nb.seed)
ppl_v = claims.conclude(ppl_m, profile=nb.profile, seed=nb.seed)
display(ablation_v)
ppl_v
