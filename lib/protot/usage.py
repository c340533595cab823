"""How much of each layer's gate mass each prototype takes, and which prototypes are dead.

A prototype's *share* (per gate) is its mean gate over every position of a sample: the shares of a
layer sum to 1. A prototype is *alive* when its larger share (write or read) is at least
``floor / R`` (R prototypes per layer), dead otherwise: a dead prototype takes almost no gate mass,
so neither its label nor its mask can say anything. The floor is registered with the claims that
use it (``papers/protot/claims.yaml``: 0.1, i.e. a tenth of an even share).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from protot.concepts import GATE_KINDS, GateStats

#: a prototype is alive when max(write share, read share) >= DEAD_FLOOR / R
DEAD_FLOOR = 0.1


def gate_shares(stats: GateStats) -> dict[str, np.ndarray]:
    """{"write": (L, R), "read": (L, R)}: each prototype's share of its layer's gate mass (float64)."""
    out = {}
    for kind in GATE_KINDS:
        s = stats.gate(kind).astype(np.float64).mean(axis=1)          # (L, R)
        out[kind] = s / s.sum(axis=1, keepdims=True)
    return out


def alive_mask(stats: GateStats, floor: float = DEAD_FLOOR) -> np.ndarray:
    """(L, R) bool: max(write share, read share) >= ``floor`` / R."""
    if not 0 < floor < 1:
        raise ValueError(f"floor must lie in (0, 1), got {floor}")
    s = gate_shares(stats)
    return np.maximum(s["write"], s["read"]) >= floor / stats.prototypes


def dead_prototypes(stats: GateStats, floor: float = DEAD_FLOOR) -> pd.DataFrame:
    """The dead prototypes, one row each: layer, prototype, write_share, read_share."""
    s, alive = gate_shares(stats), alive_mask(stats, floor)
    rows = [{"layer": l, "prototype": k, "write_share": float(s["write"][l, k]), "read_share": float(s["read"][l, k])}
            for l, k in zip(*np.nonzero(~alive))]
    return pd.DataFrame(rows, columns=["layer", "prototype", "write_share", "read_share"])


def prototype_usage(stats: GateStats, *, rare: float = 0.1) -> pd.DataFrame:
    """How many prototypes each layer uses over the sample, per gate. One row per (layer, gate):
    ``share`` of prototype k = its mean gate over all positions (the shares of a layer sum to 1);
    ``effective`` = exp(entropy of the shares), R when the mass is spread evenly and 1 when one
    prototype takes it all; ``rarely_used`` = prototypes whose share is below ``rare`` / R;
    ``top_share`` and ``top_prototype`` = the largest share and its prototype."""
    if not 0 < rare < 1:
        raise ValueError(f"rare must lie in (0, 1), got {rare}")
    R, rows = stats.prototypes, []
    for kind in GATE_KINDS:
        g = stats.gate(kind).astype(np.float64)                        # (L, N*T, R)
        share = g.mean(axis=1)
        share = share / share.sum(axis=1, keepdims=True)
        for layer, s in enumerate(share):
            nz = s[s > 0]
            rows.append({"layer": layer, "gate": kind, "prototypes": R,
                         "effective": float(np.exp(-(nz * np.log(nz)).sum())),
                         "rarely_used": int((s < rare / R).sum()),
                         "top_share": float(s.max()), "top_prototype": int(s.argmax())})
    return pd.DataFrame(rows)


