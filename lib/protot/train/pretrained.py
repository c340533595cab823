"""The committed trained models under ``models/<name>/`` and how notebooks load them.

Each folder holds ``model.safetensors`` (float16 weights, < 20 MB), ``config.json`` (the model
config) and ``MANIFEST.json`` (architecture, training config, tokens seen, data, tokenizer hash,
validation and WikiText-2 perplexity, sha256 of the weights, git revision).

    from protot.train import pretrained
    m = pretrained.load("protot-cpu")        # verified against its MANIFEST; float32, eval mode
    m.model, m.tokenizer, m.manifest
    print(pretrained.describe("protot-cpu"))  # one line saying which model a notebook used

Export a finished run (how the committed models were made: models/README.md):
``python -m protot.train.pretrained export .cache/runs/protot-cpu-hour protot-cpu``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from compendium import atomic, paths, provenance
from protot.train import checkpoint, evaluate
from protot.train import tokenizer as tk
from protot.train.config import TrainConfig

MAX_BYTES = 20 * 1024 * 1024


def models_dir() -> Path:
    """<root>/models, or the folder named by the PROTOT_MODELS environment variable."""
    env = os.environ.get("PROTOT_MODELS")
    return Path(env).resolve() if env else paths.repo_root() / "models"


def available() -> list[str]:
    """Names of the committed models (folders of models/ holding a MANIFEST.json)."""
    d = models_dir()
    return sorted(p.parent.name for p in d.glob("*/MANIFEST.json")) if d.is_dir() else []


@dataclass
class Pretrained:
    name: str
    model: torch.nn.Module
    tokenizer: object  # transformers.PreTrainedTokenizerFast
    manifest: dict


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(name: str) -> dict:
    path = models_dir() / name / "MANIFEST.json"
    if not path.exists():
        raise FileNotFoundError(f"no committed model {name!r} (looked for {path}); available: {available() or 'none'}")
    return json.loads(path.read_text())


def describe(name: str) -> str:
    """One line naming the model: arch, size, parameters, tokens seen, perplexities, weight hash."""
    m = manifest(name)
    ev = m.get("eval", {})
    ppl = ", ".join(f"{k} ppl {v['ppl']:.1f}" for k, v in ev.items())
    return (f"models/{name}: {m['arch']} ({m['parameters']['total'] / 1e6:.1f} M params, "
            f"{m['model_config'].get('num_hidden_layers')} layers x {m['model_config'].get('hidden_size')}), "
            f"{m['tokens_seen'] / 1e6:.2f} M tokens, {ppl}; sha256 {m['weights_sha256'][:12]}")


def _model_from(cfg: TrainConfig, vocab_size: int):
    from protot.train.trainer import build_model

    return build_model(cfg, vocab_size)


def load(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Pretrained:
    """Load committed model ``name``; the weights are checked against the manifest's sha256."""
    from safetensors.torch import load_model

    m = manifest(name)
    folder = models_dir() / name
    weights = folder / "model.safetensors"
    if _sha256(weights) != m["weights_sha256"]:
        raise checkpoint.CorruptCheckpointError(f"{weights} does not match the sha256 in its MANIFEST.json")
    if tk.tokenizer_hash() != m["tokenizer"]["sha256"]:
        raise checkpoint.CheckpointMismatchError(
            f"models/{name} was trained with tokenizer sha256 {m['tokenizer']['sha256'][:12]}, "
            f"but data/tokenizers/{tk.TOKENIZER_FILE} is {tk.tokenizer_hash()[:12]}")
    cfg = TrainConfig.from_dict(m["train_config"])
    model = _model_from(cfg, m["model_config"]["vocab_size"])
    try:
        load_model(model, str(weights), strict=True)
    except RuntimeError as e:
        raise checkpoint.CheckpointMismatchError(
            f"models/{name} no longer fits protot.models' {cfg.arch} (the model code changed?): {e}") from None
    model = model.to(device=device, dtype=dtype).eval()
    return Pretrained(name=name, model=model, tokenizer=tk.load_hf_tokenizer(), manifest=m)


def export(run: str | Path, name: str, *, eval_blocks: int | None = 512, dest: Path | None = None) -> dict:
    """Export the latest checkpoint of ``run`` as models/<name> (float16) and evaluate it.

    ``eval_blocks``: blocks of ``context`` tokens evaluated per split (None: the whole split).
    """
    from safetensors.torch import save_model

    from protot.models import count_parameters

    ck = checkpoint.latest(run)
    if ck is None:
        raise FileNotFoundError(f"{run} has no checkpoint")
    state = checkpoint.verify(ck)
    cfg = TrainConfig.from_dict(state["config"])
    vocab = tk.load_tokenizer().get_vocab_size()
    model = _model_from(cfg, vocab)
    checkpoint.load(ck, model, None, {"tokenizer_sha256": tk.tokenizer_hash()})
    model.eval()
    ev = evaluate.evaluate_all(model, cfg.context, max_blocks=eval_blocks)
    folder = Path(dest) if dest is not None else models_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    half = _model_from(cfg, vocab)
    half.load_state_dict(model.state_dict())
    half = half.half()
    with atomic.atomic_path(folder / "model.safetensors") as tmp:
        save_model(half, str(tmp), metadata={"format": "pt", "name": name})
    size = (folder / "model.safetensors").stat().st_size
    if size > MAX_BYTES:
        raise ValueError(f"{folder / 'model.safetensors'} is {size / 2**20:.1f} MiB, over the 20 MiB limit")
    atomic.write_json(folder / "config.json", model.config.to_dict())
    man = {
        "name": name,
        "arch": cfg.arch,
        "model_class": type(model).__name__,
        "dtype": "float16",
        "parameters": count_parameters(model),
        "tokens_seen": state["tokens_seen"],
        "steps": state["step"],
        "planned_steps": cfg.steps,
        # re-plans of the token budget on resume ({"step", "from_tokens", "to_tokens"}), if any
        "budget_history": state.get("budget_history", []),
        "train_config": cfg.to_dict(),
        "model_config": json.loads(model.config.to_json_string()),
        "data": {
            "train": "data/corpus/en, training mix compendium.data.TRAIN_MIX['en'], split 'train' "
                     "(document-level: sha256(id) below 2% of 2**32 goes to validation)",
            "data_key": state["data_key"],
            "eval_blocks_per_split": eval_blocks,
        },
        "tokenizer": {"file": f"data/tokenizers/{tk.TOKENIZER_FILE}", "sha256": tk.tokenizer_hash()},
        "eval": ev,
        "weights_sha256": _sha256(folder / "model.safetensors"),
        "weights_bytes": size,
        "checkpoint": str(ck.name),
        "exported_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provenance": provenance.describe(),
    }
    atomic.write_json(folder / "MANIFEST.json", man)
    for f in ("model.safetensors", "config.json", "MANIFEST.json"):
        os.chmod(folder / f, 0o644)
    return man


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m protot.train.pretrained")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export a run's latest checkpoint to models/<name>")
    e.add_argument("run")
    e.add_argument("name")
    e.add_argument("--eval-blocks", type=int, default=512, help="blocks per split (0: all)")
    sub.add_parser("list", help="list committed models")
    a = p.parse_args(argv)
    if a.cmd == "export":
        man = export(a.run, a.name, eval_blocks=a.eval_blocks or None)
        print(describe(a.name) if (models_dir() / a.name).exists() else json.dumps(man["eval"], indent=2))
    else:
        for n in available():
            print(describe(n))


if __name__ == "__main__":
    main()
