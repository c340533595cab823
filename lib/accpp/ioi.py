"""IOI glue: trace a prompt, check exactness over a traced circuit, summarise circuits."""
from __future__ import annotations

from accpp.datasets import IOIPrompt
from accpp.graph import signal_ranks, summary
from accpp.roles import ROLES, circuit_roles
from accpp.signals import Firing, FiringSolver, firing_exactness
from accpp.trace import Circuit, Tracer

__all__ = ["trace_ioi", "circuit_exactness", "circuit_row", "status_counts", "measure_candidates_exact", "measure_signals_rank1",
           "measure_ioi_roles"]


def trace_ioi(tracer: Tracer, prompt: IOIPrompt) -> Circuit:
    """Trace the IO-vs-S logit difference at the last position ("prob" seeding: the IO's
    log-probability); positions go into meta."""
    wrong = None if tracer.config.seeding == "prob" else prompt.s_id
    c = tracer.trace(prompt.ids(), prompt.io_id, wrong)
    c.meta.update(text=prompt.text, order=prompt.order, template=prompt.template, pos=dict(prompt.pos),
                  io=prompt.io, s=prompt.s)
    return c


def circuit_exactness(tracer: Tracer, prompt: IOIPrompt, circuit: Circuit, max_firings: int = 20) -> dict:
    """Worst errors over (up to max_firings of) the circuit's traced firings."""
    solver = FiringSolver(tracer.decompose(prompt.ids()), tracer.svd)
    worst = dict(query_side=0.0, key_side=0.0, query_vs_residual=0.0, key_vs_residual=0.0,
                 softmax_vs_model=0.0, firings=0)
    for _, d in circuit.graph.nodes(data=True):
        if d["kind"] == "head" and d.get("traced") and worst["firings"] < max_firings:
            err = firing_exactness(solver, Firing(d["layer"], d["head"], d["dest"], d["src"]))
            worst = {k: max(worst.get(k, 0.0), err[k]) for k in err} | {"firings": worst["firings"] + 1}
    return worst


def circuit_row(circuit: Circuit) -> dict:
    """One table row: status, sizes, rank-1 fraction, roles present.

    A circuit without signal edges (``status`` other than "traced": the metric is negative, no seed is
    a head, or no seed firing passes tau; ``Circuit.reason`` says which) has ``rank1`` and ``roles``
    None: there is nothing to count, which is not a share of 0 or NaN.
    """
    g = circuit.graph
    ranks = signal_ranks(g)
    traced = circuit.status == "traced" or (circuit.status == "unknown" and circuit.n_firings > 0)  # saved before
    roles = circuit_roles(g, circuit.meta["pos"]) if traced else {}
    return dict(order=circuit.meta.get("order"), status=circuit.status, text=circuit.meta.get("text"),
                logit_diff=circuit.logit_diff, firings=circuit.n_firings, **summary(g),
                rank1=(sum(r == 1 for r in ranks) / len(ranks)) if ranks else None,
                roles=sum(bool(roles.get(r)) for r in ROLES) if traced else None, seconds=circuit.seconds)


def status_counts(circuits: list[Circuit]) -> dict[str, int]:
    """How many circuits have each status (:data:`accpp.graph.STATUSES`), the traced ones first."""
    out: dict[str, int] = {}
    for c in sorted(circuits, key=lambda c: c.status != "traced"):
        out[c.status] = out.get(c.status, 0) + 1
    return out


# --- the claims of notebook accpp/01_ioi: one measure_* per claim, each returning a claims.Measurement ---

_EXACT_COLUMNS = ("query_side", "key_side", "key_side_authors")  # the float64 identity (as present)
_MODEL_COLUMNS = ("query_vs_residual", "key_vs_residual")  # against the float32 model's own score row


def _require(frame, columns, who: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise ValueError(f"{who}: the table lacks column(s) {missing}")
    if len(frame) == 0:
        raise ValueError(f"{who}: the table is empty")


def measure_candidates_exact(exact, config: dict | None = None):
    """Claim accpp/candidates-exact from rows of :func:`circuit_exactness` (one per checked circuit).

    ``max_rel_err`` is the worst float64 error of the identity (candidates sum to the score row) over
    every checked firing; the float32 model's own rounding is evidence beside it.
    """
    from compendium.claims import Measurement

    _require(exact, ("firings", "softmax_vs_model", *_MODEL_COLUMNS), "measure_candidates_exact")
    cols = [c for c in _EXACT_COLUMNS if c in exact]
    if not cols:
        raise ValueError(f"measure_candidates_exact: the table has none of the identity columns {_EXACT_COLUMNS}")
    vs_model = float(exact[list(_MODEL_COLUMNS)].to_numpy().max())
    model = (config or {}).get("model", "the model")
    return Measurement(
        claim="accpp/candidates-exact",
        values=dict(max_rel_err=float(exact[cols].to_numpy().max()), n_firings=int(exact["firings"].sum())),
        evidence=dict(vs_float32_model=vs_model, softmax_vs_model=float(exact["softmax_vs_model"].max())),
        tables={"01_ioi_exactness": exact}, config=dict(config or {}),
        note=f"float64 identity over the checked firings of {model}; against the score row recomputed from the "
             f"float32 model's residual: {vs_model:.1e} (float32 rounding)")


def measure_signals_rank1(ranks_per_circuit: list[list[int]], circuits_table, accuracy: float,
                          config: dict | None = None):
    """Claim accpp/signals-rank1: the fraction of traced signal edges of rank 1, over all traced circuits,
    with a cluster-bootstrap interval (circuits resampled, each with all its signals: signals of one
    prompt are not independent).

    ``ranks_per_circuit``: per circuit, the ranks of its signal edges (:func:`accpp.graph.signal_ranks`);
    ``circuits_table``: one :func:`circuit_row` per circuit (the figure's table).
    """
    from compendium.claims import Measurement
    from compendium.stats import bootstrap_paired_ci
    import numpy as np
    import pandas as pd

    if not ranks_per_circuit or any(isinstance(r, (int, np.integer)) for r in ranks_per_circuit):
        raise ValueError("measure_signals_rank1: give the signal ranks per circuit (a list of lists)")
    ranks = [int(r) for rs in ranks_per_circuit for r in rs]
    if len(ranks) == 0:
        raise ValueError("measure_signals_rank1: no signal edges (empty ranks)")
    if any(r < 1 for r in ranks):
        raise ValueError(f"measure_signals_rank1: a rank below 1 in {sorted(set(ranks))}")
    ones = np.array([sum(int(r) == 1 for r in rs) for rs in ranks_per_circuit], dtype=float)
    sizes = np.array([len(rs) for rs in ranks_per_circuit], dtype=float)
    lo, hi = bootstrap_paired_ci(lambda a, n: a.sum(1) / np.maximum(n.sum(1), 1), ones, sizes)
    model = (config or {}).get("model", "the model")
    return Measurement(
        claim="accpp/signals-rank1",
        values=dict(rank1_fraction=sum(r == 1 for r in ranks) / len(ranks), rank1_ci_low=lo, rank1_ci_high=hi,
                    ioi_accuracy=float(accuracy), n_signals=len(ranks), n_circuits=len(ranks_per_circuit)),
        evidence=dict(rank_counts=pd.Series(ranks).value_counts().sort_index().to_dict(),
                      rank1_per_circuit=(ones / np.maximum(sizes, 1)).round(3).tolist()),
        tables={"01_ioi_circuits": circuits_table}, config=dict(config or {}),
        note=f"{len(ranks)} signal edges over {len(circuits_table)} IOI prompts of {model}; 95% interval "
             f"{lo:.3f}-{hi:.3f} (circuits resampled)")


def _n_roles(role_set: dict) -> int:
    return sum(bool(role_set.get(r)) for r in ROLES)


def measure_ioi_roles(role_sets: list[dict], null_sets: list[dict], role_table, accuracy: float,
                      config: dict | None = None):
    """Claim accpp/ioi-circuit-roles from per-prompt role sets (:func:`accpp.roles.circuit_roles`).

    ``null_sets``: the same rule on circuits of the same prompts traced for a random name pair.
    ``n_roles`` counts the roles present in the union over prompts; ``role_excess_per_prompt`` is the
    mean number of roles per circuit minus that of the null circuits. Only the roles of
    :data:`accpp.roles.ROLES` count (a set may hold others, e.g. heads of no known role).
    """
    from compendium.claims import Measurement
    from accpp.roles import merge_roles

    if not role_sets or not null_sets:
        raise ValueError(f"measure_ioi_roles: needs role sets of traced and null circuits "
                         f"(got {len(role_sets)} and {len(null_sets)})")
    if not all(isinstance(rs, dict) for rs in [*role_sets, *null_sets]):
        raise ValueError("measure_ioi_roles: each role set must be a dict {role: [heads]} (accpp.roles.circuit_roles)")
    if len(null_sets) > len(role_sets):
        raise ValueError(f"measure_ioi_roles: {len(null_sets)} null circuits for {len(role_sets)} traced prompts; "
                         "the i-th null is the i-th traced prompt's")
    from compendium.stats import paired_bootstrap_ci

    merged, null_merged = merge_roles(role_sets), merge_roles(null_sets)
    per_prompt = [_n_roles(rs) for rs in role_sets]
    null_per_prompt = [_n_roles(rs) for rs in null_sets]
    paired = per_prompt[:len(null_per_prompt)]   # the prompts traced again for the null, each with its own
    null_roles = _n_roles(null_merged)
    lo, hi = paired_bootstrap_ci(paired, null_per_prompt)
    model = (config or {}).get("model", "the model")
    return Measurement(
        claim="accpp/ioi-circuit-roles",
        values=dict(n_roles=_n_roles(merged), ioi_accuracy=float(accuracy),
                    role_excess_per_prompt=float(sum(paired) / len(paired) - sum(null_per_prompt) / len(null_per_prompt)),
                    role_excess_ci_low=lo, role_excess_ci_high=hi,
                    n_null_prompts=len(null_per_prompt)),
        evidence=dict(per_prompt_roles=per_prompt, null_roles=null_roles, null_per_prompt=null_per_prompt,
                      roles={r: merged.get(r, []) for r in ROLES}, null={r: null_merged.get(r, []) for r in ROLES}),
        tables={"01_ioi_roles": role_table}, config=dict(config or {}) | dict(n_null=len(null_sets)),
        note=f"union over {len(role_sets)} prompts of {model}; the null (random name pair, same rule) finds "
             f"{null_roles} of the {len(ROLES)} roles")
