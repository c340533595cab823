"""Shared ground of the prototype studies: the model a notebook uses, text samples, and the gates.

Everything works on the write / read gates that ``model(ids, output_gates=True)`` returns (both
ProtoT variants expose them under the same keys): the write gate w_{t,k} says how much token t
sends into channel k of a layer, the read gate r_{t,k} how much it reads from it. Layers and
prototypes count from 0, as in :mod:`protot.intervene`.

- :func:`load_model`: the trained ProtoT a notebook uses (a committed model, else the latest
  checkpoint of a training run, else a clear error saying how to get one) and a line naming it.
- :func:`sample_blocks`, :func:`windows_at`, :func:`token_id`: token windows from the token streams.
- :func:`collect_gates` -> :class:`GateStats`; :func:`token_table`: gate mass per token type.
- :func:`bootstrap_change`: percentile bootstrap interval of a relative change of a mean.

The studies built on it live in their own modules, imported from there: :mod:`protot.labels`
(labels and the concept check), :mod:`protot.ablation` (editing one prototype), :mod:`protot.usage`
(gate shares, dead prototypes), :mod:`protot.women` (the women measurements).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


GATE_KINDS = ("write", "read")
DEFAULT_MODEL = "protot-authors-small"
#: the local training run each committed ProtoT was exported from (models/README.md): the fallback of
#: :func:`load_model` when the committed folder is missing
RUNS = {"protot-authors-small": ".cache/runs/protot-authors-small"}


# -- the model a notebook uses ---------------------------------------------------------------------
@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    description: str  # one line naming the model (for the notebook's output and the claims' notes)
    source: str       # "committed" or "run"
    name: str         # the committed name, or the run folder


def load_model(name: str = DEFAULT_MODEL, run: str | Path | None = None,
               device: str | torch.device = "cpu") -> LoadedModel:
    """The trained ProtoT a notebook uses.

    ``name`` is a committed model (``models/<name>``, loaded with :func:`protot.train.pretrained.load`)
    or a path to a training run folder. When no committed model ``name`` exists, the latest
    checkpoint of ``run`` (relative paths are under the repository root) is loaded instead. When
    neither exists, FileNotFoundError says how to get one.
    """
    from compendium import paths
    from protot.train import checkpoint, pretrained, sweep
    from protot.train import tokenizer as tk

    if name in pretrained.available():
        m = pretrained.load(name, device=device)
        return LoadedModel(m.model, m.tokenizer, pretrained.describe(name), "committed", name)
    tried = [f"models/{name} (committed models: {pretrained.available() or 'none'})"]
    run = RUNS.get(name) if run is None else run
    candidates = [Path(name)] if ("/" in name or Path(name).is_dir()) else []
    if run is not None:
        candidates.append(Path(run))
    for folder in candidates:
        folder = folder if folder.is_absolute() else paths.repo_root() / folder
        ck = checkpoint.latest(folder) if (folder / "checkpoints").is_dir() else None
        if ck is None:
            tried.append(f"{folder} (no checkpoint)")
            continue
        rng = torch.get_rng_state(), random.getstate()
        try:
            model, cfg = sweep.load_run(folder, device=str(device))
        finally:   # loading a checkpoint restores its training RNG state: keep the caller's
            torch.set_rng_state(rng[0])
            random.setstate(rng[1])
        state = json.loads((ck / "state.json").read_text())
        n = sum(p.numel() for p in model.parameters())
        ppl = [m for m in _read_jsonl(folder / "metrics.jsonl") if m.get("split") == "validation"]
        ppl_text = f", last validation ppl {ppl[-1]['ppl']:.1f} (step {ppl[-1]['step']})" if ppl else ""
        desc = (f"run {folder.name} checkpoint {ck.name} (not a committed model): {cfg.arch} "
                f"({n / 1e6:.1f} M params, {model.config.num_hidden_layers} layers x {model.config.hidden_size}), "
                f"{state['tokens_seen'] / 1e6:.2f} M tokens of {cfg.tokens / 1e6:.2f} M planned{ppl_text}")
        return LoadedModel(model, tk.load_hf_tokenizer(), desc, "run", str(folder))
    raise FileNotFoundError(
        f"no trained ProtoT model: looked for {'; '.join(tried)}. Get one with `make setup` (the committed "
        "models/ ship with the repository: `git checkout -- models/`), or train and export it: "
        "the training and export commands of each committed model are in models/README.md and in its "
        "MANIFEST.json (`reproduce`).")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written by a running training
            pass
    return out


# -- text samples ------------------------------------------------------------------------------------
def sample_blocks(stream: np.ndarray, n_blocks: int, context: int, seed: int = 0) -> torch.Tensor:
    """(n, context) int64: ``n_blocks`` distinct non-overlapping blocks of ``stream``, seeded."""
    from protot.train import packing

    total = packing.blocks(stream, context)
    if total < 1:
        raise ValueError(f"the stream ({len(stream)} tokens) is shorter than one block of {context}")
    ids = np.sort(np.random.default_rng(seed).choice(total, size=min(n_blocks, total), replace=False))
    return packing.gather(stream, ids, context)


def token_id(tokenizer, word: str) -> int:
    """The id of ``word`` when it is exactly one token, else ValueError naming the word."""
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise ValueError(f"{word!r} is not a single token of this tokenizer (it encodes to {len(ids)} tokens: "
                         f"{pieces}); probe a word that is one token, e.g. with its leading space")
    return int(ids[0])


def windows_at(stream: np.ndarray, target: int, context: int, *, where: str = "before",
               max_windows: int | None = None, seed: int = 0) -> torch.Tensor:
    """(n, context) int64 windows of ``stream`` at the occurrences of token ``target``.

    ``where="before"``: the ``context`` tokens just before an occurrence (the last position's next
    token is ``target``: the positions where p(target) is measured). ``where="center"``: windows
    holding the occurrence at position ``context // 2``. Occurrences too close to either end are
    skipped; ``max_windows`` keeps a seeded random subset (in stream order).
    """
    if where not in ("before", "center"):
        raise ValueError(f"where must be 'before' or 'center', got {where!r}")
    s = np.asarray(stream)
    pos = np.flatnonzero(s == target)
    start = pos - context if where == "before" else pos - context // 2
    ok = (start >= 0) & (start + context <= len(s))
    start = start[ok]
    if max_windows is not None and len(start) > max_windows:
        start = np.sort(np.random.default_rng(seed).choice(start, size=max_windows, replace=False))
    if len(start) == 0:
        return torch.zeros(0, context, dtype=torch.long)
    return torch.from_numpy(np.stack([s[a : a + context].astype(np.int64) for a in start]))


# -- gates over a sample -------------------------------------------------------------------------------
@dataclass
class GateStats:
    """Gates of every layer over a sample: ``ids`` (N, T); ``write`` / ``read`` (L, N, T, R) float32;
    ``half_life`` (L, R) in tokens; ``vocab_size``."""

    ids: np.ndarray
    write: np.ndarray
    read: np.ndarray
    half_life: np.ndarray
    vocab_size: int
    _tables: dict = field(default_factory=dict, repr=False)

    @property
    def layers(self) -> int:
        return self.write.shape[0]

    @property
    def prototypes(self) -> int:
        return self.write.shape[-1]

    def gate(self, kind: str) -> np.ndarray:
        """(L, N*T, R) gates of ``kind`` ("write" or "read") with positions flattened."""
        if kind not in GATE_KINDS:
            raise ValueError(f"gate must be one of {GATE_KINDS}, got {kind!r}")
        g = self.write if kind == "write" else self.read
        return g.reshape(g.shape[0], -1, g.shape[-1])


@torch.no_grad()
def collect_gates(model, ids: torch.Tensor, batch_size: int = 8) -> GateStats:
    """Run ``model`` over ``ids`` (N, T) and keep every layer's write and read gates."""
    if ids.ndim != 2 or ids.shape[0] == 0:
        raise ValueError(f"ids must be a non-empty (N, T) tensor, got shape {tuple(ids.shape)}")
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    writes, reads = [], []
    try:
        for a in range(0, ids.shape[0], batch_size):
            out = model(ids[a : a + batch_size].to(dev), use_cache=False, output_gates=True)
            if out.gates is None:
                raise ValueError("the model returned no gates (not a ProtoT model?)")
            writes.append(torch.stack([g["write_gate"] for g in out.gates]).float().cpu())
            reads.append(torch.stack([g["read_gate"] for g in out.gates]).float().cpu())
    finally:
        model.train(was_training)
    hl = torch.stack([g["half_life"] for g in out.gates]).float().cpu().numpy()
    return GateStats(ids=ids.cpu().numpy().astype(np.int64), write=torch.cat(writes, 1).numpy(),
                     read=torch.cat(reads, 1).numpy(), half_life=hl, vocab_size=int(model.config.vocab_size))



def token_table(stats: GateStats, gate: str = "write", token_ids: np.ndarray | None = None, *,
                next_token: bool = False):
    """(sums (L, V, R): gate mass per token type, counts (V,)); ``token_ids`` replaces the sample's
    (flattened) ids, e.g. a permutation of them for the shuffled null. ``next_token=True``
    attributes the gate at position t to the token at t + 1 (which prototypes are written / read
    just before a token is predicted); the last position of each row is then left out."""
    key = (gate, next_token) if token_ids is None else None
    if key is not None and key in stats._tables:
        return stats._tables[key]
    g = stats.write if gate == "write" else stats.read if gate == "read" else stats.gate(gate)
    ids = stats.ids
    if next_token:
        g, ids = g[:, :, :-1], ids[:, 1:]
    g = torch.from_numpy(np.ascontiguousarray(g).reshape(g.shape[0], -1, g.shape[-1])).double()   # (L, M, R)
    tid = ids.reshape(-1) if token_ids is None else np.asarray(token_ids).reshape(-1)
    if tid.shape[0] != g.shape[1]:
        raise ValueError(f"token_ids has {tid.shape[0]} entries for {g.shape[1]} positions")
    V = stats.vocab_size
    sums = torch.zeros(g.shape[0], V, g.shape[-1], dtype=torch.float64)
    sums.index_add_(1, torch.from_numpy(tid), g)
    counts = np.bincount(tid, minlength=V)
    out = (sums.numpy(), counts)
    if key is not None:
        stats._tables[key] = out
    return out



def bootstrap_change(p0: np.ndarray, p1: np.ndarray, n_boot: int = 2000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval (over contexts, paired) of 100 (mean p1 / mean p0 - 1)."""
    from compendium.stats import bootstrap_paired_ci

    return bootstrap_paired_ci(lambda a, b: 100.0 * (b.mean(1) / a.mean(1) - 1.0), p0, p1,
                               n_boot=n_boot, seed=seed, level=level)
