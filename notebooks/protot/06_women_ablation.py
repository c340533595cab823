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
import torch

from compendium import claims, notebook, plotting, profiles
from protot import ablation, concepts, figures, notes, women
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
sev = scan_m.evidence
print(f"causal scan: {sev['candidates_scanned']} prototypes on {sev['selection_contexts']} training contexts; winner "
      f"{sev['prototype']} (training drop {sev['selected_train_drop_pct']:.2f}%, runner-up {sev['runner_up']} "
      f"{sev['runner_up_train_drop_pct']:.2f}%); class {sev['class']!r}; labelled female: {sev['label']['labelled']}")
print("  top write tokens:", sev["label"]["write_tokens"])
print("  top read tokens: ", sev["label"]["read_tokens"])
spec = women.specificity_table(label_m, scan_m)
spec[["selected_by", "word", "split", "contexts", "p_intact", "p_edited", "drop_pct", "ci_low_pct", "ci_high_pct"]].round(4)

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
fig = figures.women_ablation_figure(strata, spec, ppl_table, paper_drop=PAPER_DROP, paper_ppl=PAPER_PPL,
                                   ppl_blocks=ppl_m.values["ppl_blocks"])
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
label_m.note = notes.women_label(label_m, model=lm.description)
ppl_m.note = notes.women_ppl(ppl_m, model=lm.description)
scan_m.note = notes.women_scan(scan_m, model=lm.description)
assert (label_m.claim, ppl_m.claim, scan_m.claim) == (
    "protot/women-prototype-ablation", "protot/women-ablation-ppl", "protot/women-causal-scan")
label_v = claims.conclude(label_m, profile=nb.profile, seed=nb.seed)
ppl_v = claims.conclude(ppl_m, profile=nb.profile, seed=nb.seed)
scan_v = claims.conclude(scan_m, profile=nb.profile, seed=nb.seed)
display(label_v)
display(ppl_v)
scan_v
