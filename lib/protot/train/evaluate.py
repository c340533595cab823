"""Perplexity on the validation split and on WikiText-2 (test), per token and per byte.

Perplexity is exp(mean next-token negative log-likelihood) over non-overlapping blocks of
``context`` tokens (the first token of each block is context only, as in the training loss).
Per-token perplexity depends on the tokenizer: ours is a 12k BPE, the paper's is not, so the
values are not comparable with the paper's. Bits per byte (mean NLL / ln 2 x tokens / UTF-8 bytes
of the evaluated stream) does not depend on the tokenizer and is reported beside it.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from protot.train import packing

if TYPE_CHECKING:
    import pandas as pd


@torch.no_grad()
def stream_nll(model, stream: np.ndarray, context: int, *, batch_size: int = 16,
               max_blocks: int | None = None, device: str | torch.device = "cpu",
               autocast_dtype: torch.dtype | None = None) -> tuple[float, int]:
    """(sum of next-token NLL in nats, number of predicted tokens) over the first blocks of ``stream``."""
    n = packing.blocks(stream, context)
    if max_blocks is not None:
        n = min(n, max_blocks)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, n, batch_size):
        ids = np.arange(start, min(n, start + batch_size))
        x = packing.gather(stream, ids, context).to(device)  # (B, T)
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            logits = model(input_ids=x).logits  # (B, T, V)
        nll = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                              reduction="sum")
        total += float(nll)
        count += x[:, 1:].numel()
    model.train(was_training)
    return total, count


def perplexity(model, split: str, context: int, *, batch_size: int = 16, max_blocks: int | None = None,
               device: str | torch.device = "cpu", lang: str = "en", autocast_dtype=None) -> dict:
    """Perplexity of ``model`` on ``split`` ("validation", "wikitext2-test" or "train").

    Returns {"split", "loss", "ppl", "bits_per_byte", "tokens"}.
    """
    stream = packing.token_stream(split, lang)
    info = packing.stream_info(split, lang)
    total, count = stream_nll(model, stream, context, batch_size=batch_size, max_blocks=max_blocks,
                              device=device, autocast_dtype=autocast_dtype)
    loss = total / count
    bytes_per_token = info["bytes"] / info["tokens"]
    return {"split": split, "loss": loss, "ppl": math.exp(loss),
            "bits_per_byte": loss / math.log(2) / bytes_per_token, "tokens": count}


def evaluate_all(model, context: int, **kw) -> dict:
    """Validation and WikiText-2 perplexity: {"validation": {...}, "wikitext2-test": {...}}."""
    return {s: perplexity(model, s, context, **kw) for s in ("validation", "wikitext2-test")}


def unigram_perplexity(split: str = "validation", lang: str = "en") -> float:
    """Perplexity of the training split's add-one unigram distribution on ``split``: the floor a
    model must beat to have learned anything beyond token frequencies."""
    train = np.asarray(packing.token_stream("train", lang))
    target = np.asarray(packing.token_stream(split, lang))
    vocab = int(max(train.max(), target.max())) + 1
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(math.exp(-logp[target].mean()))


# --- the claims of notebook protot/02_training (protot/ppl-ranking: split_eval.measure_ranking) ---

PPL_CLAIMS = {"protot": "protot/ppl-protot-large", "llama": "protot/ppl-llama-large",
              "deltanet": "protot/ppl-deltanet-large"}


def _trained_here(table) -> "pd.DataFrame":
    missing = [c for c in ("model", "source", "val ppl", "val bits/byte", "WikiText-2 ppl") if c not in table]
    if missing:
        raise ValueError(f"the perplexity table lacks column(s) {missing}")
    ours = table[table["source"].str.startswith("trained")]
    if ours["model"].duplicated().any():
        raise ValueError(f"a model trained here appears twice in the perplexity table: {ours['model'].tolist()}")
    return ours


def measure_ppl(arch: str, table, curves, unigram: float, committed: dict[str, dict], comparable_setup: bool,
                scale_note: str, config: dict | None = None):
    """Claims protot/ppl-<arch>-large: the validation perplexity of the model of ``arch`` trained here.

    ``table``: one row per model (``model``, ``source`` starting with "trained" for the models trained
    in this run, ``val ppl``, ``val bits/byte``, ``WikiText-2 ppl``); ``curves``: the training curves
    (recorded with it); ``committed``: {name: manifest} of committed models (a model of the same
    architecture with an evaluation, not a snapshot, adds its own validation perplexity and tokens as
    evidence); ``scale_note``: prose on the setting, appended to the note.
    """
    from compendium.claims import Measurement

    if arch not in PPL_CLAIMS:
        raise ValueError(f"measure_ppl: no perplexity claim for {arch!r}; known: {sorted(PPL_CLAIMS)}")
    ours = _trained_here(table)
    row = ours[ours["model"] == arch]
    if len(row) != 1:
        raise ValueError(f"measure_ppl: no model {arch!r} trained here in the table (models {ours['model'].tolist()})")
    val = float(row["val ppl"].iloc[0])
    evidence = {"wikitext2_ppl": float(row["WikiText-2 ppl"].iloc[0]),
                "val_bits_per_byte": float(row["val bits/byte"].iloc[0]), "unigram_ppl": unigram}
    same = {man["arch"]: (name, man) for name, man in committed.items()}  # one committed model per architecture
    if arch in same and same[arch][1].get("eval"):                         # a snapshot has no evaluation
        name, man = same[arch]
        evidence[f"models/{name} val_ppl"] = man["eval"]["validation"]["ppl"]
        evidence[f"models/{name} tokens"] = man["tokens_seen"]
    return Measurement(
        PPL_CLAIMS[arch], values={"val_ppl": val, "comparable_setup": bool(comparable_setup)}, evidence=evidence,
        tables={"02_perplexity": table, "02_loss_curves": curves}, config=dict(config or {}),
        note=f"validation perplexity {val:.1f}; " + scale_note)


#: TrainConfig fields that may differ between two runs compared "at equal size and tokens".
_PAIR_FREE_FIELDS = ("arch", "model_overrides", "eval_every", "eval_blocks", "ckpt_every", "keep_checkpoints")


def equal_budget(manifests: dict[str, dict], tolerance: float = 0.01, *, free: tuple = ()) -> tuple[bool, list[str]]:
    """Whether committed models (``{name: MANIFEST}``) were trained at equal size and tokens: each
    finished (steps >= planned steps) and evaluated, the same tokens seen, data key, tokenizer and
    training config apart from the architecture and its overrides, and non-embedding parameters
    within ``tolerance`` of each other. ``free``: more training-config fields that may differ (e.g.
    ``("seed",)`` for models that differ only in the training seed). Returns (ok, the reasons it is not)."""
    if len(manifests) < 2:
        raise ValueError(f"equal_budget compares at least two models, got {list(manifests)}")
    why = []
    for name, m in manifests.items():
        if m.get("steps", 0) < m.get("planned_steps", float("inf")):
            why.append(f"{name} is not finished (step {m.get('steps')} of {m.get('planned_steps')})")
        if not m.get("eval"):
            why.append(f"{name} has no evaluation (a snapshot, not an export)")

    def same(label, get):
        vals = {n: get(m) for n, m in manifests.items()}
        if len({json.dumps(v, sort_keys=True) for v in vals.values()}) > 1:
            why.append(f"{label} differ: {vals}")

    def train_cfg(m):
        return {k: v for k, v in m["train_config"].items() if k not in _PAIR_FREE_FIELDS and k not in free}

    same("tokens seen", lambda m: m["tokens_seen"])
    same("data keys", lambda m: m["data"]["data_key"])
    same("tokenizers", lambda m: m["tokenizer"]["sha256"])
    same("training configs (besides arch)", train_cfg)
    sizes = {n: m["parameters"]["non_embedding"] for n, m in manifests.items()}
    if max(sizes.values()) > (1 + tolerance) * min(sizes.values()):
        why.append(f"non-embedding parameters differ by more than {tolerance:.0%}: {sizes}")
    return not why, why
