# %% [markdown]
# # ProtoT 05: what the prototypes stand for
#
# **Claim (protot, §6 concept labels):** prototypes learn nameable concepts — the paper names
# L7 P31 (diseases), L10 P8 (Germany), and prototypes for "women", "New Zealand" and "COVID-19".
#
# **Checked here:** every (layer, prototype) of a trained ProtoT gets a label as the paper labels
# them: its top write tokens, its top read tokens (mean gate per occurrence, with a minimum count)
# and its top-activating contexts (the window before a position with a large write gate).
# Prototypes whose gate share is below a registered floor (a tenth of an even share) are **dead**:
# listed, and left out of everything below. Do the labels name concepts? The **coherence** of a
# prototype is the mean pairwise cosine similarity of its top-10 write tokens' input embeddings in
# Gemma-3-270M, a model we did not train (centred over the mapped vocabulary; our 12k BPE tokens are
# decoded and re-encoded by Gemma's tokenizer, only exact one-token matches take part:
# `protot.labels.reference_embeddings`). Coherence can come from the rest of the model (the
# embeddings and the earlier layers group similar tokens whatever the prototypes are), and
# concentration alone is not a concept. So the trained model is compared with **three null
# families**, each with its write and read temperatures set so its gates are as sharp as the trained
# model's: untrained ProtoTs of the same config; the trained model with its prototype vectors
# re-drawn; and with its prototype vectors and read-routing projections re-drawn (the read projection
# W_r of every layer but the first, which reads with its write routing; no layer has a write projection:
# the normed token itself meets the prototypes). The check, written
# in `claims.yaml` before this measurement (its `history` gives the earlier checks and verdicts): the smallest
# margin over the families (the trained model's mean coherence minus a family's) has its whole 95% bootstrap
# interval (over alive prototypes) above 0. The model is a
# parameter (`MODEL`); at the `cpu` profile the committed ProtoT of the authors' architecture and
# training recipe (`models/protot-authors-small`: 6 layers x 256, 12 M tokens of our corpus; see the
# model line below): far smaller and shorter-trained than the paper's
# large model, so its layer and prototype numbers cannot match the paper's (there is no L7 or L10).

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
from protot import concepts, figures, labels, notes, usage
from protot.train import packing

nb = notebook.start("protot/05_concept_labels", PROFILE, SEED, DEVICE,
                    threads=profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
PROTOCOL = claims.protocol("protot/concept-prototypes", nb.profile)   # registered in claims.yaml
MODEL = MODEL or PROTOCOL["model"]
N_BLOCKS = PROTOCOL["n_blocks"]                               # validation blocks of CONTEXT tokens
CONTEXT = PROTOCOL["context"]                                 # the models' training context
MIN_COUNT = PROTOCOL["min_count"]                             # occurrences for a token type to be ranked
TOP = PROTOCOL["top"]                                         # top tokens per prototype (label, coherence)
NULL_SEEDS = list(range(nb.seed + 1, nb.seed + 1 + PROTOCOL["n_null_seeds"]))   # per null family
DEAD_FLOOR = usage.DEAD_FLOOR                                 # alive: gate share >= DEAD_FLOOR / R (claims.yaml)
CONTEXTS = PROTOCOL["contexts_per_label"]                     # top-activating contexts per label
SEARCH = (PROTOCOL["search_blocks"], PROTOCOL["search_tokens"])   # (blocks, tokens) for the temperature search
PROBE_WORDS = [" women", " men", " Germany", " disease"]

lm = concepts.load_model(MODEL, device=nb.device)
model, tok = lm.model, lm.tokenizer
print("model:", lm.description)
val = packing.token_stream("validation")
ref = labels.reference_embeddings(tok)
print(f"{len(ref.ours):,} of our {len(tok):,} token types are one {ref.name} token")

# %% [markdown]
# ## Gates over a validation sample, and a label per prototype
# `write_tokens` / `read_tokens`: the prototype's top token types by mean write / read gate
# (count >= MIN_COUNT); `top_contexts`: the 8 tokens before each of its 3 largest write gates, the
# token itself in [[brackets]]; `write_share` / `read_share`: its share of the layer's gate mass;
# `alive`: max share >= DEAD_FLOOR / R.

# %%
ids = concepts.sample_blocks(val, N_BLOCKS, CONTEXT, seed=nb.seed).to(nb.device)
stats = concepts.collect_gates(model, ids)
entropy = labels.mean_gate_entropy(model, ids)
table = labels.prototype_table(stats, tok, gate="write", top=TOP, min_count=MIN_COUNT, contexts=CONTEXTS, floor=DEAD_FLOOR)
dead = usage.dead_prototypes(stats, DEAD_FLOOR)
print(f"{ids.numel():,} tokens; {stats.layers} layers x {stats.prototypes} prototypes; mean gate entropy "
      f"write {entropy['write']:.3f}, read {entropy['read']:.3f} nats (uniform: {np.log(stats.prototypes):.3f})")
print(f"dead prototypes (share < {DEAD_FLOOR:g} / {stats.prototypes}): {len(dead)} of {stats.layers * stats.prototypes}; "
      "per layer " + ", ".join(f"L{l} {int((dead.layer == l).sum())}" for l in range(stats.layers)))
pd.set_option("display.max_colwidth", 120)
table[table.alive][["layer", "prototype", "half_life", "write_share", "write_tokens", "read_tokens", "top_contexts"]].head(12)

# %% [markdown]
# ## The nulls: three families with gates as sharp as the trained model's

# %%
search_ids = ids[: SEARCH[0], : SEARCH[1]]
target = labels.mean_gate_entropy(model, search_ids)
nulls, null_stats, null_entropy = [], [], []
for family in labels.NULL_FAMILIES:
    for s in NULL_SEEDS:
        n = labels.null_model(model, family, s, search_ids, target)
        nulls.append(n)
        null_stats.append(concepts.collect_gates(n.model, ids))
        null_entropy.append(labels.mean_gate_entropy(n.model, ids))
        del n.model                                               # keep the gates, free the weights
pd.DataFrame([{"family": n.family, "seed": n.seed, "write temperature": n.write_temperature,
               "read temperature": n.read_temperature, "write entropy": h["write"], "read entropy": h["read"],
               "write gap": h["write"] / entropy["write"] - 1,
               "dead": int((~usage.alive_mask(st, DEAD_FLOOR)).sum())}
              for n, h, st in zip(nulls, null_entropy, null_stats)]).round(4)

# %% [markdown]
# ## Coherence of each prototype's top tokens: trained vs each null family (alive prototypes)

# %%
m = labels.measure_concepts(
    stats, null_stats, ref, trained_entropy=entropy, null_entropy=null_entropy, top=TOP, min_count=MIN_COUNT,
    null_families=[n.family for n in nulls], floor=DEAD_FLOOR,
    null_info=[{"family": n.family, "seed": n.seed, "write_temperature": n.write_temperature,
                "read_temperature": n.read_temperature} for n in nulls],
    config={"model": lm.description, "blocks": N_BLOCKS, "context": CONTEXT, "null_seeds": NULL_SEEDS,
            "search_sample": list(SEARCH)}, seed=nb.seed)
assert m.claim == "protot/concept-prototypes"
coh = m.tables["concept_coherence"]
table["coherence"] = coh[coh.model == "trained"]["coherence"].to_numpy()
m.tables["concept_prototypes"] = table
m.tables["dead_prototypes"] = dead
v, ev = m.values, m.evidence
fams = m.tables["concept_null_families"]
print(f"mean coherence over {ev['alive_trained']} alive prototypes: trained {v['coherence_trained']:.4f}; random sets of "
      f"{TOP} token types {ev['chance_coherence_mean']:.4f} (95th percentile {ev['chance_coherence_p95']:.4f})")
fams.round(4)

# %%
fig = figures.concept_coherence_figure(coh, fams, v["coherence_trained"], ev["chance_coherence_mean"], top=TOP,
                                      reference=ref.name)
plotting.savefig(fig, "protot/concept_coherence", profile=nb.profile)
plt.show()

# %% [markdown]
# ## The most coherent prototypes: top tokens and contexts

# %%
best = table[table.alive].sort_values("coherence", ascending=False).head(6)
for _, row in best.iterrows():
    print(f"L{int(row.layer)} P{int(row.prototype)}  coherence {row.coherence:.2f}  write share {row.write_share:.3f}  "
          f"half-life {row.half_life:.1f}")
    print("   write:", row.write_tokens, "   read:", row.read_tokens)
    for c in row.top_contexts.split(" || "):
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
use = pd.concat([usage.prototype_usage(stats).assign(model="trained"),
                 usage.prototype_usage(null_stats[0]).assign(model=f"untrained null seed {nulls[0].seed}")])
m.tables["prototype_usage"] = use
use.pivot_table(index=["gate", "layer"], columns="model", values=["effective", "rarely_used", "top_share"]).round(2)

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
    sel = labels.find_prototype(model, tok, word, win.to(nb.device), gate="write")
    row = table.set_index(["layer", "prototype"]).loc[(sel.layer, sel.prototype)]
    rows.append({"probe": word, "count": sel.count, "layer": sel.layer, "prototype": sel.prototype,
                 "selectivity": sel.selectivity, "alive": row.alive, "coherence": row.coherence,
                 "label of the prototype": row.label})
probes = pd.DataFrame(rows)
probes.round(2)

# %% [markdown]
# ## Verdict
# `conclude` records the measurement in this run's folder, then applies the pre-registered check:
# the smallest margin over the null families (trained mean coherence minus the family's, alive
# prototypes) holds when its whole 95% interval lies above 0 (wholly at or below 0: does not hold;
# straddling 0: inconclusive), with the preconditions that every null model's write-gate entropy is
# within 5% of the trained model's, that each family has at least three models, and that at least 48
# prototypes are alive (min_units). Coherence in an independent model's embedding space says the top tokens are related (by
# topic, syntax or form); it does not name the concept, and these small models' prototypes cannot be
# compared index by index with the paper's.

# %%
assert table["purity"].between(0, 1).all() and len(table) == stats.layers * stats.prototypes
assert model.config.write_temperature == 1.0 and len(nulls) == len(labels.NULL_FAMILIES) * len(NULL_SEEDS)
assert set(fams.family) == set(labels.NULL_FAMILIES) and (~table.alive).sum() == len(dead)
m.note = notes.concept_prototypes(m, top=TOP, reference=ref.name, dead=len(dead), dead_floor=DEAD_FLOOR,
                                  null_seeds=NULL_SEEDS, best=best, probes=probes, use=use,
                                  prototypes=stats.prototypes, model=lm.description)
verdict = claims.conclude(m, profile=nb.profile, seed=nb.seed)
verdict
