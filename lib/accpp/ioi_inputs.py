"""The inputs of accpp/01_ioi's claims, selected and traced: which prompts are traced, the name-pair
null's circuits, the ACC rows beside ACC++ and the variant comparison.

- :func:`representative_prompts`: correctly solved prompts (logit difference > 0), alternating ABBA and
  BABA, in the order of the seeded set, the first ``n``.
- :func:`name_pair_null`: the first ``n`` prompts traced again for the metric logit(A) - logit(B) of
  two other single-token names (``roles.null_name_pair``, one ``random.Random(seed)`` for the run),
  read with the prompt's own positions: each circuit's role sets.
- :func:`acc_comparison`: ACC (the authors' definition) and the project's first baseline
  (``ACCConfig.legacy()``) on the same prompts as ACC++: node and firing counts, truncation, the
  node ratios.
- :func:`variant_comparison`: the same prompts traced with another variant's tracer: node, edge
  ((sender, receiver, side)) and position-free component Jaccard similarities.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pandas as pd

from accpp import datasets, ioi, roles
from accpp.acc import ACCConfig, acc_trace
from accpp.multilingual import component_set, jaccard

__all__ = ["representative_prompts", "name_pair_null", "acc_comparison", "variant_comparison"]


def representative_prompts(prompts: Sequence, logit_diff: Sequence[float], n: int) -> list:
    """The first ``n`` of: the correctly solved prompts (logit difference > 0) taken ABBA, BABA,
    ABBA, ... in the order of ``prompts`` (stopping when either order runs out)."""
    if len(prompts) != len(logit_diff):
        raise ValueError(f"{len(prompts)} prompts but {len(logit_diff)} logit differences")
    good = [p for p, ld in zip(prompts, logit_diff) if ld > 0]
    abba = [p for p in good if p.order == "ABBA"]
    baba = [p for p in good if p.order == "BABA"]
    return [p for pair in zip(abba, baba) for p in pair][:n]


def name_pair_null(tracer, prompts: Sequence, tokenizer, n: int, seed: int) -> list[dict]:
    """Role sets (``roles.circuit_roles``) of the first ``n`` prompts traced for a random pair of other
    single-token names; the pairs drawn in prompt order from one ``random.Random(seed)``."""
    name_ids = [datasets.name_token(tokenizer, name) for name in datasets.single_token_names(tokenizer)]
    rng = random.Random(seed)
    sets = []
    for p in prompts[:n]:
        a_id, b_id = roles.null_name_pair(p.ids().tolist(), p.io_id, p.s_id, name_ids, rng)
        sets.append(roles.circuit_roles(tracer.trace(p.ids(), a_id, b_id).graph, p.pos))
    return sets


def acc_comparison(tracer, prompts: Sequence, circuits: Sequence, n: int, *,
                   acc: Callable = acc_trace, cache=None) -> pd.DataFrame:
    """One row per prompt of the first ``n`` (with its ACC++ circuit): the node and firing counts of
    ACC++, ACC and the legacy baseline, ACC's and the legacy's truncation and ACC's seconds; ratio =
    ACC nodes / ACC++ nodes, legacy_ratio likewise (``acc``: the ACC tracer, ``accpp.acc.acc_trace``).
    ``cache`` (an :class:`accpp.item_cache.ItemCache`): each prompt's row kept as it is computed and read
    back by a resumed run."""
    if cache is None:
        rows = [_acc_row(tracer, p, c, acc) for p, c in zip(prompts[:n], circuits[:n])]
    else:
        from accpp import item_cache

        base = item_cache.base_key(tracer, __name__) | dict(acc=f"{acc.__module__}.{acc.__qualname__}")
        rows = [cache.get("acc-rows", base | dict(prompt=item_cache.prompt_key(p),
                                                  circuit=item_cache.circuit_digest(c)),
                          lambda p=p, c=c: _acc_row(tracer, p, c, acc)) for p, c in zip(prompts[:n], circuits[:n])]
    table = pd.DataFrame(rows)
    table["ratio"] = table["acc_nodes"] / table["accpp_nodes"]
    table["legacy_ratio"] = table["legacy_nodes"] / table["accpp_nodes"]
    return table


def _acc_row(tracer, p, c, acc: Callable) -> dict:
    a = acc(tracer, p.ids(), p.io_id, p.s_id)
    old = acc(tracer, p.ids(), p.io_id, p.s_id, config=ACCConfig.legacy())
    return dict(order=p.order, accpp_nodes=c.graph.number_of_nodes(), acc_nodes=a.graph.number_of_nodes(),
                legacy_nodes=old.graph.number_of_nodes(), accpp_firings=c.n_firings, acc_firings=a.n_firings,
                legacy_firings=old.n_firings, acc_truncated=a.meta["truncated"],
                legacy_truncated=old.meta["truncated"], acc_seconds=a.seconds)


def variant_comparison(other_tracer, prompts: Sequence, circuits: Sequence, n: int, *,
                       trace: Callable = ioi.trace_ioi) -> pd.DataFrame:
    """One row per prompt of the first ``n``: its circuit (``circuits``, the default variant's) against the
    same prompt traced by ``other_tracer``: node counts and node, edge and component Jaccard similarities."""
    rows = []
    for p, c in zip(prompts[:n], circuits[:n]):
        c2 = trace(other_tracer, p)
        e1 = {(u, v, d["side"]) for u, v, d in c.graph.edges(data=True)}
        e2 = {(u, v, d["side"]) for u, v, d in c2.graph.edges(data=True)}
        rows.append(dict(order=p.order, nodes_authors=c.graph.number_of_nodes(),
                         nodes_per_position=c2.graph.number_of_nodes(),
                         node_jaccard=jaccard(set(c.graph.nodes), set(c2.graph.nodes)), edge_jaccard=jaccard(e1, e2),
                         component_jaccard=jaccard(component_set(c.graph), component_set(c2.graph))))
    return pd.DataFrame(rows)
