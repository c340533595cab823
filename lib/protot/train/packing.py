"""Tokenised, packed, cached token streams and a stateless batch schedule.

A split is tokenised once: every document is encoded with the project's BPE, followed by the
end-of-text token, and all documents are concatenated (in corpus order) into one uint16 stream
saved as ``<cache>/tokens/<name>-<key>.npy``. The key hashes everything that determines the
stream: the corpus files' bytes, the tokenizer file, the split rule and this module's format
version. Changing any of them gives a new key, hence a rebuild; otherwise the cached file is
memory-mapped and reused. The JSON beside each stream records the sha256 of the ``.npy`` file
(``npy_sha256``); it is checked on every load, and a cache that does not match (a flipped token, a
truncated file) or that has no recorded sha256 is rebuilt from the sources, with a warning.

Only files listed in ``data/SHA256SUMS``, with the listed sha256, are read: an extra file that a
training-mix pattern would match (e.g. ``corpus/en/openstax_extra.jsonl.gz``), a symbolic link or a
modified file is refused (:class:`UnlistedDataError`, the rule of :func:`compendium.data.check_files`)
instead of silently changing what is trained on.

Training reads the stream as non-overlapping blocks of ``context`` tokens. Which blocks form the
batch of optimiser step ``s`` is a pure function of (seed, s): global sample ``g = s * B + j``
sits in epoch ``g // n_blocks`` whose block order is a seeded permutation. The only "data
position" a checkpoint needs is therefore the step, and resuming is exact.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compendium import atomic, data, paths
from protot.train import tokenizer as tk

FORMAT_VERSION = 1
_ENCODE_BATCH = 256


#: A data file is not listed in data/SHA256SUMS, is missing or a symbolic link, or differs from its
#: listed sha256 (the rule of :func:`compendium.data.check_files`, shared by every reader of data/).
UnlistedDataError = data.DataFileError


def check_listed(files) -> None:
    """Refuse data files that data/SHA256SUMS does not list, that are symbolic links, or whose sha256
    differs from the listed one (:func:`compendium.data.check_files`)."""
    data.check_files(files)


def source_key(split: str, lang: str = "en", tokenizer_path: Path | None = None,
               validation_fraction: float = data.DEFAULT_VALIDATION_FRACTION) -> tuple[str, dict]:
    """(short key, description) identifying the token stream of ``split``; see the module doc."""
    tok_path = Path(tokenizer_path) if tokenizer_path is not None else tk.tokenizer_path()
    if split == "wikitext2-test":
        files = [data.data_file("corpus/en_eval_wikitext2_test.raw.gz")]
    else:
        files = data.corpus_files(lang)
    check_listed(files)
    desc = {
        "format": FORMAT_VERSION,
        "split": split,
        "lang": lang,
        "validation_fraction": validation_fraction,
        "tokenizer": tok_path.name,
        "tokenizer_sha256": tk.tokenizer_hash(tok_path),
        "files": {str(f.relative_to(paths.data_dir())): data.file_sha256(f) for f in files},
    }
    key = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
    return key, desc


def _encode_stream(texts, tok, eos: int | None) -> tuple[np.ndarray, int]:
    """Encode documents, append ``eos`` after each (unless None); returns (uint16 stream, n_bytes)."""
    parts: list[np.ndarray] = []
    n_bytes = 0
    for i in range(0, len(texts), _ENCODE_BATCH):
        batch = texts[i : i + _ENCODE_BATCH]
        n_bytes += sum(len(t.encode("utf-8")) for t in batch)
        for enc in tok.encode_batch(batch):
            ids = enc.ids + ([eos] if eos is not None else [])
            parts.append(np.asarray(ids, dtype=np.uint16))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    return stream, n_bytes


def _load_cached(npy: Path, meta: Path) -> np.ndarray | None:
    """The memory-mapped cached stream when it matches the sha256 in its JSON; None to rebuild."""
    if not (npy.exists() and meta.exists()):
        return None
    try:
        want = json.loads(meta.read_text()).get("npy_sha256")
    except (OSError, ValueError, AttributeError):
        want = None
    if want is None:
        warnings.warn(f"token cache {npy.name} has no recorded sha256 (written by an older version, or its "
                      f"{meta.name} is unreadable): rebuilding it from the sources", stacklevel=3)
        return None
    if data.sha256_of(npy) != want:
        warnings.warn(f"token cache {npy} does not match the sha256 recorded in {meta.name} (corrupted or "
                      "modified): rebuilding it from the sources", stacklevel=3)
        return None
    return np.load(npy, mmap_mode="r")


def _store(npy: Path, meta: Path, stream: np.ndarray, info: dict) -> np.ndarray:
    """Write ``stream`` and its JSON (with the file's sha256) atomically; return the memory map."""
    with atomic.atomic_path(npy) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, stream)
        digest = data.sha256_of(tmp)
    atomic.write_json(meta, {**info, "npy_sha256": digest})
    return np.load(npy, mmap_mode="r")


def token_stream(split: str, lang: str = "en", tokenizer_path: Path | None = None,
                 validation_fraction: float = data.DEFAULT_VALIDATION_FRACTION,
                 cache: Path | None = None) -> np.ndarray:
    """The uint16 token stream of ``split`` ("train", "validation" or "wikitext2-test"), cached.

    Returns a read-only memory map. The cache is rebuilt only when the source files, the tokenizer
    or the split rule change (their hashes form the file name).
    """
    key, desc = source_key(split, lang, tokenizer_path, validation_fraction)
    folder = Path(cache) if cache is not None else paths.cache_dir() / "tokens"
    name = f"{split}-{lang}-{key}"
    npy, meta = folder / f"{name}.npy", folder / f"{name}.json"
    cached = _load_cached(npy, meta)
    if cached is not None:
        return cached
    tok = tk.load_tokenizer(tokenizer_path)
    if tok.get_vocab_size() > 65535:
        raise ValueError("uint16 token streams need a vocabulary of at most 65535 tokens")
    if split == "wikitext2-test":
        # One text, as the standard WikiText-2 evaluation does; no end-of-text tokens.
        stream, n_bytes = _encode_stream([data.load_wikitext2_test()], tok, eos=None)
    else:
        docs = data.load_corpus(split, lang, validation_fraction=validation_fraction)
        stream, n_bytes = _encode_stream(docs["text"], tok, eos=tk.eos_id(tok))
    return _store(npy, meta, stream, {**desc, "tokens": int(stream.size), "bytes": int(n_bytes)})


def stream_info(split: str, lang: str = "en", tokenizer_path: Path | None = None,
                cache: Path | None = None) -> dict:
    """The JSON description stored beside a cached stream (tokens, bytes, hashes)."""
    token_stream(split, lang, tokenizer_path, cache=cache)
    key, _ = source_key(split, lang, tokenizer_path)
    folder = Path(cache) if cache is not None else paths.cache_dir() / "tokens"
    return json.loads((folder / f"{split}-{lang}-{key}.json").read_text())


def fineweb_stream(split: str, max_tokens: int, *, name: str = "sample-10BT",
                   validation_fraction: float = data.DEFAULT_VALIDATION_FRACTION,
                   tokenizer_path: Path | None = None, cache: Path | None = None) -> np.ndarray:
    """The first ``max_tokens`` tokens of FineWeb-Edu's ``split`` (online users; cached like the corpus).

    FineWeb-Edu is streamed with `datasets` (compendium.data.load_fineweb_edu) and split at the
    document level by the same rule as the corpus (sha256 of the document id).
    """
    if split not in ("train", "validation"):
        raise ValueError(f"FineWeb-Edu splits are 'train' and 'validation', got {split!r}")
    tok_path = Path(tokenizer_path) if tokenizer_path is not None else tk.tokenizer_path()
    desc = {"format": FORMAT_VERSION, "source": f"HuggingFaceFW/fineweb-edu/{name}", "split": split,
            "max_tokens": max_tokens, "validation_fraction": validation_fraction,
            "tokenizer_sha256": tk.tokenizer_hash(tok_path)}
    key = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cache) if cache is not None else paths.cache_dir() / "tokens"
    npy, meta = folder / f"fineweb-{split}-{key}.npy", folder / f"fineweb-{split}-{key}.json"
    cached = _load_cached(npy, meta)
    if cached is not None:
        return cached
    try:
        docs = data.load_fineweb_edu(name=name, split="train", streaming=True)
    except Exception as e:  # offline: the Hub is unreachable
        raise RuntimeError(f"FineWeb-Edu needs the Hugging Face Hub (online): {e}") from e
    tok = tk.load_tokenizer(tok_path)
    eos = tk.eos_id(tok)
    want_val = split == "validation"
    out = np.empty(max_tokens, dtype=np.uint16)
    n, n_bytes, texts = 0, 0, []

    def flush():
        nonlocal n, n_bytes
        part, b = _encode_stream(texts, tok, eos)
        take = min(len(part), max_tokens - n)
        out[n : n + take] = part[:take]
        n += take
        n_bytes += b
        texts.clear()

    for row in docs:
        if data.in_validation(str(row["id"]), validation_fraction) != want_val:
            continue
        texts.append(row["text"])
        if len(texts) == _ENCODE_BATCH:
            flush()
            if n >= max_tokens:
                break
    if texts and n < max_tokens:
        flush()
    return _store(npy, meta, out[:n], {**desc, "tokens": int(n), "bytes": int(n_bytes)})


@dataclass(frozen=True)
class BatchSchedule:
    """Which blocks of a packed stream form each optimiser step's batch (stateless, seeded).

    ``n_blocks`` non-overlapping blocks of ``context`` tokens; ``batch_size`` sequences per step.
    """

    n_blocks: int
    batch_size: int
    seed: int

    def __post_init__(self):
        if self.n_blocks < 1:
            raise ValueError("the token stream is shorter than one block")

    def _perm(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n_blocks)

    def block_ids(self, step: int) -> np.ndarray:
        """Block indices (batch_size,) of optimiser step ``step`` (0-based)."""
        g = np.arange(step * self.batch_size, (step + 1) * self.batch_size)
        epochs, pos = np.divmod(g, self.n_blocks)
        out = np.empty_like(g)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self._perm(int(e))[pos[sel]]
        return out


def blocks(stream: np.ndarray, context: int) -> int:
    """Number of whole, non-overlapping blocks of ``context`` tokens in ``stream``."""
    return len(stream) // context


def gather(stream: np.ndarray, ids: np.ndarray, context: int):
    """A (len(ids), context) int64 tensor of the given blocks."""
    import torch

    rows = np.stack([np.asarray(stream[i * context : (i + 1) * context], dtype=np.int64) for i in ids])
    return torch.from_numpy(rows)


# ---------------------------------------------------------------------------------------------
# A portable pack: token streams as one raw little-endian uint16 file plus a small JSON
# ---------------------------------------------------------------------------------------------
PACK_TOKENS = "tokens.u16"
PACK_INFO = "pack.json"
PACK_FORMAT = 1


class PackError(ValueError):
    """A token pack is missing, incomplete or does not match its JSON."""


def write_u16_pack(out_dir: str | Path, parts: dict[str, np.ndarray], info: dict | None = None) -> dict:
    """Write ``parts`` (name -> 1-D token array, e.g. {"train": ..., "validation": ...}) one after the
    other into ``out_dir/tokens.u16`` (raw little-endian uint16, no header) and ``out_dir/pack.json``
    (each part's offset and length in tokens, the file's sha256 and ``info``). A machine that has
    neither data/ nor `datasets` reads it back with :func:`read_u16_pack` (numpy only)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not parts:
        raise PackError("a token pack needs at least one part")
    index, offset = {}, 0
    tokens = out / PACK_TOKENS
    with atomic.atomic_path(tokens) as tmp:
        with open(tmp, "wb") as fh:
            for name, arr in parts.items():
                arr = np.asarray(arr)
                if arr.ndim != 1 or arr.size == 0:
                    raise PackError(f"part {name!r} must be a non-empty 1-D token array, got shape {arr.shape}")
                if arr.min() < 0 or arr.max() > 65535:
                    raise PackError(f"part {name!r} holds token ids outside uint16 (0..65535)")
                arr.astype("<u2", copy=False).tofile(fh)
                index[name] = {"offset": offset, "tokens": int(arr.size)}
                offset += int(arr.size)
        digest = data.sha256_of(tmp)
    meta = {"format": PACK_FORMAT, "file": PACK_TOKENS, "dtype": "uint16-le", "tokens": offset,
            "sha256": digest, "parts": index, **(info or {})}
    atomic.write_json(out / PACK_INFO, meta)
    return meta


def read_u16_pack(pack_dir: str | Path, verify: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """({part: read-only uint16 memory map}, pack.json) of a pack written by :func:`write_u16_pack`;
    the file's size and (with ``verify``) sha256 are checked against the JSON."""
    folder = Path(pack_dir)
    info_path, tokens = folder / PACK_INFO, folder / PACK_TOKENS
    if not info_path.is_file() or not tokens.is_file():
        raise PackError(f"{folder} is not a token pack: it needs {PACK_INFO} and {PACK_TOKENS} "
                        "(written by `python -m protot.train.gpu pack`)")
    try:
        meta = json.loads(info_path.read_text())
        parts, total = meta["parts"], int(meta["tokens"])
    except (ValueError, KeyError, TypeError) as e:
        raise PackError(f"{info_path} is not a valid pack description: {e}") from None
    if meta.get("format") != PACK_FORMAT:
        raise PackError(f"{info_path}: pack format {meta.get('format')!r}, this code reads {PACK_FORMAT}")
    if tokens.stat().st_size != 2 * total:
        raise PackError(f"{tokens} holds {tokens.stat().st_size} bytes, {info_path.name} says {2 * total} "
                        "(truncated or from another pack)")
    if verify and data.sha256_of(tokens) != meta["sha256"]:
        raise PackError(f"{tokens} does not match the sha256 in {info_path.name} (corrupted or modified)")
    mm = np.memmap(tokens, dtype="<u2", mode="r")
    out = {}
    for name, p in parts.items():
        lo, n = int(p["offset"]), int(p["tokens"])
        if lo < 0 or n < 1 or lo + n > total:
            raise PackError(f"{info_path}: part {name!r} ({lo}, {n}) lies outside the {total} tokens")
        out[name] = mm[lo:lo + n]
    return out, meta
