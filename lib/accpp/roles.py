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

Size-matched null for the role count (:func:`size_matched_roles`): a bigger circuit holds more
firings and so, by size alone, more chances to hit a role's token pair. For each traced prompt the
null is a random set of firings of the circuit's size, matched layer by layer: as many firings in
each layer as the circuit has head firings (nodes) there (:func:`firings_per_layer`), drawn without
replacement from the prompt's firings in that layer that pass the tracer's own attention rule,
A_ds >= tau(d) = min(1, 2.5 / visible tokens) (:func:`firing_pool`; the rule that decides whether the
tracer follows a firing at all). The rule is read on the drawn firings with every firing END <- IO
counted as a name mover, as if it were a seed (a random set has no seeds; this can only raise the
null). The null's value is the expected number of roles over all such draws, computed exactly
(hypergeometric, independent layers), so it carries no Monte-Carlo error;
:func:`draw_size_matched` draws one such set (seeded) for checking it.

Earlier null, kept as evidence (:func:`null_name_pair`): trace the same prompt with the metric
logit(A) - logit(B) for two names A, B that are not in the prompt, and apply the same rule with the
same positions. Not matched in size: such a circuit is often empty (the model does not prefer A).
"""
from __future__ import annotations

import math
from collections import defaultdict

import networkx as nx

__all__ = ["ROLES", "GPT2_IOI_CIRCUIT", "firing_role", "seed_nodes", "circuit_roles", "role_count", "null_name_pair",
           "merge_roles", "roles_table", "firings_per_layer", "firing_pool", "size_matched_roles", "draw_size_matched",
           "firing_set_roles"]

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


# ---------------------------------------------------------------- size-matched null (module docstring)

def firings_per_layer(g: nx.MultiDiGraph) -> dict[int, int]:
    """How many head firings (nodes ``A{l}.{h}@{d}<{s}``, expanded or not) the circuit has per layer:
    every firing the role rule reads, so the size the null matches."""
    out: dict[int, int] = defaultdict(int)
    for _, d in g.nodes(data=True):
        if d["kind"] == "head":
            out[int(d["layer"])] += 1
    return dict(sorted(out.items()))


def firing_pool(attn, windows=None) -> dict[int, list[tuple[int, int, int]]]:
    """Per layer, the firings (head, dest, src) of one prompt whose attention passes the tracer's rule,
    A_ds >= tau(d) = min(1, 2.5 / number of tokens d sees) (:func:`accpp.signals.tau_for`), src among
    the tokens d sees (causal, within the layer's sliding window ``windows[l]`` if not None).

    ``attn``: (L, H, T, T) attention weights (``Decomposition.acts.attn``).
    """
    from accpp.decompose import visible
    from accpp.signals import tau_for

    import torch

    attn = torch.as_tensor(attn)
    if attn.dim() != 4 or attn.shape[2] != attn.shape[3]:
        raise ValueError(f"firing_pool: attention must be (L, H, T, T), got {tuple(attn.shape)}")
    L, H, T, _ = attn.shape
    windows = [None] * L if windows is None else list(windows)
    if len(windows) != L:
        raise ValueError(f"firing_pool: {len(windows)} windows for {L} layers")
    pool: dict[int, list[tuple[int, int, int]]] = {}
    for layer in range(L):
        rows = []
        for dest in range(T):
            src = visible(T, dest, windows[layer])
            tau = tau_for(len(src))
            for h in range(H):
                rows += [(h, dest, int(s)) for s in src.tolist() if float(attn[layer, h, dest, s]) >= tau]
        pool[layer] = sorted(rows)
    return pool


def _pool_role(dest: int, src: int, pos: dict) -> str | None:
    return firing_role(dest, src, pos, is_seed=True)  # END <- IO counts as a name mover (module docstring)


def size_matched_roles(pool: dict[int, list[tuple[int, int, int]]], sizes: dict[int, int],
                       pos: dict) -> dict[str, float]:
    """For each role of :data:`ROLES`, the probability that a random firing set of the given size holds
    it: ``sizes[l]`` firings drawn without replacement from ``pool[l]`` (all of it when the pool is
    smaller), independently per layer, so P(role absent) = prod_l C(N_l - m_l, k_l) / C(N_l, k_l) with
    N_l the pool's firings in layer l, m_l those of them with the role, k_l the size. The expected
    number of roles of the null is the sum of these probabilities (exact)."""
    bad = {layer: k for layer, k in sizes.items() if k < 0 or layer not in pool and k > 0}
    if bad:
        raise ValueError(f"size_matched_roles: sizes {bad} are negative or name layers without a pool")
    out = {}
    for role in ROLES:
        absent = 1.0
        for layer, k in sizes.items():
            if k == 0:
                continue
            firings = pool[layer]
            n, m = len(firings), sum(_pool_role(d, s, pos) == role for _, d, s in firings)
            k = min(k, n)
            absent *= math.comb(n - m, k) / math.comb(n, k)
        out[role] = 1.0 - absent
    return out


def draw_size_matched(pool: dict[int, list[tuple[int, int, int]]], sizes: dict[int, int], rng) -> list[tuple]:
    """One random firing set of the null (``rng``: a ``random.Random``): ``sizes[l]`` firings
    (layer, head, dest, src) of ``pool[l]`` without replacement per layer (all of it when smaller)."""
    out = []
    for layer, k in sorted(sizes.items()):
        firings = pool.get(layer, [])
        out += [(layer, *f) for f in rng.sample(firings, min(k, len(firings)))]
    return out


def firing_set_roles(firings, pos: dict) -> set[str]:
    """The roles a set of firings (layer, head, dest, src) holds, END <- IO counted as a name mover."""
    return {r for _, _, d, s in firings if (r := _pool_role(d, s, pos)) is not None}
