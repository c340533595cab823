"""IOI glue: trace a prompt, check exactness over a traced circuit, summarise circuits."""
from __future__ import annotations

from accpp.datasets import IOIPrompt
from accpp.graph import signal_ranks, summary
from accpp.roles import ROLES, circuit_roles
from accpp.signals import Firing, FiringSolver, firing_exactness
from accpp.trace import Circuit, Tracer

__all__ = ["trace_ioi", "trace_many",
           "circuit_exactness", "circuit_row", "status_counts", "measure_candidates_exact", "measure_signals_rank1",
           "size_matched_null", "measure_ioi_roles"]


def trace_ioi(tracer: Tracer, prompt: IOIPrompt) -> Circuit:
    """Trace the IO-vs-S logit difference at the last position ("prob" seeding: the IO's
    log-probability); positions go into meta."""
    wrong = None if tracer.config.seeding == "prob" else prompt.s_id
    c = tracer.trace(prompt.ids(), prompt.io_id, wrong)
    c.meta.update(text=prompt.text, order=prompt.order, template=prompt.template, pos=dict(prompt.pos),
                  io=prompt.io, s=prompt.s)
    return c


def trace_many(tracer: Tracer, prompts, cache=None) -> list[Circuit]:
    """:func:`trace_ioi` of every prompt, in order. ``cache``: an :class:`accpp.item_cache.ItemCache`
    (``item_cache.for_run()`` in a notebook), which keeps each circuit as it is traced and gives back
    the ones a resumed run had finished; None: every prompt traced."""
    if cache is None:
        return [trace_ioi(tracer, p) for p in prompts]
    from accpp import item_cache

    base = item_cache.base_key(tracer, __name__)
    return [Circuit.from_json(cache.get("ioi-circuits", base | item_cache.prompt_key(p),
                                        lambda p=p: trace_ioi(tracer, p).to_json())) for p in prompts]


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


def size_matched_null(tracer: Tracer, prompt: IOIPrompt, circuit: Circuit) -> dict:
    """The size-matched null of one traced prompt (:mod:`accpp.roles`, module docstring): the circuit's
    head firings per layer (``sizes``), the prompt's firings passing the attention rule per layer
    (``pool``, from one decomposition of the prompt), each role's probability in a random set of that
    size (``per_role``) and their sum, the null's expected number of roles (``expected``)."""
    from accpp.roles import firing_pool, firings_per_layer, size_matched_roles

    dec = tracer.decompose(prompt.ids())
    pool = firing_pool(dec.acts.attn, [lw.sliding_window for lw in tracer.arch.layers])
    sizes = firings_per_layer(circuit.graph)
    per_role = size_matched_roles(pool, sizes, prompt.pos)
    return dict(expected=float(sum(per_role.values())), per_role=per_role, sizes=sizes,
                pool={layer: len(f) for layer, f in pool.items()})


def measure_ioi_roles(role_sets: list[dict], null_expected: list[float], role_table, accuracy: float,
                      name_pair_sets: list[dict] | None = None, config: dict | None = None):
    """Claim accpp/ioi-circuit-roles from per-prompt role sets (:func:`accpp.roles.circuit_roles`).

    ``null_expected``: per traced prompt, in the same order, the expected number of roles of its
    size-matched null (:func:`size_matched_null`'s ``expected``). ``all_roles_share`` is the fraction
    of traced circuits that contain every role class of :data:`accpp.roles.ROLES`, with its
    Clopper-Pearson 95% interval over the traced prompts (``all_roles_share_ci_low``/``_high``; each
    circuit one trial); ``n_roles`` (evidence, no longer judged) counts the roles present in the
    union over prompts, which reaches every role as prompts are added whatever each circuit holds;
    ``size_matched_role_excess`` is the mean over prompts of (roles in the
    prompt's circuit - its null's expected roles), with a percentile-bootstrap interval over prompts
    (the pairs resampled together). ``name_pair_sets`` (optional evidence, the earlier null): the rule on
    circuits of the first prompts traced for a random name pair. Only the roles of
    :data:`accpp.roles.ROLES` count (a set may hold others, e.g. heads of no known role).
    """
    import math

    from accpp.roles import merge_roles
    from compendium.claims import Measurement
    from compendium.stats import binomial_ci, paired_bootstrap_ci

    name_pair_sets = list(name_pair_sets or [])
    if not role_sets:
        raise ValueError("measure_ioi_roles: no role sets of traced circuits")
    if not all(isinstance(rs, dict) for rs in [*role_sets, *name_pair_sets]):
        raise ValueError("measure_ioi_roles: each role set must be a dict {role: [heads]} (accpp.roles.circuit_roles)")
    if len(null_expected) != len(role_sets):
        raise ValueError(f"measure_ioi_roles: {len(null_expected)} size-matched nulls for {len(role_sets)} traced "
                         "prompts; each traced prompt has its own")
    if not all(isinstance(e, (int, float)) and math.isfinite(e) and 0 <= e <= len(ROLES) for e in null_expected):
        raise ValueError(f"measure_ioi_roles: a null's expected role count lies outside 0..{len(ROLES)}")
    if len(name_pair_sets) > len(role_sets):
        raise ValueError(f"measure_ioi_roles: {len(name_pair_sets)} name-pair null circuits for {len(role_sets)} "
                         "traced prompts; the i-th null is the i-th traced prompt's")
    merged = merge_roles(role_sets)
    per_prompt = [_n_roles(rs) for rs in role_sets]
    n_full = sum(n == len(ROLES) for n in per_prompt)
    full_lo, full_hi = binomial_ci(n_full, len(per_prompt))
    null = [float(e) for e in null_expected]
    excess = [a - b for a, b in zip(per_prompt, null)]
    lo, hi = paired_bootstrap_ci(per_prompt, null)
    evidence = dict(per_prompt_roles=per_prompt, size_matched_null_per_prompt=[round(e, 4) for e in null],
                    roles={r: merged.get(r, []) for r in ROLES})
    note = ""
    if name_pair_sets:
        np_merged = merge_roles(name_pair_sets)
        np_per_prompt = [_n_roles(rs) for rs in name_pair_sets]
        paired = per_prompt[:len(np_per_prompt)]
        np_lo, np_hi = paired_bootstrap_ci(paired, np_per_prompt)
        evidence["name_pair_null"] = dict(
            per_prompt=np_per_prompt, roles_in_union=_n_roles(np_merged),
            excess=float(sum(paired) / len(paired) - sum(np_per_prompt) / len(np_per_prompt)), excess_ci=[np_lo, np_hi],
            roles={r: np_merged.get(r, []) for r in ROLES})
        note = (f"; the earlier null (random name pair) finds {_n_roles(np_merged)} of the {len(ROLES)} roles in "
                f"{len(name_pair_sets)} circuits")
    model = (config or {}).get("model", "the model")
    return Measurement(
        claim="accpp/ioi-circuit-roles",
        values=dict(n_roles=_n_roles(merged), ioi_accuracy=float(accuracy),
                    all_roles_share=n_full / len(per_prompt), all_roles_share_ci_low=full_lo,
                    all_roles_share_ci_high=full_hi, n_circuits_with_all_roles=n_full,
                    size_matched_role_excess=float(sum(excess) / len(excess)),
                    size_matched_role_excess_ci_low=lo, size_matched_role_excess_ci_high=hi,
                    n_null_prompts=len(null)),
        evidence=evidence, tables={"01_ioi_roles": role_table},
        config=dict(config or {}) | dict(n_null=len(name_pair_sets), n_size_matched=len(null)),
        note=f"{n_full} of {len(role_sets)} traced circuits of {model} hold all {len(ROLES)} role classes; per prompt "
             f"{sum(per_prompt) / len(per_prompt):.2f} "
             f"roles against {sum(null) / len(null):.2f} expected in random firing sets of the same size per layer{note}")
