"""A small top-k sparse autoencoder (SAE) on a model's residual stream, trained with bounded memory.

The SAE is the third kind of unit that ``protot.disentangle`` compares with ProtoT's prototypes and
LLaMA's attention heads. It follows the top-k SAE of Gao et al. (2024, "Scaling and evaluating
sparse autoencoders", arXiv 2406.04093) in outline; the code is our own:

    z = TopK_k( ReLU( W_enc (x / s - b_dec) + b_enc ) )      (F features, k of them non-zero)
    x_hat = s (W_dec z + b_dec)                               (rows of W_dec kept at unit norm)

``x`` is the residual stream after block ``layer`` (0-based: the output of ``model.layers[layer]``),
``s`` a fixed scalar (the root mean square norm of ``x`` on the first batch) so that the learning
rate does not depend on the model's activation scale. The loss is the mean squared reconstruction
error of x / s (no sparsity penalty: the top-k does the sparsification).

Activations are streamed: each step draws ``batch_blocks`` fresh blocks of ``context`` tokens from
the token stream (a seeded generator, without replacement across the whole run while the stream
allows), runs the model up to ``layer`` and takes one optimiser step; at most one batch of
activations is held in memory. Training is deterministic for a given seed (on one thread).

:func:`train_sae` caches the trained weights under ``.cache/sae/<key>.pt`` where ``key`` is a hash
of the model's weights, the token data and the :class:`SAEConfig`; a second call with the same
inputs loads them instead of training.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

CACHE_VERSION = 1


@dataclass(frozen=True)
class SAEConfig:
    """layer: residual stream after this block (0-based); n_features: dictionary size F; k: active
    features per token; steps: optimiser steps; batch_blocks x context: tokens per step; lr: Adam
    learning rate; seed: weights and the order of the blocks."""

    layer: int = 1
    n_features: int = 1024
    k: int = 16
    steps: int = 300
    batch_blocks: int = 4
    context: int = 256
    lr: float = 1e-3
    seed: int = 0

    def validate(self, model=None) -> None:
        for name in ("n_features", "k", "steps", "batch_blocks", "context"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"SAEConfig.{name} must be a positive integer, got {v!r}")
        if self.k > self.n_features:
            raise ValueError(f"SAEConfig.k={self.k} exceeds n_features={self.n_features}")
        if not self.lr > 0:
            raise ValueError(f"SAEConfig.lr must be > 0, got {self.lr}")
        if model is not None:
            L = len(model.layers)
            if not 0 <= self.layer < L:
                raise ValueError(f"SAEConfig.layer={self.layer} is not a block of this model (0..{L - 1})")


class TopKSAE(nn.Module):
    """Top-k sparse autoencoder of width ``d`` with ``n_features`` features; ``scale`` is s above."""

    def __init__(self, d: int, n_features: int, k: int):
        super().__init__()
        if k > n_features:
            raise ValueError(f"k={k} exceeds n_features={n_features}")
        self.d, self.n_features, self.k = d, n_features, k
        self.W_enc = nn.Parameter(torch.empty(n_features, d))
        self.b_enc = nn.Parameter(torch.zeros(n_features))
        self.W_dec = nn.Parameter(torch.empty(n_features, d))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.register_buffer("scale", torch.ones(()))
        nn.init.normal_(self.W_dec, std=1.0)
        with torch.no_grad():
            self.W_dec /= self.W_dec.norm(dim=1, keepdim=True)
            self.W_enc.copy_(self.W_dec)            # encoder initialised as the decoder's transpose

    def _check(self, x: torch.Tensor) -> None:
        if not torch.is_tensor(x) or x.ndim < 1 or x.shape[-1] != self.d:
            shape = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
            raise ValueError(f"the SAE takes activations of width {self.d} in the last dimension, got {shape}")
        if not torch.is_floating_point(x):
            raise ValueError(f"the SAE takes floating-point activations, got {x.dtype}")

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., F) non-negative codes with at most k non-zero per row."""
        self._check(x)
        pre = torch.relu((x / self.scale - self.b_dec) @ self.W_enc.T + self.b_enc)
        val, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, val)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.scale * (z @ self.W_dec + self.b_dec)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encode(x)
        return self.decode(z), z

    @torch.no_grad()
    def normalise_decoder(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-12)


@torch.no_grad()
def residual(model, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """(N, T, d) residual stream after block ``layer`` of ``model`` (a ``protot.models`` causal LM)
    for token ids (N, T); only the blocks up to ``layer`` run."""
    if not torch.is_tensor(ids) or ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"ids must be a non-empty (N, T) integer tensor, got "
                         f"{tuple(ids.shape) if torch.is_tensor(ids) else type(ids).__name__}")
    if not hasattr(model, "layers") or not 0 <= layer < len(model.layers):
        raise ValueError(f"layer {layer} is not a block of this model")
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        x = model.embed_tokens(ids.to(dev))
        kw = model.mixer_kwargs(None)
        for block in model.layers[: layer + 1]:
            x, _ = block(x, None, **kw)
    finally:
        model.train(was)
    return x


def block_order(stream: np.ndarray, context: int, n: int, seed: int) -> np.ndarray:
    """``n`` block indices of ``stream`` (blocks of ``context`` tokens), seeded; without repeats
    while the stream has enough blocks, then a fresh permutation."""
    from protot.train import packing

    total = packing.blocks(stream, context)
    if total < 1:
        raise ValueError(f"the token stream ({len(stream)} tokens) is shorter than one block of {context}")
    rng = np.random.default_rng(seed)
    out = []
    while sum(len(o) for o in out) < n:
        out.append(rng.permutation(total)[: n - sum(len(o) for o in out)])
    return np.concatenate(out)


@dataclass
class TrainedSAE:
    sae: TopKSAE
    config: SAEConfig
    losses: list[float]          # normalised MSE (loss / mean squared norm of x / s) per step
    key: str
    from_cache: bool
    seconds: float               # training time (0 when loaded)
    info: dict = field(default_factory=dict)


def weights_hash(model) -> str:
    """sha256 of a model's parameters and buffers (names, shapes, dtypes and bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def stream_hash(stream: np.ndarray) -> str:
    a = np.ascontiguousarray(stream)
    return hashlib.sha256(f"{a.dtype}:{a.shape};".encode() + a.tobytes()).hexdigest()


def cache_key(model, stream: np.ndarray, config: SAEConfig, data_key: str | None = None) -> str:
    payload = {"version": CACHE_VERSION, "model": weights_hash(model),
               "data": data_key or stream_hash(stream), "config": dataclasses.asdict(config)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def train_sae(model, stream: np.ndarray, config: SAEConfig = SAEConfig(), *, cache: bool | str | Path = True,
              data_key: str | None = None, progress: bool = False) -> TrainedSAE:
    """Train (or load from the cache) a :class:`TopKSAE` on ``model``'s residual stream after block
    ``config.layer``, on blocks of the token ``stream`` (e.g. ``packing.token_stream("train")``).

    ``cache``: True (``.cache/sae`` of the repository), a folder, or False (always train, write
    nothing). ``data_key`` names the data in the cache key (default: a hash of the stream's bytes).
    """
    from compendium import atomic, paths

    config.validate(model)
    stream = np.asarray(stream)
    if stream.ndim != 1 or not np.issubdtype(stream.dtype, np.integer):
        raise ValueError(f"stream must be a 1-D integer token array, got {stream.dtype} of shape {stream.shape}")
    if len(stream) and int(stream.max()) >= model.config.vocab_size:
        raise ValueError(f"the stream holds token id {int(stream.max())}, beyond the model's vocabulary "
                         f"({model.config.vocab_size})")
    key = cache_key(model, stream, config, data_key)
    d = model.config.hidden_size
    folder = None
    if cache:
        folder = paths.cache_dir() / "sae" if cache is True else Path(cache)
        path = folder / f"{key}.pt"
        if path.exists():
            blob = torch.load(path, map_location="cpu", weights_only=True)
            sae = TopKSAE(d, config.n_features, config.k)
            sae.load_state_dict(blob["state"])
            return TrainedSAE(sae.to(next(model.parameters()).device).eval(), config, list(blob["losses"]), key,
                              True, 0.0, dict(blob.get("info", {})))
    from protot.train import packing
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    dev = next(model.parameters()).device
    order = block_order(stream, config.context, config.steps * config.batch_blocks, config.seed)
    gen_state = torch.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        sae = TopKSAE(d, config.n_features, config.k).to(dev)
    finally:
        torch.set_rng_state(gen_state)
    opt = torch.optim.Adam(sae.parameters(), lr=config.lr)
    losses = []
    for step in tqdm(range(config.steps), desc="SAE", leave=False, disable=not progress):
        ids = packing.gather(stream, order[step * config.batch_blocks : (step + 1) * config.batch_blocks], config.context)
        x = residual(model, ids, config.layer).reshape(-1, d).float()
        if step == 0:
            with torch.no_grad():
                sae.scale.fill_(x.pow(2).sum(-1).mean().sqrt().clamp(min=1e-12))
                sae.b_dec.copy_((x / sae.scale).mean(0))
        xs = x / sae.scale
        recon, _z = sae(x)
        loss = (recon / sae.scale - xs).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # keep decoder rows at unit norm: drop the gradient's radial part, then renormalise
        with torch.no_grad():
            W, g = sae.W_dec, sae.W_dec.grad
            g -= (g * W).sum(1, keepdim=True) * W
        opt.step()
        sae.normalise_decoder()
        losses.append(float(loss.detach() / xs.pow(2).sum(-1).mean()))
    sae.eval()
    seconds = time.perf_counter() - t0
    info = {"tokens": config.steps * config.batch_blocks * config.context, "d": d}
    if folder is not None:
        with atomic.atomic_path(folder / f"{key}.pt") as tmp:
            torch.save({"state": {k: v.cpu() for k, v in sae.state_dict().items()}, "losses": losses,
                        "config": dataclasses.asdict(config), "info": info}, tmp)
    return TrainedSAE(sae, config, losses, key, False, seconds, info)


@torch.no_grad()
def features(sae: TopKSAE, model, ids: torch.Tensor, layer: int, batch_size: int = 8) -> np.ndarray:
    """(N, T, F) float32 SAE codes of the residual stream after block ``layer`` for ids (N, T)."""
    out = []
    for a in range(0, ids.shape[0], batch_size):
        out.append(sae.encode(residual(model, ids[a : a + batch_size], layer).float()).cpu())
    return torch.cat(out).numpy()


@torch.no_grad()
def explained_variance(sae: TopKSAE, model, ids: torch.Tensor, layer: int) -> float:
    """1 - sum |x - x_hat|^2 / sum |x - mean x|^2 on the residual stream of ``ids`` (held-out text)."""
    x = residual(model, ids, layer).reshape(-1, sae.d).float()
    r = sae(x)[0]
    return float(1.0 - (x - r).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
