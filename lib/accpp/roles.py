"""IOI roles of the heads in a traced circuit, and the published GPT-2 circuit by role.

Rule (operational, per prompt): a head's role is read from the token pair of its firing in
the circuit (node ``A{l}.{h}@{dest}<{src}``), with IOI positions IO, S1, S2, S1+1, END:

| role            | firing (dest <- src)     | Wang et al. 2022 description                    |
|-----------------|--------------------------|-------------------------------------------------|
| name mover      | END <- IO                | copies the IO name to the output                |
| S-inhibition    | END <- S2                | moves "S is duplicated" to END                  |
| induction       | S2 <- S1+1               | attends to the token after the earlier S        |
| duplicate-token | S2 <- S1                 | attends to the earlier copy of S                |
| previous-token  | t <- t-1 (any t >= 1)    | attends to the previous token                   |

A head can hold several roles (several firings). Firings matching none are "other".
"""
from __future__ import annotations

from collections import defaultdict

import networkx as nx

__all__ = ["ROLES", "GPT2_IOI_CIRCUIT", "firing_role", "circuit_roles", "merge_roles", "roles_table"]

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


def firing_role(dest: int, src: int, pos: dict) -> str | None:
    if dest == pos["END"] and src == pos["IO"]:
        return "name mover"
    if dest == pos["END"] and src == pos["S2"]:
        return "S-inhibition"
    if dest == pos["S2"] and src == pos["S1+1"]:
        return "induction"
    if dest == pos["S2"] and src == pos["S1"]:
        return "duplicate-token"
    if dest >= 1 and src == dest - 1:
        return "previous-token"
    return None


def circuit_roles(g: nx.MultiDiGraph, pos: dict) -> dict[str, list[str]]:
    """role -> sorted list of 'layer.head' in the circuit holding it."""
    out = defaultdict(set)
    for _, d in g.nodes(data=True):
        if d["kind"] != "head":
            continue
        role = firing_role(d["dest"], d["src"], pos)
        out[role or "other"].add((d["layer"], d["head"]))
    return {r: [f"{l}.{h}" for l, h in sorted(v)] for r, v in out.items()}


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
