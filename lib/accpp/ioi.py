"""IOI glue: trace a prompt, check exactness over a traced circuit, summarise circuits."""
from __future__ import annotations

from accpp.datasets import IOIPrompt
from accpp.graph import signal_ranks, summary
from accpp.roles import ROLES, circuit_roles
from accpp.signals import Firing, FiringSolver, firing_exactness
from accpp.trace import Circuit, Tracer

__all__ = ["trace_ioi", "circuit_exactness", "circuit_row"]


def trace_ioi(tracer: Tracer, prompt: IOIPrompt) -> Circuit:
    """Trace the IO-vs-S logit difference at the last position; positions go into meta."""
    c = tracer.trace(prompt.ids(), prompt.io_id, prompt.s_id)
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
    """One table row: sizes, rank-1 fraction, roles present."""
    g = circuit.graph
    ranks = signal_ranks(g)
    roles = circuit_roles(g, circuit.meta["pos"])
    return dict(order=circuit.meta.get("order"), text=circuit.meta.get("text"), logit_diff=circuit.logit_diff,
                firings=circuit.n_firings, **summary(g),
                rank1=(sum(r == 1 for r in ranks) / len(ranks)) if ranks else float("nan"),
                roles=sum(bool(roles.get(r)) for r in ROLES), seconds=circuit.seconds)
