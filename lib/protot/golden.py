"""Golden numbers from running the authors' ProtoT mixer (tests/protot/golden, README there).

    cases()                        the case names (case00 .. case08)
    load_case(case, **changes)     (AuthorsProtoMixer in float64 with the case's parameters loaded
                                    through the documented name map, its arrays, its JSON, the names
                                    of the authors' parameters this layer does not use)

The test suite (tests/protot/test_authors_golden.py, tests/kernels) and the derivation notebook
(notebooks/protot/01_mixer_derivation) read them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from compendium import paths

__all__ = ["golden_dir", "cases", "load_case"]


def golden_dir() -> Path:
    return paths.repo_root() / "tests" / "protot" / "golden"


def cases() -> list[str]:
    return sorted(p.stem for p in golden_dir().glob("case*.npz"))


def load_case(case: str, **config_changes):
    """The mixer of golden case ``case`` (float64, eval mode), with ``config_changes`` applied to its
    ProtoTConfig (e.g. decay_arithmetic="authors-float32")."""
    from protot.models import ProtoTConfig
    from protot.models.protot_authors import AuthorsProtoMixer, load_authors_state

    folder = golden_dir()
    if case not in cases():
        raise ValueError(f"no golden case {case!r} in {folder}; cases: {', '.join(cases())}")
    meta = json.loads((folder / f"{case}.json").read_text())
    arrays = dict(np.load(folder / f"{case}.npz"))
    c = meta["config"]
    layer = c["layer_id"]
    cfg = ProtoTConfig(vocab_size=16, hidden_size=c["C"], num_prototypes=c["r_total"], num_heads=c["num_heads"],
                       value_dim=c["C_v_total"], shared_routing_layers=layer + 1 if c["shared_routing"] else 0,
                       value_conv_layers=2, value_conv_size=c["local_conv_kernel_size"], **config_changes)
    mixer = AuthorsProtoMixer(cfg, layer).double().eval()
    state = {k[len("param."):]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith("param.")}
    unused = load_authors_state(mixer, state)
    return mixer, arrays, meta, unused
