# %% [markdown]
# # ProtoT 05: what the prototypes stand for
#
# **Claim (protot, §6 concept labels):** prototypes learn nameable concepts — the paper names
# L7 P31 (diseases), L10 P8 (Germany), and prototypes for "women", "New Zealand" and "COVID-19".
#
# **Checked here:** for every (layer, prototype) of a trained ProtoT we list the token types that
# write into it most (mean write gate per occurrence, with a minimum count) as a data-driven label,
# and ask whether those top tokens belong together *in meaning*, judged by a model we did not
# train: the **coherence** of a prototype is the mean pairwise cosine similarity of its top-10
# tokens' input embeddings in Gemma-3-270M (centred over the mapped vocabulary). Our 12k BPE
# tokens are decoded to strings and re-encoded by Gemma's tokenizer; only tokens that are exactly
# one Gemma token take part (documented in `protot.concepts.reference_embeddings`).
# Concentration alone is not a concept: an untrained ProtoT with sharp gates also routes each token
# type to few prototypes. So the null is **untrained ProtoTs of the same config whose write and read
# temperatures are set** (a deterministic 1-D search) **so that their mean gate entropies match the
# trained model's** (gates as sharp, routing not learned), at least three seeds. The check, registered
# in `claims.yaml` after a first measurement (its `history` gives the earlier check and verdicts): the
# trained model's mean coherence exceeds the largest of the null models'. At the `cpu` profile the model is the committed cpu-small ProtoT (the paper's small
# backbone, 6 layers x 256, trained on 12 M tokens of our corpus; see the model line below): far
# smaller and shorter-trained than the paper's large model, so its layer and prototype numbers cannot
# match the paper's (there is no L7 or L10 here).

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = "protot-cpu-small"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from compendium import claims, notebook, plotting, profiles
from protot import concepts
from protot.train import packing

nb = notebook.start("protot/05_concept_labels", PROFILE, SEED, DEVICE,
                    threads=profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
N_BLOCKS = profiles.pick(nb.profile, cpu=48, paper=1024)      # validation blocks of CONTEXT tokens
CONTEXT = 256                                                 # the models' training context
MIN_COUNT = profiles.pick(nb.profile, cpu=5, paper=20)        # occurrences for a token type to be ranked
TOP = 10                                                      # top tokens per prototype (label, coherence)
NULL_SEEDS = profiles.pick(nb.profile, cpu=[nb.seed + 1, nb.seed + 2, nb.seed + 3],
                           paper=list(range(nb.seed + 1, nb.seed + 9)))
SEARCH = profiles.pick(nb.profile, cpu=(8, 64), paper=(64, 256))   # (blocks, tokens) for the temperature search
PROBE_WORDS = [" women", " men", " Germany", " disease"]

lm = concepts.load_model(MODEL, device=nb.device)
model, tok = lm.model, lm.tokenizer
print("model:", lm.description)
val = packing.token_stream("validation")
ref = concepts.reference_embeddings(tok)
print(f"{len(ref.ours):,} of our {len(tok):,} token types are one {ref.name} token")

# %% [markdown]
# ## Gates over a validation sample, and a label per prototype
# `share` is the prototype's mean write gate (its fraction of all write mass); `label` its top
# token types by mean write gate (count >= MIN_COUNT); `purity` the share of its write mass on its
# top-10 token types (concentration, shown for reference).

# %%
ids = concepts.sample_blocks(val, N_BLOCKS, CONTEXT, seed=nb.seed).to(nb.device)
stats = concepts.collect_gates(model, ids)
entropy = concepts.mean_gate_entropy(model, ids)
table = concepts.prototype_table(stats, tok, gate="write", top=TOP, min_count=MIN_COUNT)
print(f"{ids.numel():,} tokens; {stats.layers} layers x {stats.prototypes} prototypes; mean gate entropy "
      f"write {entropy['write']:.3f}, read {entropy['read']:.3f} nats (uniform: {np.log(stats.prototypes):.3f})")

# %% [markdown]
# ## The null: untrained ProtoTs with gates as sharp as the trained model's

# %%
search_ids = ids[: SEARCH[0], : SEARCH[1]]
target = concepts.mean_gate_entropy(model, search_ids)
nulls, null_stats, null_entropy = [], [], []
for s in NULL_SEEDS:
    n = concepts.matched_null(model, s, search_ids, target)
    nulls.append(n)
    null_stats.append(concepts.collect_gates(n.model, ids))
    null_entropy.append(concepts.mean_gate_entropy(n.model, ids))
pd.DataFrame([{"seed": n.seed, "write temperature": n.write_temperature, "read temperature": n.read_temperature,
               "write entropy": h["write"], "read entropy": h["read"],
               "write gap": h["write"] / entropy["write"] - 1} for n, h in zip(nulls, null_entropy)]).round(4)

# %% [markdown]
# ## Coherence of each prototype's top tokens: trained vs matched nulls

# %%
m = concepts.measure_concepts(
    stats, null_stats, ref, trained_entropy=entropy, null_entropy=null_entropy, top=TOP, min_count=MIN_COUNT,
    null_info=[{"seed": n.seed, "write_temperature": n.write_temperature, "read_temperature": n.read_temperature}
               for n in nulls],
    config={"model": lm.description, "blocks": N_BLOCKS, "context": CONTEXT, "null_seeds": NULL_SEEDS,
            "search_sample": list(SEARCH)}, seed=nb.seed)
assert m.claim == "protot/concept-prototypes"
coh = m.tables["concept_coherence"]
table["coherence"] = coh[coh.model == "trained"]["coherence"].to_numpy()
m.tables["concept_prototypes"] = table
v, ev = m.values, m.evidence
print(f"mean coherence: trained {v['coherence_trained']:.4f}; nulls "
      + ", ".join(f"{c:.4f}" for c in ev["coherence_null"])
      + f"; random sets of {TOP} token types {ev['chance_coherence_mean']:.4f} (95th percentile {ev['chance_coherence_p95']:.4f})")
pd.set_option("display.max_colwidth", 80)
table.sort_values("coherence", ascending=False).head(12).round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.4, 1]})
ax = axes[0]
sns.histplot(data=coh, x="coherence", hue="model", element="step", stat="density", common_norm=False, bins=30, ax=ax)
ax.axvline(ev["chance_coherence_mean"], color="0.3", ls=":", lw=1, label="random token sets")
ax.set_xlabel(f"coherence of the top-{TOP} write tokens (mean pairwise cosine, {ref.name})")
ax.set_title("Per prototype: trained vs untrained with matched gate entropy", fontsize=10)
ax = axes[1]
means = coh.groupby("model", sort=False)["coherence"].mean()
ax.bar(means.index, means.values, color=["C3"] + ["0.55"] * (len(means) - 1))
ax.axhline(ev["chance_coherence_mean"], color="0.3", ls=":", lw=1)
ax.set_ylabel("mean coherence over prototypes"); ax.set_title("Model means", fontsize=10)
ax.tick_params(axis="x", rotation=20)
fig.tight_layout()
plotting.savefig(fig, "protot/concept_coherence", profile=nb.profile)
plt.show()

# %% [markdown]
# ## The most coherent prototypes: top tokens and contexts

# %%
best = table.sort_values("coherence", ascending=False).head(6)
for _, row in best.iterrows():
    l, k = int(row.layer), int(row.prototype)
    print(f"L{l} P{k}  coherence {row.coherence:.2f}  purity {row.purity:.2f}  half-life {row.half_life:.1f}")
    print("   top tokens:", row.label)
    for c in concepts.top_contexts(stats, tok, l, k, top=2).context:
        print("   ", c)

# %% [markdown]
# ## How many prototypes each layer uses
# A prototype's share is its mean write (or read) gate over the sample. `effective` = exp(entropy of
# a layer's shares): R when the layer spreads its mass evenly, 1 when one prototype takes all of it.
# `rarely used` counts prototypes with less than a tenth of an even share. The first matched null is
# shown beside the trained model. This is evidence about the model, recorded with the measurement,
# and not part of the claim's check: a layer that routes nearly everything through one prototype
# has few prototypes that can stand for anything.

# %%
usage = pd.concat([concepts.prototype_usage(stats).assign(model="trained"),
                   concepts.prototype_usage(null_stats[0]).assign(model=f"null seed {nulls[0].seed}")])
m.tables["prototype_usage"] = usage
usage.pivot_table(index=["gate", "layer"], columns="model", values=["effective", "rarely_used", "top_share"]).round(2)

# %% [markdown]
# ## Which prototypes are selective for given words
# Selectivity = mean write gate on the word / mean write gate over all positions, on validation
# windows of 64 tokens centred on the word's occurrences.

# %%
rows = []
for word in PROBE_WORDS:
    wid = concepts.token_id(tok, word)
    win = concepts.windows_at(val, wid, 64, where="center", max_windows=32, seed=nb.seed)
    if len(win) < 3:
        print(f"{word!r}: only {len(win)} windows in the validation split, skipped")
        continue
    sel = concepts.find_prototype(model, tok, word, win.to(nb.device), gate="write")
    row = table.set_index(["layer", "prototype"]).loc[(sel.layer, sel.prototype)]
    rows.append({"probe": word, "count": sel.count, "layer": sel.layer, "prototype": sel.prototype,
                 "selectivity": sel.selectivity, "coherence": row.coherence, "label of the prototype": row.label})
probes = pd.DataFrame(rows)
probes.round(2)

# %% [markdown]
# ## Verdict
# `conclude` records the measurement in this run's folder, then applies the pre-registered check:
# coherence_margin (trained mean coherence minus the largest null's) > 0, with the preconditions
# that the null models' write-gate entropy is within 5% of the trained model's and that there are
# at least three of them. Coherence in an independent model's embedding space says the top tokens
# are related (by topic, syntax or form); it does not name the concept, and these small models'
# prototypes cannot be compared index by index with the paper's.

# %%
assert table["purity"].between(0, 1).all() and len(table) == stats.layers * stats.prototypes
assert all(n.model.config is not model.config for n in nulls) and model.config.write_temperature == 1.0
m.note = (
    f"Mean coherence of the top-{TOP} write tokens per prototype (mean pairwise cosine of {ref.name} input "
    f"embeddings, centred; {ev['reference_tokens']:,} of our token types are one {ref.name} token): trained "
    f"{v['coherence_trained']:.4f} vs untrained ProtoTs with matched gate entropy (seeds {NULL_SEEDS}) "
    + ", ".join(f"{c:.4f}" for c in ev["coherence_null"])
    + f"; random sets of {TOP} token types {ev['chance_coherence_mean']:.4f}. Write-gate entropy gap of the nulls at most "
    f"{100 * v['null_entropy_gap']:.1f}% (read {100 * ev['read_entropy_gap_max']:.1f}%). Most coherent: "
    + "; ".join(f"L{int(r.layer)} P{int(r.prototype)} [{r.label}] {r.coherence:.2f}" for r in best.head(4).itertuples())
    + ". Probes: " + "; ".join(f"{r.probe!r}->L{r.layer} P{r.prototype} (x{r.selectivity:.1f})" for r in probes.itertuples())
    + ". Effective write prototypes per layer (exp entropy of the mean gates, of "
    + f"{stats.prototypes}): "
    + ", ".join(f"L{r.layer} {r.effective:.1f}" for r in usage[(usage.model == "trained") & (usage.gate == "write")].itertuples())
    + f". Model: {lm.description}; the paper's layer/prototype indices do not exist here.")
verdict = claims.conclude(m, profile=nb.profile, seed=nb.seed)
verdict
