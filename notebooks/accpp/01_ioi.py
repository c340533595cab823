# %% [markdown]
# # ACC++ 01: prompt-specific IOI circuits, traced through nnsight
#
# **Claim (accpp, §3-§5):** the candidate rank-1 signals of an attention firing sum exactly to its
# score row; most traced signals are rank 1; the traced IOI circuit contains the role classes of the
# published IOI circuit (name movers, S-inhibition, induction, duplicate-token, previous-token).
#
# **Checked here:** the model's IOI behaviour (logit difference, accuracy, P(IO), ABBA vs BABA),
# then ACC++ circuits for representative ABBA and BABA prompts: a layered drawing, node and edge
# counts, the histogram of signal ranks, the exactness of the candidates on every traced firing,
# the circuit's heads grouped by role next to the published GPT-2 circuit, and the size against
# the ACC baseline on the same prompts (paper: ACC circuits are 2-10x larger). At `cpu`:
# SmolLM2-135M (offline), 48 prompts for behaviour, 4 traced prompts. At `paper`: Gemma-3-270M
# (or the Hub model named in MODEL, e.g. "gpt2"), the 256-prompt mixed set, all traced.
# Roles are read from the firings' token pairs (rule in `accpp.roles`), not from patching.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import torch

from accpp import datasets, figures, ioi, roles
from accpp.acc import acc_trace
from accpp.graph import save_circuit, signal_ranks
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, paths, plotting, profiles

PROFILE = profiles.check(PROFILE)
plotting.use_style()
torch.manual_seed(SEED)
torch.set_num_threads(2)
MODEL = MODEL or profiles.pick(PROFILE, cpu="smollm2-135m", paper="gemma-3-270m")
N_BEHAVIOUR = profiles.pick(PROFILE, cpu=48, paper=256)
N_TRACE = profiles.pick(PROFILE, cpu=4, paper=256)
N_ACC = profiles.pick(PROFILE, cpu=2, paper=32)
OUT = paths.output_dir() / "accpp" / "01_ioi"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Model and IOI behaviour
# Loading is timed separately (first load converts the GGUF into a cached folder).

# %%
t0 = time.perf_counter()
model, tok = load_model(MODEL)
load_s = time.perf_counter() - t0
prompts = datasets.ioi_mixed(tok, n=N_BEHAVIOUR, seed=SEED)
metrics = datasets.evaluate(model, prompts)
order = torch.tensor([p.order == "ABBA" for p in prompts])
behaviour = pd.DataFrame({"all": metrics.mean(), "ABBA": metrics.mean(order), "BABA": metrics.mean(~order)}).T
print(f"{MODEL}: loaded in {load_s:.1f} s")
behaviour

# %%
fig, ax = plt.subplots(figsize=(5, 3))
ax.hist([metrics.logit_diff[order].numpy(), metrics.logit_diff[~order].numpy()], bins=20, label=["ABBA", "BABA"])
ax.axvline(0, color="0.3", lw=1)
ax.set_xlabel("logit(IO) - logit(S)")
ax.set_ylabel("prompts")
ax.legend()
ax.set_title(f"IOI logit difference, {MODEL}")
plotting.savefig(fig, "accpp/01_ioi_logit_diff", profile=PROFILE)

# %% [markdown]
# ## 2. Circuits of representative prompts
# Representative = correctly solved, alternating ABBA and BABA, in the order of the seeded set.

# %%
tracer = Tracer(model, tok, name=MODEL)
t0 = time.perf_counter()
tracer.svd  # per-head SVDs: computed once per model, then read from the cache
svd_s = time.perf_counter() - t0
good = [p for p, ld in zip(prompts, metrics.logit_diff.tolist()) if ld > 0]
abba = [p for p in good if p.order == "ABBA"]
baba = [p for p in good if p.order == "BABA"]
chosen = [p for pair in zip(abba, baba) for p in pair][:N_TRACE]
circuits = [ioi.trace_ioi(tracer, p) for p in chosen]
for i, c in enumerate(circuits[:2]):
    save_circuit(c, OUT / f"circuit_{i}_{c.meta['order']}.json")
table = pd.DataFrame([ioi.circuit_row(c) for c in circuits])
print(f"SVDs ready in {svd_s:.1f} s")
table[["order", "logit_diff", "firings", "nodes", "edges", "signal_edges", "heads", "rank1", "roles", "seconds"]]

# %%
fig, axes = plt.subplots(1, 2, figsize=(15, 7))
for ax, c in zip(axes, circuits[:2]):
    figures.draw_circuit(c.graph, c.tokens, ax=ax, title=f"{c.meta['order']}: {c.meta['text']!r}")
fig.suptitle(f"ACC++ circuits, {MODEL} (blue: query-side signals, green: key-side, red: seeds)")
plotting.savefig(fig, "accpp/01_ioi_circuits", profile=PROFILE)

# %% [markdown]
# ## 3. Signal ranks and exactness

# %%
ranks = [r for c in circuits for r in signal_ranks(c.graph)]
rank1 = sum(r == 1 for r in ranks) / len(ranks)
fig, ax = plt.subplots(figsize=(5, 3))
figures.rank_histogram([c.graph for c in circuits], ax=ax, title=f"signal ranks, {len(circuits)} prompts ({MODEL})")
plotting.savefig(fig, "accpp/01_ioi_signal_ranks", profile=PROFILE)
exact = pd.DataFrame([ioi.circuit_exactness(tracer, p, c) for p, c in zip(chosen[:2], circuits[:2])])
max_rel_err = float(exact[["query_side", "key_side"]].to_numpy().max())  # the identity, float64
vs_model = float(exact[["query_vs_residual", "key_vs_residual"]].to_numpy().max())  # float32 model rounding
print(f"rank-1 fraction {rank1:.3f} of {len(ranks)} signals")
exact

# %% [markdown]
# ## 4. Heads by role, next to the published GPT-2 circuit
# The published circuit is GPT-2 small's (Wang et al. 2022); the model here differs, so the
# comparison is by role class, not by head index.

# %%
role_sets = [roles.circuit_roles(c.graph, c.meta["pos"]) for c in circuits]
merged = roles.merge_roles(role_sets)
role_table = pd.DataFrame(roles.roles_table(merged, MODEL))
n_roles = int(role_table["present"].sum())
per_prompt_roles = [sum(bool(rs.get(r)) for r in roles.ROLES) for rs in role_sets]
role_table

# %% [markdown]
# ## 5. ACC++ vs ACC (the predecessor) on the same prompts
# ACC traces every firing with A_ds >= 1/(d+1) and keeps the contributors making up 70% of the
# linear pre-softmax score (`accpp.acc`); sizes are node counts of the two graphs.

# %%
acc_rows = []
for p, c in zip(chosen[:N_ACC], circuits[:N_ACC]):
    a = acc_trace(tracer, p.ids(), p.io_id, p.s_id)
    acc_rows.append(dict(order=p.order, accpp_nodes=c.graph.number_of_nodes(), acc_nodes=a.graph.number_of_nodes(),
                         accpp_firings=c.n_firings, acc_firings=a.n_firings, acc_seconds=a.seconds))
acc_table = pd.DataFrame(acc_rows)
acc_table["ratio"] = acc_table["acc_nodes"] / acc_table["accpp_nodes"]
ratio = float(acc_table["ratio"].mean())
acc_table

# %% [markdown]
# ## 6. Checks and recorded values
# Asserted at every profile: the model does IOI (accuracy > 0.8) and the method's invariants (candidates
# exact in float64, the rebuilt softmax equal to the model's). The claims' checks are recorded; at `cpu`
# they are also asserted, which keeps the measured result in place; at `paper` (another model, more
# prompts) the verdicts are recorded as they come.

# %%
config = dict(model=MODEL, n_behaviour=N_BEHAVIOUR, n_traced=len(circuits))
assert metrics.accuracy > 0.8, metrics.accuracy  # the model does the task: a precondition, at every profile
assert max_rel_err < 1e-8, max_rel_err  # method invariants, at every profile
assert vs_model < 1e-4 and float(exact["softmax_vs_model"].max()) < 1e-4  # float32 model vs float64 rebuild
claims.record("accpp/candidates-exact", max_rel_err, profile=PROFILE, seed=SEED, config=config,
              check=max_rel_err < 1e-8,
              note=f"over {int(exact['firings'].sum())} traced firings of {MODEL}, float64; vs the score row "
                   f"recomputed from the float32 model's residual: {vs_model:.1e} (float32 rounding)")
claims.record("accpp/signals-rank1", rank1, profile=PROFILE, seed=SEED, config=config, check=rank1 > 0.5,
              note=f"{len(ranks)} signal edges, {len(circuits)} IOI prompts, {MODEL}")
claims.record("accpp/ioi-circuit-roles", n_roles, profile=PROFILE, seed=SEED, config=config, check=None,
              note=f"union over {len(circuits)} prompts of {MODEL}; per prompt {per_prompt_roles}; roles from firing token pairs")
claims.record("accpp/smaller-than-acc", ratio, profile=PROFILE, seed=SEED, config=config | dict(n_acc=len(acc_rows)),
              check=ratio >= 2 if PROFILE == "paper" else None,
              note=f"mean ACC/ACC++ node ratio over {len(acc_rows)} IOI prompts of {MODEL} (paper: 2-10x): "
                   f"{[round(r, 2) for r in acc_table['ratio']]}")
print(behaviour.round(3).to_dict(), dict(rank1=rank1, n_roles=n_roles, max_rel_err=max_rel_err, acc_ratio=ratio))
if PROFILE == "cpu":  # the measured cpu results, held in place; at `paper` the verdicts are recorded as they come
    assert rank1 > 0.5, rank1
    assert n_roles >= 3, merged
    assert ratio > 1, acc_table
