# %% [markdown]
# # ACC++ 00: the method, followed through one attention firing
#
# **Claim (accpp, method):** ACC++ explains why a head's query at token $d$ attends to token $s$
# (the attention weight $A_{ds}$) by a few rank-1 *signals*: the parts of upstream components'
# outputs that lie along single singular directions of the head's bilinear form
# $\Omega = W_Q W_K^\top$. The candidate signals sum exactly to the score row; Integrated Gradients
# ranks them; a greedy removal keeps the fewest that bring $A_{ds}$ below $\tau(d)$; recursing from
# the components that write the logit difference gives the prompt's circuit.
#
# **Checked here:** a derivation, for teaching. Every step is written out with plain float64
# algebra from the Hugging Face model's weights and activations (`accpp.teaching`, independent
# of the tracer's code) and asserted equal to what the tracer (`accpp.signals`, `accpp.trace`,
# variant `authors`) produces for the same firing: first on a tiny random float64 Llama
# (`accpp.testing`), exactly, for every firing of a whole circuit; then on one SmolLM2-135M IOI
# prompt (offline model, one torch thread): its seeds, one firing through every step and one level
# of the recursion, with a figure per step. Method and sources: `docs/accpp_method.md`, whose step
# numbers (1-10) the sections below use. This notebook records no claim: the exactness of the
# candidates over traced circuits (`accpp/candidates-exact`) is measured by accpp/01.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from accpp import datasets, figures, viewer
from accpp import teaching as tch
from accpp.arch import from_model
from accpp.decompose import (KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, LABEL_KIND, LABEL_SRC, Decomposition, collect,
                             head_svds)
from accpp.models import load_model
from accpp.signals import Firing, FiringSolver, greedy_path, ig_direction
from accpp.testing import float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer, node_id
from compendium import notebook, plotting

nb = notebook.start("accpp/00_method", PROFILE, SEED, DEVICE, threads=1)
# float64 throughout, so the identities below hold to rounding (~1e-15 relative); we assert 1e-10
EXACT = 1e-10
print(f"profile {nb.profile}, seed {nb.seed}, device {nb.device}, {torch.get_num_threads()} torch thread")

# %% [markdown]
# ## 1. The setting: one firing, in row-vector notation
# A firing is (layer $L$, head $a$, destination $d$, source $s$): the query at token $d$ attends to
# the key at token $s \le d$ with weight
#
# $$\begin{gathered}
#   A_{ds} = \mathrm{softmax}_j(S_{dj})_{j=s},\qquad
#   S_{dj} = \mathrm{scale}\;\mathrm{rot}_d(q_d)\cdot \mathrm{rot}_j(k_j),\\
#   q_t = \tilde x_t W_Q,\; k_t = \tilde x_t W_K,\; \tilde x_t = x_t/\sigma_t .
# \end{gathered}$$
#
# $x_t$ is the residual stream entering layer $L$ at token $t$ and $\sigma_t = \sqrt{\overline{x_t^2}+\epsilon}$ the
# input RMSNorm's per-token scale; the norm's gain $g$ is folded into the projections
# ($W_Q \leftarrow \mathrm{diag}(g) W_Q$, likewise $W_K$), so the token vectors are divided by
# $\sigma_t$ only. The residual is a sum of *components*: the embedding, every upstream MLP's
# output, and every upstream head's output split per source token, since a head's output is
# linear in its attention-weighted values:
#
# $$x_t = e_t + \sum_{l<L} \mathrm{mlp}^l_t + \sum_{l<L}\sum_h \sum_{s'\le t} A^l_h[t,s']\; v^l_h[s'] W_O^l[h] .$$
#
# We start on a tiny random Llama (3 layers, 4 heads, 2 key-value groups, $d_{model}=48$,
# $d_{head}=12$, rotary positions), in float64 with the model's norms and softmax kept in float64
# (`float64_exact`), so that every identity can be checked to rounding. One forward pass, with
# hooks, gives the residual entering each layer, the attention weights, the rotary tables and the
# MLP outputs (`teaching.run_forward`); the per-head values are recomputed from the weights.

# %%
with float64_exact():
    tiny = tiny_model("llama", seed=nb.seed)
    tiny_ids = random_prompt(11, seed=nb.seed + 1)
    fw_t = tch.run_forward(tiny, tiny_ids)
    dec_t = Decomposition(from_model(tiny), collect(tiny, from_model(tiny), tiny_ids))  # the tracer's own pass
svd_t = head_svds(dec_t.arch)
solver_t = FiringSolver(dec_t, svd_t, variant="authors")
T_t, L_t = tiny_ids.numel(), fw_t.n_layers
check_components = max(float((tch.components(fw_t, L, t)[0].sum(0) - fw_t.resid[L, t]).abs().max())
                       for L in range(L_t + 1) for t in range(T_t))
check_resid = float((fw_t.resid - dec_t.acts.resid).abs().max())
print(f"components sum to the residual: max |diff| {check_components:.1e}; residual vs the tracer's: {check_resid:.1e}")
assert check_components < EXACT and check_resid < EXACT

# %% [markdown]
# We follow the firing of the last layer whose weight $A_{ds}$ stands highest above the threshold
# $\tau$ (step 7) at the last token, among heads and sources: a firing the tracer would expand.

# %%
d_t = T_t - 1
tau_t = tch.tau(d_t + 1)
L_f, a_f, s_f = L_t - 1, *divmod(int(torch.argmax(fw_t.attn[L_t - 1, :, d_t, : d_t + 1])), d_t + 1)
A_f = float(fw_t.attn[L_f, a_f, d_t, s_f])
print(f"firing: layer {L_f}, head {a_f}, destination {d_t}, source {s_f}; A_ds = {A_f:.3f} (tau = {tau_t:.3f})")
assert A_f >= tau_t

# %% [markdown]
# ## 2. Step 1: the bilinear form and its SVD
# Without positions the score is bilinear in the two (normalised) residuals:
# $S_{dj} = \mathrm{scale}\; \tilde x_d\, W_Q W_K^\top\, \tilde x_j^\top = \mathrm{scale}\;\tilde x_d\,\Omega\,\tilde x_j^\top$.
# $\Omega$ is $d_{model}\times d_{model}$ but has rank $d_{head}$; its SVD, truncated there,
#
# $$\Omega = W_Q W_K^\top = \sum_{k=1}^{d_{head}} \sigma_k\, u_k v_k^\top ,$$
#
# splits every score into $d_{head}$ independent channels: what the query side writes along $u_k$
# meets what the key side writes along $v_k$. The tracer computes the same SVD in head space
# (QR of $W_Q$ and $W_K$, then the SVD of a $d_{head}\times d_{head}$ matrix); singular vectors carry a
# sign ambiguity (a pair $u_k, v_k$ may flip together), so we compare singular values and the
# rank-1 terms $\sigma_k u_k v_k^\top$, which do not depend on it.

# %%
hf_t = tch.head_forms(tiny, L_f, a_f)
dh = hf_t.sig.numel()
full_sv = torch.linalg.svdvals(hf_t.Omega)
U_lib = hf_t.W_Q @ svd_t.Ut[L_f, a_f]  # the tracer's u_k = W_Q Ut_k (columns)
V_lib = hf_t.W_K @ svd_t.Vt[L_f, a_f]
step1 = {"Omega = sum of rank-1 terms": float((hf_t.U * hf_t.sig @ hf_t.V.T - hf_t.Omega).abs().max() / hf_t.Omega.abs().max()),
         "singular values beyond d_head / sigma_1": float(full_sv[dh:].max() / full_sv[0]),
         "sigma vs tracer": float((hf_t.sig - svd_t.S[L_f, a_f]).abs().max() / hf_t.sig[0]),
         "rank-1 terms vs tracer": max(float((torch.outer(hf_t.U[:, k], hf_t.V[:, k]) - torch.outer(U_lib[:, k], V_lib[:, k])).abs().max())
                                       for k in range(dh))}
print(pd.Series(step1).map("{:.1e}".format).to_string())
assert max(step1.values()) < EXACT

# %% [markdown]
# ## 3. Step 2: positions folded into the token vectors
# Rotary embeddings rotate $q_d$ and $k_j$ by position-dependent orthogonal maps, $\mathrm{rot}_t(v) = v R_t$
# ($R_t$ read off the model's own rotary function applied to the basis vectors). Since $W_Q^+ W_Q = I$,
# the rotation can be moved into residual space:
#
# $$M^Q_t = W_Q R_t W_Q^+,\qquad \tilde x_t M^Q_t W_Q = \tilde x_t W_Q R_t ,$$
#
# and likewise $M^K_t = W_K R_t W_K^+$. With the *folded, rotated* forms $\hat q_d = \tilde x_d M^Q_d$ and
# $\hat k_j = \tilde x_j M^K_j$ the score is again the plain bilinear form of Step 1:
#
# $$S_{dj} = \mathrm{scale}\;\hat q_d\,\Omega\,\hat k_j^\top = \mathrm{scale}\sum_k \sigma_k\,(\hat q_d u_k)(\hat k_j v_k).$$
#
# (Biases, absent here, would become one more component: $b_Q W_Q^+$ on the query side, $b_K W_K^+$ on the key side.)

# %%
R_t = tch.rotation_matrices(fw_t)
q_hat_t, k_hat_t = tch.query_key_forms(fw_t, hf_t, R_t, d_t)
S_t = tch.score_row(hf_t, q_hat_t, k_hat_t)
xt_d = fw_t.resid[L_f, d_t] / torch.sqrt(fw_t.resid[L_f, d_t].pow(2).mean() + hf_t.eps)
S_lib_t = solver_t.scores(L_f, a_f, d_t)[0]
step2 = {"x~ M_d W_Q = x~ W_Q R_d": float((q_hat_t @ hf_t.W_Q - xt_d @ hf_t.W_Q @ R_t[d_t]).abs().max()),
         "rotation vs tracer": float(max((R_t[t] - dec_t.rot[L_f][t]).abs().max() for t in range(T_t))),
         "score row vs tracer (rel.)": float((S_t - S_lib_t).abs().max() / S_t.abs().max()),
         "softmax(S) vs the model's attention": float((torch.softmax(S_t, -1) - fw_t.attn[L_f, a_f, d_t, : d_t + 1]).abs().max())}
print(pd.Series(step2).map("{:.1e}".format).to_string())
assert max(step2.values()) < EXACT

# %% [markdown]
# ## 4. Steps 3-4: residual components, candidate signals and their exact sum
# Write $\hat q_d$ as the sum of its components' parts, $\hat q_d = \sum_c (r_c/\sigma_d) M^Q_d$. A **query-side
# candidate** is one component $c$ at $d$ on one singular direction $k$; its contribution to the
# score of every key $j$ (the key side held whole) is
#
# $$C^{Q}_{(c,k),j} = \mathrm{scale}\;\sigma_k\;\big(\tfrac{r_c}{\sigma_d} M^Q_d\, u_k\big)\big(\hat k_j v_k\big).$$
#
# On the **key side** (the authors' form) the query is held whole and the key vector at *every*
# visible position is split; a candidate is one component label $c$ on direction $k$ and spans all
# keys, its entry at $j$ being $\mathrm{scale}\,\sigma_k(\hat q_d u_k)\big(\tfrac{r_{c,j}}{\sigma_j}M^K_j v_k\big)$, where an upstream
# head $(l,h,s')$ writes $r_{c,j} = A^l_h[j,s']\,v^l_h[s']W^l_O[h]$ at each $j \ge s'$, and the
# embedding and each MLP write one vector per position. Since both sums run over all components
# and all $k$, **each family sums exactly to the score row**:
#
# $$\sum_{c,k} C^{Q}_{(c,k),j} = S_{dj} = \sum_{c,k} C^{K}_{(c,k),j}\qquad\text{for every } j\le d.$$

# %%
firing_t = tch.explain_firing(tiny, fw_t, L_f, a_f, d_t, s_f, R_t)
f_t = Firing(L_f, a_f, d_t, s_f)
lib_cands = {"d": solver_t.query_candidates(f_t), "s": solver_t.key_candidates(f_t)}
step4 = {}
for side, name in (("d", "query"), ("s", "key")):
    mine = firing_t.sides[side]
    lib = lib_cands[side]
    step4[f"{name} side: sum vs score row (rel.)"] = float((mine["rows"].sum(0) - S_t).abs().max() / S_t.abs().max())
    step4[f"{name} side: every candidate vs tracer"] = float((mine["rows"] - lib.rows(torch.arange(lib.size))).abs().max())
    assert torch.equal(mine["labels"][:, :3], lib.labels[:, :3])  # same components, same order
print(f"{lib_cands['d'].size} query-side and {lib_cands['s'].size} key-side candidates "
      f"({lib_cands['d'].labels.shape[0]} components x {dh} singular directions)")
print(pd.Series(step4).map("{:.1e}".format).to_string())
assert max(step4.values()) < EXACT

# %% [markdown]
# ## 5. Step 5: Integrated Gradients on the post-softmax weight
# A candidate's effect on $A_{ds}$ is not additive (the softmax couples the keys). ACC++ attributes
# $A_{ds}$ along the straight path from zero scores (uniform attention, $A = 1/n$ with $n = d+1$ visible
# tokens) to $S$:
#
# $$G_j = \int_0^1 \frac{\partial A_{ds}}{\partial S_j}(tS)\,dt,\qquad
#   \frac{\partial A_{ds}}{\partial S_j} = A_{ds}(\delta_{sj} - A_{dj}),\qquad
#   \mathrm{attr}(c,k) = C_{(c,k)}\cdot G ,$$
#
# with the integral taken by the trapezoid rule on 64 intervals. Completeness: the attributions of
# a family sum to $S\cdot G = \int_0^1 \tfrac{d}{dt}A_{ds}(tS)\,dt$, so
#
# $$\begin{gathered}
#   \sum_{c,k}\mathrm{attr}(c,k) = S\cdot G = A_{ds} - \tfrac1n\\
#   (\text{exactly for the integral; to } O(64^{-2}) \text{ for the rule}).
# \end{gathered}$$

# %%
n_t = d_t + 1
G_lib_t = ig_direction(S_lib_t, s_f)
step5 = {"G vs tracer": float((firing_t.G - G_lib_t).abs().max()),
         "query attributions vs tracer": float((firing_t.sides["d"]["attribution"] - lib_cands["d"].attribution(G_lib_t)).abs().max()),
         "key attributions vs tracer": float((firing_t.sides["s"]["attribution"] - lib_cands["s"].attribution(G_lib_t)).abs().max()),
         "sum of query attributions - S.G": float(firing_t.sides["d"]["attribution"].sum() - S_t @ firing_t.G),
         "sum of key attributions - S.G": float(firing_t.sides["s"]["attribution"].sum() - S_t @ firing_t.G)}
print(pd.Series(step5).map("{:.1e}".format).to_string())
assert max(abs(v) for v in step5.values()) < EXACT
completeness_t = float(S_t @ firing_t.G - (firing_t.A - 1 / n_t))
print(f"completeness, 64 trapezoid steps: S.G - (A_ds - 1/n) = {completeness_t:.1e}")

# %% [markdown]
# ## 6. Steps 6-7: greedy removal to $\tau(d)$, and which firings are traced
# Candidates are removed in decreasing attribution, the softmax recomputed exactly after each,
# until $A_{ds}$ falls below
#
# $$\tau(d) = \min\!\Big(1, \frac{2.5}{d+1}\Big),$$
#
# 2.5 times the uniform weight. The same $\tau$ decides whether a firing is traced at all. This is
# done separately on the query side ("d" edges) and the key side ("s" edges). The removed
# candidates, grouped by component, are the firing's **signals**; a signal's singular indices (in
# removal order) span its subspace, their number is its rank. Each signal's `weight` is the sum of
# the drops in $A_{ds}$ at the greedy steps that removed it; on the key side a signal sits at the
# source $s$, and signals from heads whose source is after $s$ are left out (as in the authors' code).

# %%
def edge_table(edges) -> pd.DataFrame:
    """The signal edges of one firing as a table, one row per (side, component)."""
    rows = [dict(side=e["side"], kind=e["kind"], layer=e["layer"], head=e["head"], token=e["token"], src=e["src"],
                 sing=tuple(e["sing"]), weight=e["weight"], drop=e["drop"], attribution=e["attribution"]) for e in edges]
    return pd.DataFrame(rows).sort_values(["side", "weight"], ascending=[True, False]).reset_index(drop=True)


def lib_edge_table(result) -> pd.DataFrame:
    """The tracer's FiringResult edges in the same table layout."""
    return edge_table([dict(side=e.side, kind=KIND_NAMES[e.kind], layer=e.layer, head=e.head, token=e.token, src=e.src,
                            sing=e.sing, weight=e.weight, drop=e.drop, attribution=e.attribution) for e in result.edges])


def same_edges(mine: pd.DataFrame, lib: pd.DataFrame, tol: float) -> float:
    """Assert the same signals (components, singular indices in order); return the largest weight difference."""
    key = ["side", "kind", "layer", "head", "token", "src", "sing"]
    m = mine.merge(lib, on=key, how="outer", suffixes=("", "_lib"), indicator=True)
    assert (m["_merge"] == "both").all(), m[m["_merge"] != "both"][key + ["_merge"]]
    worst = float(max((m[c] - m[f"{c}_lib"]).abs().max() for c in ("weight", "drop", "attribution")))
    assert worst < tol, worst
    return worst


res_t = solver_t.solve(f_t)
for side in "ds":  # the same removal order as the tracer's greedy, step by step
    lib = lib_cands[side]
    idx, A_steps = greedy_path(S_lib_t, lib.attribution(G_lib_t), lib.rows, s_f, tau_t)
    assert idx.tolist() == firing_t.sides[side]["removed"]
    assert np.allclose(A_steps.numpy(), firing_t.sides[side]["A_after"], rtol=0, atol=EXACT)
edges_t = edge_table(firing_t.edges)
print(f"signals of the firing: max |weight, drop, attribution difference| vs the tracer "
      f"{same_edges(edges_t, lib_edge_table(res_t), EXACT):.1e}")
edges_t

# %% [markdown]
# ## 7. Steps 8-9: seeds and the recursion
# **Seeds.** The logit difference $\mathrm{logit}(\text{correct}) - \mathrm{logit}(\text{wrong})$ at the answer position
# is linear in the final residual read through the final RMSNorm, so it splits over the components
# of that residual: $\mathrm{proj}_c = r_c\cdot \big(g\odot(W_U[\text{correct}] - W_U[\text{wrong}])\big)/\sigma$, summing to the
# logit difference. Sorted in decreasing order, the seeds are the components at or above the value
# at which the cumulative sum first exceeds the total, that cutoff capped at total/2 (nothing is
# traced when the total is $\le 0$, or when no seed is an attention head).
#
# **Recursion.** A seed head $(l,h,s')$ at the answer position is the firing $(l, h, \text{pos}, s')$; each
# of its signals from an upstream head is again a firing, $(l', h', d, s')$ for a query-side signal and
# $(l', h', s, s')$ for a key-side one. A firing is expanded once (memoised), and only if its layer
# is above 0, its destination is not token 0 and its weight reaches $\tau$; MLPs and the embedding
# are leaves.
#
# On the tiny model we take the token the model ranks first as "correct" and the one it ranks last
# as "wrong", trace the whole circuit with the step-by-step code, and compare it with the tracer's.

# %%
correct_t, wrong_t = int(fw_t.logits.argmax()), int(fw_t.logits.argmin())
proj_t, _ = tch.seed_projections(tiny, fw_t, d_t, correct_t, wrong_t)
assert abs(float(proj_t.sum()) - float(fw_t.logits[correct_t] - fw_t.logits[wrong_t])) < EXACT
with float64_exact():
    nodes_t, teach_edges_t = tch.trace_circuit(tiny, fw_t, d_t, correct_t, wrong_t)
    circuit_t = Tracer(tiny, None, None, TraceConfig(variant="authors")).trace(tiny_ids, correct_t, wrong_t)
g_t = circuit_t.graph
assert set(nodes_t) == set(g_t.nodes)
assert {n for n, a in nodes_t.items() if a.get("traced")} == {n for n, a in g_t.nodes(data=True) if a.get("traced")}


def graph_edges(edges) -> pd.DataFrame:
    """(upstream, downstream, side, singular indices, weight) rows of a circuit's edges."""
    return pd.DataFrame([dict(u=u, v=v, side=a["side"], sing=tuple(a.get("sing", ())), weight=a["weight"])
                         for u, v, a in edges]).sort_values(["v", "u", "side", "sing"]).reset_index(drop=True)


mine_g, lib_g = graph_edges(teach_edges_t), graph_edges(g_t.edges(data=True))
assert mine_g[["u", "v", "side", "sing"]].equals(lib_g[["u", "v", "side", "sing"]])
worst_g = float((mine_g["weight"] - lib_g["weight"]).abs().max())
print(f"tiny model: {len(nodes_t)} nodes, {len(mine_g)} edges, "
      f"{sum(bool(a.get('traced')) for a in nodes_t.values())} firings expanded; "
      f"the same graph as the tracer's, edge weights within {worst_g:.1e}")
assert worst_g < EXACT

# %% [markdown]
# Every step above, on every firing of the tiny model's circuit, equals the tracer's to rounding.
#
# ## 8. The same steps on SmolLM2-135M and one IOI prompt
# Now a real model (SmolLM2-135M, float32 weights, loaded offline) and the first prompt of the seeded
# IOI set, whose names come in either order (ABBA: "... {IO} and {S} ...", BABA: "... {S} and {IO} ...";
# its text and order are printed below; the answer is " {IO}"). The step-by-step code runs in float64
# on the model's float32 activations. One thing differs from the tiny model: the model computed its
# residual stream in float32, so the components (recomputed in float64 from the model's attention
# weights) sum to that residual only to float32 rounding. Both the tracer and the step-by-step code
# build the folded forms from the sum of the components (`teaching.rebuilt_residual`), which is what
# makes the candidates sum exactly; the score row from the model's own residual, and the model's
# attention weights, differ from it by that rounding (about $10^{-7}$ relative), shown below.

# %%
model, tok = load_model("smollm2-135m", device=nb.device)
prompt = datasets.ioi_mixed(tok, n=1, seed=nb.seed)[0]
tokens = [tok.decode([i]) for i in prompt.input_ids]
tracer = Tracer(model, tok, "smollm2-135m", TraceConfig(variant="authors"))
circuit = tracer.trace(prompt.ids(), prompt.io_id, prompt.s_id)
fw = tch.run_forward(model, prompt.ids())
dec = tracer.decompose(prompt.ids())
pos = len(prompt.input_ids) - 1
float32_gap = max(float((tch.components(fw, L, t)[0].sum(0) - fw.resid[L, t]).abs().max() / fw.resid[L, t].abs().max())
                  for L in range(fw.n_layers + 1) for t in range(pos + 1))
print(f"prompt ({prompt.order}): {prompt.text!r} -> {prompt.io!r} (IO) vs {prompt.s!r} (S), {pos + 1} tokens")
print(f"logit difference {circuit.logit_diff:.2f}; circuit: {circuit.n_firings} firings traced, "
      f"{circuit.graph.number_of_nodes()} nodes, {circuit.graph.number_of_edges()} edges")
print(f"components vs the float32 residual: max relative difference {float32_gap:.1e}")
assert float((fw.resid - dec.acts.resid).abs().max()) == 0 and float((fw.attn - dec.acts.attn).abs().max()) == 0

# %% [markdown]
# ### Seeds
# The components of the final residual at the last token, projected on the IO-minus-S direction.
# The firing we follow below is the seed head with the largest projection.

# %%
proj, labels = tch.seed_projections(model, fw, pos, prompt.io_id, prompt.s_id)
cutoff = tch.seed_cutoff(proj)
order = torch.argsort(proj, descending=True)


def component_name(lab) -> str:
    kind, layer, head, src = (int(x) for x in lab)
    return {KIND_EMB: "emb", KIND_HEAD: f"{layer}.{head} <{tokens[src].strip()}" if src >= 0 else "",
            KIND_MLP: f"MLP{layer}"}[kind]


seed_rows = [i for i in order.tolist() if float(proj[i]) >= cutoff]
lib_seeds = sorted(u for u, v, a in circuit.graph.edges(data=True) if a["side"] == "seed")
mine_seeds = sorted(node_id(*labels[i, :LABEL_SRC].tolist(), pos, int(labels[i, LABEL_SRC])) for i in seed_rows)
assert mine_seeds == lib_seeds, (mine_seeds, lib_seeds)
print(f"sum of projections {float(proj.sum()):.4f} = logit difference {circuit.logit_diff:.4f}; "
      f"cutoff {cutoff:.3f}; seeds: {', '.join(component_name(labels[i]) for i in seed_rows)}")
assert abs(float(proj.sum()) - circuit.logit_diff) < 1e-4  # the model's logits are float32

TOP = 25
fig, ax = plt.subplots(figsize=(8, 3.4))
top = order[:TOP]
ax.bar(range(TOP), proj[top].numpy(), color=["#C44E52" if float(proj[i]) >= cutoff else "0.6" for i in top])
ax.plot(range(TOP), torch.cumsum(proj[top], 0).numpy(), "k.-", lw=1, label="cumulative sum")
ax.axhline(float(proj.sum()), color="#4C72B0", ls="--", lw=1, label=f"total = logit diff ({float(proj.sum()):.2f})")
ax.axhline(cutoff, color="#C44E52", ls=":", lw=1, label=f"seed cutoff ({cutoff:.2f})")
ax.set_xticks(range(TOP), [component_name(labels[i]) for i in top], rotation=70, fontsize=7)
ax.set_ylabel("projection on IO - S (logits)")
ax.set_title(f"Seeds: the {TOP} largest components of the final residual (red: seeds)", fontsize=10)
ax.legend(fontsize=8)
plotting.savefig(fig, "accpp/00_seeds", profile=nb.profile)

# %%
kind_s, L_s, a_s, s_s = labels[max((i for i in seed_rows if int(labels[i, LABEL_KIND]) == KIND_HEAD),
                                   key=lambda i: float(proj[i]))].tolist()
d_s = pos
print(f"followed firing: head {L_s}.{a_s}, destination {d_s} ({tokens[d_s]!r}), source {s_s} ({tokens[s_s]!r}); "
      f"A_ds = {float(fw.attn[L_s, a_s, d_s, s_s]):.3f}, tau = {tch.tau(d_s + 1):.3f}")
R = tch.rotation_matrices(fw)
firing = tch.explain_firing(model, fw, L_s, a_s, d_s, s_s, R)
solver = FiringSolver(dec, tracer.svd, variant="authors")
result = solver.solve(Firing(L_s, a_s, d_s, s_s))
n = d_s + 1

# %% [markdown]
# ### Step 1: the spectrum of $\Omega$
# All $d_{model} = 576$ singular values of this head's $\Omega = W_Q W_K^\top$: exactly $d_{head}=64$ are non-zero.

# %%
hf = firing.forms
sv = torch.linalg.svdvals(hf.Omega)
assert float((hf.sig - tracer.svd.S[L_s, a_s]).abs().max() / hf.sig[0]) < EXACT
fig, ax = plt.subplots(figsize=(6, 3))
ax.semilogy(range(1, len(sv) + 1), sv.numpy(), ".", ms=3)
ax.axvline(hf.sig.numel() + 0.5, color="0.4", ls="--", lw=1, label=f"d_head = {hf.sig.numel()}")
ax.set(xlabel="k", ylabel="singular value $\\sigma_k$", title=f"Spectrum of $\\Omega$, head {L_s}.{a_s}")
ax.legend(fontsize=8)
plotting.savefig(fig, "accpp/00_omega_spectrum", profile=nb.profile)

# %% [markdown]
# ### Step 2: the score row from the folded, rotated forms
# $S_{dj} = \mathrm{scale}\,\hat q_d\Omega\hat k_j^\top$ over the visible tokens, and its softmax against the attention
# weights the model itself computed.

# %%
S_lib = solver.scores(L_s, a_s, d_s)[0]
A_rebuilt = torch.softmax(firing.S, -1)
x_model = fw.resid[L_s, :n] / torch.sqrt(fw.resid[L_s, :n].pow(2).mean(-1, keepdim=True) + hf.eps)
S_model = hf.scale * torch.stack([(x_model[d_s] @ hf.W_Q @ R[d_s]) @ (x_model[j] @ hf.W_K @ R[j]) for j in range(n)])
step2_real = {"score row vs tracer (rel.)": float((firing.S - S_lib).abs().max() / firing.S.abs().max()),
              "vs the score row from the float32 residual (rel.)": float((firing.S - S_model).abs().max() / S_model.abs().max()),
              "softmax(S) vs the model's attention": float((A_rebuilt - fw.attn[L_s, a_s, d_s, :n]).abs().max())}
print(pd.Series(step2_real).map("{:.1e}".format).to_string())
assert step2_real["score row vs tracer (rel.)"] < EXACT
assert step2_real["vs the score row from the float32 residual (rel.)"] < 10 * float32_gap
assert step2_real["softmax(S) vs the model's attention"] < 1e-5  # the model's softmax ran in float32
fig, axes = plt.subplots(2, 1, figsize=(7, 4.2), sharex=True)
axes[0].bar(range(n), firing.S.numpy(), color=["#C44E52" if j == s_s else "#4C72B0" for j in range(n)])
axes[0].set_ylabel("score $S_{dj}$")
axes[1].bar(range(n), A_rebuilt.numpy(), color=["#C44E52" if j == s_s else "#4C72B0" for j in range(n)],
            label="softmax of the rebuilt scores")
axes[1].plot(range(n), fw.attn[L_s, a_s, d_s, :n].numpy(), "kx", ms=5, label="the model's attention")
axes[1].axhline(firing.tau, color="0.3", ls="--", lw=1, label=f"$\\tau$ = 2.5/{n}")
axes[1].set_ylabel("$A_{dj}$")
axes[1].legend(fontsize=7)
axes[1].set_xticks(range(n), tokens[:n], rotation=60, fontsize=7)
fig.suptitle(f"Head {L_s}.{a_s} at {tokens[d_s]!r} (token {d_s}) attends to {tokens[s_s]!r} (token {s_s})", fontsize=10)
plotting.savefig(fig, "accpp/00_score_row", profile=nb.profile)

# %% [markdown]
# ### Steps 3-4: the candidates and their sum
# Each side's candidates sum exactly to the score row. The figure sorts the query-side candidates by
# their contribution to the followed key's score $S_{ds}$ and shows the running sum: the positive
# contributions add up to far more than $S_{ds}$ before the negative ones cancel them back down (the
# peak is printed below). This is why candidates are ranked by their effect on $A_{ds}$ (next step),
# not by their size.

# %%
rows_q, rows_k = firing.sides["d"]["rows"], firing.sides["s"]["rows"]
lib_q, lib_k = solver.query_candidates(Firing(L_s, a_s, d_s, s_s)), solver.key_candidates(Firing(L_s, a_s, d_s, s_s))
step4_real = {"query side: sum vs score row (rel.)": float((rows_q.sum(0) - firing.S).abs().max() / firing.S.abs().max()),
              "key side: sum vs score row (rel.)": float((rows_k.sum(0) - firing.S).abs().max() / firing.S.abs().max())}
print(f"{rows_q.shape[0]} query-side, {rows_k.shape[0]} key-side candidates")
print(pd.Series(step4_real).map("{:.1e}".format).to_string())
assert max(step4_real.values()) < EXACT
col = rows_q[:, s_s]
srt = torch.sort(col, descending=True).values
print(f"running sum of the contributions to S_ds, largest first: peaks at {float(torch.cumsum(srt, 0).max()):.1f}, "
      f"ends at S_ds = {float(srt.sum()):.2f}")
fig, ax = plt.subplots(figsize=(6.5, 3))
ax.plot(np.arange(1, len(srt) + 1), torch.cumsum(srt, 0).numpy(), lw=1.2, label="running sum")
ax.axhline(float(firing.S[s_s]), color="#C44E52", ls="--", lw=1, label=f"$S_{{ds}}$ = {float(firing.S[s_s]):.2f}")
ax.set_xscale("log")
ax.set(xlabel="query-side candidates, largest contribution first", ylabel="running sum of $C_{(c,k),s}$",
       title=f"{len(srt)} candidates (components x singular directions) sum to $S_{{ds}}$")
ax.legend(fontsize=8)
plotting.savefig(fig, "accpp/00_candidates_sum", profile=nb.profile)

# %% [markdown]
# ### Step 5: Integrated Gradients
# Left: $A_{ds}$ along the path $tS$, from the uniform $1/n$ to the model's value. Right: the
# completeness gap $|S\cdot G - (A_{ds} - 1/n)|$ of the trapezoid rule against the number of intervals
# (64 used); it shrinks as $O(\text{steps}^{-2})$, the integral itself being exact.

# %%
G_lib = ig_direction(S_lib, s_s)
step5_real = {"G vs tracer": float((firing.G - G_lib).abs().max()),
              "query attributions vs tracer": float((firing.sides["d"]["attribution"] - lib_q.attribution(G_lib)).abs().max()),
              "key attributions vs tracer": float((firing.sides["s"]["attribution"] - lib_k.attribution(G_lib)).abs().max())}
print(pd.Series(step5_real).map("{:.1e}".format).to_string())
assert max(step5_real.values()) < EXACT
ts = torch.linspace(0, 1, 101, dtype=torch.float64)
path = torch.stack([torch.softmax(t * firing.S, -1)[s_s] for t in ts])
STEPS = [4, 8, 16, 32, 64, 128, 256, 1024]
gaps = [abs(float(firing.S @ tch.ig_gradient(firing.S, s_s, k)) - (firing.A - 1 / n)) for k in STEPS]
print("completeness gap by intervals:", {k: f"{g:.1e}" for k, g in zip(STEPS, gaps)})
assert gaps[-1] < gaps[STEPS.index(64)] < gaps[0]
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
axes[0].plot(ts.numpy(), path.numpy())
axes[0].axhline(1 / n, color="0.5", ls=":", lw=1, label="1/n (uniform)")
axes[0].axhline(firing.A, color="#C44E52", ls="--", lw=1, label=f"$A_{{ds}}$ = {firing.A:.3f}")
axes[0].set(xlabel="t", ylabel="$A_{ds}(tS)$", title="the integration path")
axes[0].legend(fontsize=8)
axes[1].loglog(STEPS, gaps, "o-")
axes[1].axvline(64, color="0.4", ls="--", lw=1, label="64 (used)")
axes[1].set(xlabel="trapezoid intervals", ylabel="$|S\\cdot G - (A_{ds} - 1/n)|$", title="completeness")
axes[1].legend(fontsize=8)
fig.tight_layout()
plotting.savefig(fig, "accpp/00_integrated_gradients", profile=nb.profile)

# %% [markdown]
# ### Steps 6-7: greedy removal
# $A_{ds}$ after each removal, query side and key side, until it drops below $\tau$; then the signals
# (removed candidates grouped by component), compared with the tracer's.

# %%
fig, ax = plt.subplots(figsize=(6, 3))
for side, label in (("d", "query side"), ("s", "key side")):
    A_path = [firing.A] + firing.sides[side]["A_after"]
    ax.plot(range(len(A_path)), A_path, ".-", label=f"{label}: {len(A_path) - 1} removed")
ax.axhline(firing.tau, color="0.3", ls="--", lw=1, label=f"$\\tau$ = min(1, 2.5/{n}) = {firing.tau:.3f}")
ax.xaxis.get_major_locator().set_params(integer=True)
ax.set(xlabel="candidates removed (largest attribution first)", ylabel="$A_{ds}$",
       title=f"Greedy removal, firing {L_s}.{a_s} @{d_s}<{s_s}")
ax.legend(fontsize=8)
plotting.savefig(fig, "accpp/00_greedy", profile=nb.profile)
edges_real = edge_table(firing.edges)
worst_real = same_edges(edges_real, lib_edge_table(result), EXACT)
ranks = edges_real["sing"].map(len)
print(f"{len(edges_real)} signals ({(edges_real.side == 'd').sum()} query side, {(edges_real.side == 's').sum()} key side), "
      f"{(ranks == 1).mean():.0%} of rank 1; same signals as the tracer, weights within {worst_real:.1e}")
edges_real.head(12)

# %% [markdown]
# ### Step 9: the recursion
# The followed firing's signals from upstream heads become the next firings; those at or above their
# own $\tau$ (and above layer 0, destination not token 0) are expanded in turn. Below, which of them the
# rule expands, checked against the tracer's circuit, and the whole circuit (x: layer, y: token position; blue:
# query-side edges, orange dashed: key-side edges, red: seeds).

# %%
g = circuit.graph
nxt = []
for e in firing.edges:
    if e["kind"] != "head":
        continue
    t = e["token"]
    A_next = float(fw.attn[e["layer"], e["head"], t, e["src"]])
    expand = e["layer"] > 0 and t > 0 and A_next >= tch.tau(t + 1)
    nid = node_id(1, e["layer"], e["head"], t, e["src"])
    assert bool(g.nodes[nid].get("traced")) == expand, nid
    nxt.append(dict(firing=nid, side=e["side"], A=round(A_next, 3), tau=round(tch.tau(t + 1), 3), expanded=expand))
nxt = pd.DataFrame(nxt).drop_duplicates("firing")
print(f"{len(nxt)} upstream head firings, {int(nxt.expanded.sum())} expanded (the same as in the tracer's circuit)")
fig, ax = plt.subplots(figsize=(10, 6))
figures.draw_circuit(g, tokens, ax=ax, title=f"ACC++ circuit, SmolLM2-135M, {prompt.text!r} -> {prompt.io!r}")
plotting.savefig(fig, "accpp/00_circuit", profile=nb.profile)
nxt.sort_values("A", ascending=False).head(10)

# %% [markdown]
# The same circuit in the interactive viewer (x: layer, y: token position; hover or click a node for
# its firing, an edge for its signal; the page is also saved beside the figures,
# `accpp/00_circuit_viewer.html`, and opens in any browser without a network).

# %%
viewer.save(circuit, "accpp/00_circuit", title=f"ACC++ circuit, SmolLM2-135M, {prompt.text!r} -> {prompt.io!r}")

# %% [markdown]
# ## 9. Summary
# Every step of the tracer (1-9) was recomputed from its definition: the SVD of $\Omega$, the folded,
# rotated query and key forms, the candidates (query side: component × singular direction; key side:
# component label × singular direction, spanning the key positions) and their exact sum, Integrated
# Gradients and its completeness, the greedy removal to $\tau(d)$, the seeds and the recursion.
# What was compared, and at what scale:
#
# - tiny float64 Llama: every firing of a whole circuit, and the whole graph (nodes, expanded
#   firings, edges with their singular indices and weights), equal to the tracer's to rounding;
# - SmolLM2-135M, one IOI prompt: the seeds, then ONE firing (the largest head seed) through every
#   step (score row, candidates, attributions, greedy path, signals), and one level of the recursion
#   (which of that firing's upstream head firings are expanded). The rest of the real circuit is the
#   tracer's own output, drawn but not recomputed here. Inputs are the components' sum, which stands
#   for the residual the model computed in float32 (they differ by float32 rounding, about $10^{-7}$
#   relative).

# %% [markdown]
# ## 10. Try it: the threshold $\tau$
# $\tau(d) = \min(1, 2.5/n)$ decides two things: whether a firing is traced at all ($A_{ds} \ge \tau$) and
# how far the greedy removal goes (until $A_{ds} < \tau$). The cell below runs steps 6-7 again for the
# SmolLM2 firing followed above, with its candidates and attributions unchanged and
# $\tau = \min(1, f/n)$, $f$ = `TAU_FACTOR` (`teaching.signals_at`); at the paper's $f = 2.5$ it gives
# the firing's signals as in the table of Steps 6-7.
#
# **Change `TAU_FACTOR`** to 1.5 and run the cell again: the removal must push $A_{ds}$ lower, so it
# removes at least as many candidates on each side, in the same order (the list at 2.5 is the
# beginning of the new one); it removes more exactly where $A_{ds}$ had not yet fallen below the new
# $\tau$, and the signals at 2.5 are all still there. Then try 4: the same removal stops earlier, with
# fewer or as many signals. Last, a factor above $n A_{ds}$ (from the numbers the cell prints): $\tau$
# passes $A_{ds}$, nothing is removed, and the tracer would not expand this firing at all.
# `tests/accpp/test_try_tau.py` checks each of these on the tiny model's firing.

# %%
TAU_FACTOR = 2.5   # the paper's; try 1.5, then 4
tau_try = min(1.0, TAU_FACTOR / n)
again = tch.signals_at(firing, tau_try)
print(f"tau = min(1, {TAU_FACTOR}/{n}) = {tau_try:.3f}; A_ds = {firing.A:.3f}"
      + ("" if firing.A >= tau_try else ": below tau, so the tracer would not expand this firing"))
pd.DataFrame([dict(side={"d": "query", "s": "key"}[side], candidates_removed=len(x["removed"]), signals=len(x["edges"]),
                   A_ds_after=x["A_after"][-1] if x["A_after"] else firing.A) for side, x in again.items()])
