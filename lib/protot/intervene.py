"""Interventions on one prototype k of layer l of a ProtoT model (paper: editing the "women"
prototype L9 P7 and measuring p("women") and perplexity).

Each is a context manager that undoes itself on exit (weights restored bit for bit):

    with mask_prototype(model, layer=9, k=7):            # k removed from write and read softmax
        ...
    with reinit_prototype(model, layer=9, k=7, seed=0):  # p_k replaced by a fresh draw of its init
        ...
    with clamp_prototype(model, layer=9, k=7, value=0.0, gate="read"):   # r_{t,k} := value
        ...

``gate`` selects "write", "read" or "both". Masking renormalises the remaining gates (logit -inf);
clamping does not (the other gates keep their softmax values). Layers and prototypes are 0-based.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from protot.models.protot import ProtoMixer
from protot.models.protot_authors import AuthorsProtoMixer

GATES = ("write", "read", "both")


def get_mixer(model, layer: int) -> ProtoMixer | AuthorsProtoMixer:
    """The prototype mixer of layer ``layer`` (0-based), of either ProtoT variant (both expose
    ``prototypes``, ``mask_write`` / ``mask_read`` and ``clamp_write`` / ``clamp_read``); ValueError
    on a bad index or a non-ProtoT model."""
    layers = getattr(model, "layers", None)
    if layers is None or not isinstance(getattr(layers[0], "mixer", None), (ProtoMixer, AuthorsProtoMixer)):
        raise ValueError("not a ProtoT model (no ProtoMixer layers)")
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer must be in [0, {len(layers)}), got {layer}")
    return layers[layer].mixer


def _check(mixer, k: int, gate: str):
    R = mixer.prototypes.shape[0]
    if not 0 <= k < R:
        raise ValueError(f"prototype k must be in [0, {R}), got {k}")
    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")


def _sides(gate: str):
    return ("write", "read") if gate == "both" else (gate,)


@contextmanager
def mask_prototype(model, layer: int, k: int, gate: str = "both"):
    """Remove prototype k of ``layer`` from the chosen softmax(es) for the duration."""
    mixer = get_mixer(model, layer)
    _check(mixer, k, gate)
    added = []
    for side in _sides(gate):
        s = getattr(mixer, f"mask_{side}")
        if k not in s:
            s.add(k)
            added.append(s)
    try:
        yield mixer
    finally:
        for s in added:
            s.discard(k)


@contextmanager
def clamp_prototype(model, layer: int, k: int, value: float = 0.0, gate: str = "read"):
    """Set gate k of ``layer`` to ``value`` after the softmax for the duration."""
    mixer = get_mixer(model, layer)
    _check(mixer, k, gate)
    old = []
    for side in _sides(gate):
        d = getattr(mixer, f"clamp_{side}")
        old.append((d, d.get(k)))
        d[k] = float(value)
    try:
        yield mixer
    finally:
        for d, prev in old:
            if prev is None:
                d.pop(k, None)
            else:
                d[k] = prev


@contextmanager
def reinit_prototype(model, layer: int, k: int, seed: int = 0, std: float | None = None):
    """Replace the prototype vector p_k of ``layer`` by a fresh draw from the model's own
    initialisation of prototypes; restore on exit. The authors' variant draws N(0, 1/C) and scales
    the row to unit length; compendium-v1 draws N(0, 1). ``std`` instead gives a plain N(0, std^2)."""
    from protot.models.protot_authors import AuthorsProtoMixer

    mixer = get_mixer(model, layer)
    _check(mixer, k, "both")
    saved = mixer.prototypes.detach()[k].clone()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    fresh = torch.randn(saved.shape, generator=gen, dtype=torch.float32)
    if std is not None:
        fresh = fresh * std
    elif isinstance(mixer, AuthorsProtoMixer):
        fresh = fresh / fresh.norm().clamp_min(1e-6)       # N(0, 1/C) scaled to unit length: the same direction
    with torch.no_grad():
        mixer.prototypes[k] = fresh.to(mixer.prototypes)
    try:
        yield mixer
    finally:
        with torch.no_grad():
            mixer.prototypes[k] = saved


def gates(model, input_ids: torch.Tensor) -> list[dict]:
    """Per-layer dicts of write/read gates, final channel states and half-lives for ``input_ids``."""
    with torch.no_grad():
        return list(model(input_ids, use_cache=False, output_gates=True).gates)
