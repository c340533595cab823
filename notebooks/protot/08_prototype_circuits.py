# %% [markdown]
# # ProtoT 08: prototype circuits (the compendium's own question)
#
# **Claim (protot, the compendium's own, not the paper's: `women-write-circuit`):** the selected
# " women" prototype's write decision on " women" is carried mostly by the token's own embedding
# (the check, written before measuring, is in papers/protot/claims.yaml).
#
# **The claim (ours; written in `claims.yaml` before this notebook measured it):** the selected
# prototype's decision to take " women" is *lexical*: the token's own embedding carries at least half
# of the positive attribution of the centred write logit (defined below; mean over validation
# occurrences), and more than at the other tokens the prototype takes (null: other tokens in random
# validation blocks where its write gate is in its top 5%). Each is decided by its bootstrap interval
# (the share's over occurrences, the difference's over occurrences and null positions): the whole
# interval on the claim's side holds, wholly on the other side does not, straddling is inconclusive.
# Preconditions: the prototype does take " women" (write selectivity >= 2), the decomposition is exact
# on the measured tokens, and there are at least 20 occurrences (min_units).
# An untrained ProtoT of the same configuration is measured the same way as a reference (evidence, not
# part of the check).
#
# **Checked here:** at `cpu`, the committed ProtoT of the authors' architecture and training recipe
# (models/protot-authors-small: the paper's small backbone, 6 layers x 256, trained on 12 M tokens of
# our corpus) on the offline validation text; the decomposition itself is exact on either ProtoT
# variant (tested on tiny random models; see below).

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import copy

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from compendium import claims, notebook, plotting, profiles
from protot import circuits, concepts, intervene, notes
from protot.train import packing

nb = notebook.start("protot/08_prototype_circuits", PROFILE, SEED, DEVICE,
                    threads=profiles.pick(PROFILE, cpu=1, paper=torch.get_num_threads()))
PROTOCOL = claims.protocol("protot/women-write-circuit", nb.profile)   # registered in claims.yaml
MODEL = MODEL or PROTOCOL["model"]
WORD = PROTOCOL["word"]
SETTINGS = dict(select=dict(candidates=None, select_windows=PROTOCOL["select_windows"],
                            select_context=PROTOCOL["select_context"]),
                context=PROTOCOL["context"], null_blocks=PROTOCOL["null_blocks"], trace_recurse=PROTOCOL["trace_recurse"],
                max_windows=None if PROTOCOL["max_windows"] == "all" else PROTOCOL["max_windows"])
lm = concepts.load_model(MODEL, device=nb.device)
model, tok = lm.model.eval(), lm.tokenizer
print("model:", lm.description)
train_stream, val = packing.token_stream("train"), packing.token_stream("validation")
tid = concepts.token_id(tok, WORD)

# %% [markdown]
# ## How a gate decision decomposes
#
# Neither paper traces *why* a token writes into a prototype. In ProtoT this can be done exactly:
# a gate logit of layer l is linear in the token's normalised residual stream, and that stream is
# a sum of upstream parts (the embedding, every earlier mixer's output, every earlier MLP's output).
# In the authors' mixer the write logit of prototype k is the normed token itself against p_k over
# the layer's learned temperature (no projection); the read logit is the same in layer 0 and goes
# through the read projection W_r in the later layers. Holding each token's RMSNorm scale at its
# forward-pass value (and folding the norm gain into the readout, as ACC++ folds its norms), the logit
# splits into one term per **atom**:
#
# - the token's embedding;
# - each earlier MLP output;
# - each earlier mixer's output, split per prototype channel: y_t = alpha U sum_k r_{t,k} c_{t,k},
#   where channel k holds the values of earlier tokens (s < t) that wrote into it (after the value
#   convolution in layers 0 and 1, which acts on the values only, never on the routing: every atom
#   sits at the token's own position).
#
# We decompose the **centred** logit (the logit minus its mean over the layer's prototypes): the
# softmax sees only differences, so this is the *decision* to write into k rather than elsewhere.
# `protot.circuits` holds the maths; `tests/protot/test_circuits.py` checks that the atoms sum to the
# model's own logit to float64 rounding, for write and read gates, on tiny models of the authors'
# variant (one and two heads, shared and separate read routing) and of our earlier one, and that the
# softmax of the sums is the model's gate.
#
# **The prototype** is chosen as in notebook 06 (the same library functions and settings): masked
# one at a time on training contexts before " women", the largest drop of p(" women").

# %% [markdown]
# ## The prototype: notebook 06's rule

# %%
LAYER, K, scan = circuits.select_prototype(model, tok, train_stream, WORD, seed=nb.seed, **SETTINGS["select"])
print(f"selected L{LAYER} P{K}: masking it lowers mean p({WORD!r}) by {scan.drop_pct.iloc[0]:.2f}% on "
      f"{SETTINGS['select']['select_windows']} training contexts (runner-up L{scan.layer.iloc[1]} P{scan.prototype.iloc[1]}: "
      f"{scan.drop_pct.iloc[1]:.2f}%)")
scan.head(5).round(4)

# %% [markdown]
# ## Exactness on the trained model (float64 copy)
# Every prototype of every layer, write and read gates, at the word's position in a few validation
# windows: the largest difference between the summed atoms and the model's logit, and between the
# softmax of the sums and the gate the model returns.

# %%
m64 = circuits.float64_copy(model).to(nb.device)
CTX = SETTINGS["context"]
MID = CTX // 2
win = concepts.windows_at(val, tid, CTX, where="center", max_windows=SETTINGS["max_windows"], seed=nb.seed)
cap = circuits.capture(m64, win[:8])
ref = intervene.gates(m64, win[:8].to(nb.device))
rows = []
for l in range(m64.config.num_hidden_layers):
    for gate in ("write", "read"):
        d = circuits.decompose(m64, cap, l, gate, MID)
        g = circuits.gate_softmax(m64, l, d.total())
        rows.append({"layer": l, "gate": gate, "atoms": d.contrib.shape[1], "max |logit|": float(d.logit.abs().max()),
                     "sum error": d.error(),
                     "softmax vs gate": float((g - ref[l][f"{gate}_gate"][:, MID].double().cpu()).abs().max())})
exact = pd.DataFrame(rows)
assert exact["sum error"].max() <= 1e-10 and exact["softmax vs gate"].max() <= 1e-10
exact

# %% [markdown]
# ## The trace: what makes " women" write into the selected prototype
# Level 0: the atoms of the centred write logit of L{LAYER} P{K} at " women" (mean over validation
# occurrences; `pos_share`: mean share of the positive attribution). Level 1: for the channel atoms
# with the largest mean term, the atoms of *their* centred read logit at the token (why the token
# reads that earlier channel), and which earlier tokens filled the channel.

# %%
tr = circuits.trace(m64, win, MID, LAYER, K, recurse=SETTINGS["trace_recurse"], tokenizer=tok)
t0 = tr.table[tr.table.level == 0].sort_values("pos_share", ascending=False)
print(f"{len(win)} occurrences; mean centred write logit {float(tr.decomposition.logit.mean()):.3f}")
t0.head(10)[["atom", "kind", "mean", "std", "pos_share"]].round(4)

# %%
lvl1 = tr.table[tr.table.level == 1]
(lvl1.sort_values(["target", "pos_share"], ascending=[True, False]).groupby("target").head(4)
 [["target", "atom", "mean", "pos_share"]].round(4))

# %%
src = (tr.sources.groupby(["channel_atom", "token"]).term.agg(["sum", "count"])
       .assign(mean_per_occurrence=lambda d: d["sum"] / len(win)).reset_index())
src.sort_values("mean_per_occurrence", key=abs, ascending=False).groupby("channel_atom").head(4).round(4)

# %% [markdown]
# ## The claim, with its null, and an untrained reference

# %%
meas = circuits.measure_write_circuit(m64, tok, val, LAYER, K, word=WORD, context=CTX,
                                      max_windows=SETTINGS["max_windows"], null_blocks=SETTINGS["null_blocks"],
                                      seed=nb.seed, model_name=lm.description,
                                      selection={"rule": "notebook 06: mask scan on training contexts",
                                                 **SETTINGS["select"], "train_drop_pct": float(scan.drop_pct.iloc[0])})
torch.manual_seed(nb.seed)
untrained = circuits.float64_copy(type(model)(copy.deepcopy(model.config)))   # same config, fresh initialisation
ref_m = circuits.measure_write_circuit(untrained, tok, val, LAYER, K, word=WORD, context=CTX,
                                       max_windows=SETTINGS["max_windows"], null_blocks=SETTINGS["null_blocks"],
                                       seed=nb.seed)
meas.evidence["untrained"] = {q: ref_m.values[q] for q in ("embed_share", "embed_share_margin", "write_selectivity")}
v, ev = meas.values, meas.evidence
pd.DataFrame({"trained": {**{q: v[q] for q in ("embed_share", "embed_share_margin", "write_selectivity")},
                          "embed_share_null": ev["embed_share_null"]},
              "untrained (same config)": {**ev["untrained"], "embed_share_null": ref_m.evidence["embed_share_null"]}}).round(4)

# %% [markdown]
# ## Figure
# Left: the trace as a graph (the strongest mean terms into each target; red raises the logit, blue
# lowers it). Right: the share of the positive attribution by kind of atom at " women" and at the
# null positions (own position; `earlier taps`: atoms of preceding tokens reaching the gate through a
# convolution on the routing, which the authors' mixer does not have: 0 here), and the embedding's share
# per occurrence.

# %%
fig, axes = plt.subplots(1, 3, figsize=(16, 5), gridspec_kw={"width_ratios": [2.4, 1.2, 1.0]})
circuits.draw_trace(tr, axes[0], title=f"Why {WORD!r} writes into L{LAYER} P{K} (centred write logit, "
                                        f"{len(win)} validation occurrences)")
kinds = pd.DataFrame(ev["share_by_kind"])
kinds.plot.bar(ax=axes[1], color=["C3", "0.6"], rot=0)
axes[1].axhline(0.5, color="k", ls=":", lw=1, label="check: embedding >= 0.5")
axes[1].set_ylabel("mean share of positive attribution"); axes[1].legend(fontsize=8)
axes[1].set_title("By kind of atom", fontsize=10)
sh = meas.tables["circuit_embed_shares"]
for i, (grp, c) in enumerate([("word", "C3"), ("null", "0.5")]):
    y = sh[sh.group == grp].embed_share.to_numpy()
    axes[2].scatter(i + np.random.default_rng(0).uniform(-0.15, 0.15, len(y)), y, s=8, color=c, alpha=0.6)
    axes[2].errorbar([i], [y.mean()], fmt="o", color="k")
axes[2].set_xticks([0, 1]); axes[2].set_xticklabels([WORD, "null"]); axes[2].set_xlim(-0.5, 1.5)
axes[2].axhline(0.5, color="k", ls=":", lw=1)
axes[2].set_ylabel("embedding's share (per token)"); axes[2].set_title("Embedding share", fontsize=10)
fig.tight_layout()
plotting.savefig(fig, "protot/08_prototype_circuits", profile=nb.profile)
plt.show()

# %% [markdown]
# ## Verdict
# `conclude` records the measurement in this run's folder and applies the check registered in
# `claims.yaml` before measuring.

# %%
meas.note = notes.women_write_circuit(meas, layer=LAYER, prototype=K, train_drop_pct=float(scan.drop_pct.iloc[0]),
                                     model=lm.description)
assert meas.claim == "protot/women-write-circuit"
verdict = claims.conclude(meas, profile=nb.profile, seed=nb.seed)
verdict
