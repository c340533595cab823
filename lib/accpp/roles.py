"""IOI roles of the heads in a traced circuit, and the published GPT-2 circuit by role.

Rule (operational, per prompt): a head's role is read from the token pair of its firing in
the circuit (node ``A{l}.{h}@{dest}<{src}``), with IOI positions IO, S1, S2, S1+1, END:

| role            | firing (dest <- src)            | Wang et al. 2022 description                 |
|-----------------|---------------------------------|----------------------------------------------|
| name mover      | END <- IO, and a seed           | copies the IO name to the output             |
| S-inhibition    | END <- S2                       | moves "S is duplicated" to END               |
| induction       | S2 <- S1+1                      | attends to the token after the earlier S     |
| duplicate-token | S2 <- S1                        | attends to the earlier copy of S             |
| previous-token  | S1+1 <- S1                      | moves S1 into S1+1, which induction reads    |

A name mover must write the answer: its firing must be a seed of the circuit (an edge into the
logits node). The previous-token role is the one of the IOI circuit (S1+1 <- S1), not any t <- t-1.
A head can hold several roles (several firings). Firings matching none are "other".

Null for the role count (:func:`null_name_pair`): trace the same prompt with the metric
logit(A) - logit(B) for two names A, B that are not in the prompt, and apply the same rule with the
same positions. The roles found there are what the rule finds in a circuit that is not about IO vs S.
"""
from __future__ import annotations

from collections import defaultdict

import networkx as nx

__all__ = ["ROLES", "GPT2_IOI_CIRCUIT", "firing_role", "seed_nodes", "circuit_roles", "role_count", "null_name_pair",
           "merge_roles", "roles_table"]

ROLES = ("name mover", "S-inhibition", "induction", "duplicate-token", "previous-token")

# Wang et al. 2022 (arXiv 2211.00593), GPT-2 small, path patching: layer.head
GPT2_IOI_CIRCUIT = {
    "name mover": ["9.9", "10.0", "9.6"],
    "negative name mover": ["10.7", "11.10"],
    "S-inhibition": ["7.3", "7.9", "8.6", "8.10"],
    "induction": ["5.5", "5.8", "5.9", "6.9"],
    "duplicate-token": ["0.1", "0.10", "3.0"],
    "previous-token": ["2.2", "4.11"],
}


def firing_role(dest: int, src: int, pos: dict, is_seed: bool = True) -> str | None:
    """The IOI role of a firing dest <- src (table in the module docstring); ``is_seed``: whether the
    firing writes into the logits node (required for "name mover")."""
    if dest == pos["END"] and src == pos["IO"]:
        return "name mover" if is_seed else None
    if dest == pos["END"] and src == pos["S2"]:
        return "S-inhibition"
    if dest == pos["S2"] and src == pos["S1+1"]:
        return "induction"
    if dest == pos["S2"] and src == pos["S1"]:
        return "duplicate-token"
    if dest == pos["S1+1"] and src == pos["S1"]:
        return "previous-token"
    return None


def seed_nodes(g: nx.MultiDiGraph) -> set:
    """Nodes with an edge into a logits node (the circuit's seeds)."""
    return {u for u, v, d in g.edges(data=True) if d.get("side") == "seed" or g.nodes[v].get("kind") == "logits"}


def circuit_roles(g: nx.MultiDiGraph, pos: dict) -> dict[str, list[str]]:
    """role -> sorted list of 'layer.head' in the circuit holding it."""
    missing = {"IO", "S1", "S2", "S1+1", "END"} - set(pos)
    if missing:
        raise ValueError(f"IOI positions missing: {sorted(missing)}")
    out = defaultdict(set)
    seeds = seed_nodes(g)
    for n, d in g.nodes(data=True):
        if d["kind"] != "head":
            continue
        role = firing_role(d["dest"], d["src"], pos, is_seed=n in seeds)
        out[role or "other"].add((d["layer"], d["head"]))
    return {r: [f"{l}.{h}" for l, h in sorted(v)] for r, v in out.items()}


def role_count(g: nx.MultiDiGraph, pos: dict) -> int:
    """How many of the five IOI roles the circuit holds."""
    roles = circuit_roles(g, pos)
    return sum(bool(roles.get(r)) for r in ROLES)


def null_name_pair(prompt_ids, io_id: int, s_id: int, name_ids, rng) -> tuple[int, int]:
    """Two distinct name token ids from ``name_ids``, neither in the prompt nor IO/S (``rng``: a
    ``random.Random``): the metric of the null circuit is logit(first) - logit(second)."""
    present = {int(t) for t in prompt_ids} | {int(io_id), int(s_id)}
    pool = sorted({int(t) for t in name_ids} - present)
    if len(pool) < 2:
        raise ValueError(f"need two names outside the prompt for the null; {len(pool)} available")
    a, b = rng.sample(pool, 2)
    return a, b


def roles_table(ours: dict[str, list[str]], model_name: str) -> list[dict]:
    """Rows comparing our circuit's heads by role with the published GPT-2 circuit."""
    rows = []
    for role in ROLES:
        rows.append({"role": role, f"{model_name} (ours)": ", ".join(ours.get(role, [])) or "-",
                     "GPT-2 (Wang et al.)": ", ".join(GPT2_IOI_CIRCUIT[role]),
                     "present": bool(ours.get(role))})
    return rows


def _head_key(h: str) -> tuple[int, int]:
    layer, head = h.split(".")
    return int(layer), int(head)


def merge_roles(role_sets: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """Union over prompts, heads sorted by (layer, head)."""
    roles = {r for rs in role_sets for r in rs}
    return {r: sorted({h for rs in role_sets for h in rs.get(r, [])}, key=_head_key) for r in roles}
