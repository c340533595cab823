"""Train the paper's two settings of all four families on one CUDA GPU in a few minutes.

    python -m protot.train.gpu pack [--out build/gpu_pack] [--train-tokens N] [--val-tokens N]
    python -m protot.train.gpu train --pack build/gpu_pack --out DIR [--archs ...] [--sizes ...]
    python -m protot.train.gpu train --pack DIR --out DIR --dry-run     (the same code on the CPU, tiny)

``pack`` (on a machine with data/) writes the offline corpus's training and validation tokens as
one raw uint16 file plus a JSON (:func:`protot.train.packing.write_u16_pack`); ``train`` reads only
that pack (numpy, torch, transformers; no data/, no `datasets`, no tokenizer file).

``train`` runs ProtoT, LLaMA, DeltaNet and Mamba at the paper's small (6 layers x 256) and large
(12 x 512) settings, context 256, batch 128 (the ``paper-small`` / ``paper-large`` profiles of
:mod:`protot.train.config`) with the authors' recipe otherwise (AdamW 6e-4, betas (0.9, 0.999), no
clipping, constant rate, their backbone for every architecture: ProtoT is the authors' variant) and a token budget sized for the whole run (all eight models)
to fit in under 10 minutes on one H200; bfloat16 autocast, the Triton mixer (chunk 64, the GPU
tiling the kernels are compiled for sm_90 and tested in, under the interpreter), fused AdamW. The budget is the same for the
four families at a size (the paper's rule) and far below the paper's (12 M tokens per model,
against 250 M for the paper's small setting): a first GPU run, not the paper's training. Each
model also has a wall-clock cap (counted after its first step, which compiles the Triton kernels),
and a run stopped by it says so (``stopped_by_time_cap``, with the tokens actually seen; its
cosine schedule did not finish).

How the budget was estimated (no GPU was available to measure it; the run records the measured
tokens/s and achieved FLOP/s so the next plan can use them):
    FLOPs per token = 6 x (non-embedding parameters + the output head's d x vocab)
                      + 6 x layers x context x hidden  (LLaMA's causal attention; the linear
                      mixers' state terms are a few % and left out)
    small: 6 x 256 = 7.6 M parameters -> ~45 MFLOP/token;  large: 12 x 512 -> ~0.25 GFLOP/token
    assumed sustained rate: 40 TFLOP/s (small) and 80 TFLOP/s (large) in bfloat16 for LLaMA and
    ProtoT, i.e. 4-8 % of the H200's ~990 TFLOP/s dense peak: such narrow models are bound by
    kernel launches and memory, not by tensor cores.
    small, 12 M tokens: 12e6 x 45e6 / 40e12 ~ 14 s;  large, 12 M tokens: 12e6 x 0.25e9 / 80e12 ~ 38 s.
DeltaNet and Mamba here are the project's pure-torch forms (a Python loop over chunks / over
tokens, several times slower; Mamba's scan also keeps a state per token for the backward, tens of
GB at the large setting); their caps bound them, and a model that fails (e.g. out of memory) is
recorded with its error while the others go on (Mamba large: two micro-batches of 64). Caps: 25 s per small model, 55 s per large one,
and ``--total-cap-s`` (default 300 s) for all eight: a model gets at most what is left of it.
:data:`PLAN` holds the numbers (tests/train/test_gpu_train.py checks that the estimate fits them).

Output (``--out``): ``<arch>-<size>.tar`` for each model whose float16 weights fit in 16 MiB
(the small ones, 14.5 MiB: model.safetensors, config.json and a MANIFEST.json in the shape of
:mod:`protot.train.pretrained`'s, plus metrics.jsonl), and ``gpu_train.json`` (rewritten after
each model) with every model's manifest, metrics and measured throughput. The large models'
weights (~79 MiB) do not fit the limit: their entry is the recipe (exact config, budget, seed).
On the GPU that is 5 files, none above 16 MiB; logs go to stdout only.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import platform
import sys
import tarfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

FAMILIES = ("llama", "protot", "deltanet", "mamba")
SETTINGS = ("small", "large")
MAX_FILE_BYTES = 16 * 2**20
DEFAULT_PACK = Path("build") / "gpu_pack"

#: Per setting: the profile it takes lr / context / batch from, the token budget (same for every
#: family), the wall-clock cap per model and the assumed sustained bfloat16 FLOP/s (see above).
PLAN = {
    "small": {"profile": "paper-small", "tokens": 12_000_000, "cap_s": 25.0, "assumed_flops": 40e12},
    "large": {"profile": "paper-large", "tokens": 12_000_000, "cap_s": 55.0, "assumed_flops": 80e12},
}
WARMUP_FRACTION = 0.05
EVAL_BLOCKS = 256
LOG_EVERY = 25
#: The dry run: the same code on the CPU, tiny models, a few steps.
DRY = {"context": 32, "batch_size": 4, "steps": 3, "eval_blocks": 4,
       "sizes": {"small": ("tiny", {}), "large": ("tiny", {"num_hidden_layers": 3})}}


# ---------------------------------------------------------------------------------------------
# pack
# ---------------------------------------------------------------------------------------------
def make_pack(out: Path, train_tokens: int, val_tokens: int) -> dict:
    """The first ``train_tokens`` of the training split and ``val_tokens`` of the validation split."""
    from protot.train import packing
    from protot.train import tokenizer as tk

    train = packing.token_stream("train")
    val = packing.token_stream("validation")
    if train_tokens > len(train) or val_tokens > len(val):
        raise ValueError(f"asked for {train_tokens} / {val_tokens} tokens; the splits hold {len(train)} / {len(val)}")
    info = {
        "source": "data/corpus/en, training mix compendium.data.TRAIN_MIX['en'], the first tokens of the "
                  "'train' and 'validation' splits (document-level split by sha256(id))",
        "data_key": {s: packing.source_key(s)[0] for s in ("train", "validation")},
        "tokenizer": {"file": f"data/tokenizers/{tk.TOKENIZER_FILE}", "sha256": tk.tokenizer_hash()},
        "vocab_size": int(tk.load_tokenizer().get_vocab_size()),
    }
    return packing.write_u16_pack(out, {"train": np.asarray(train[:train_tokens]),
                                        "validation": np.asarray(val[:val_tokens])}, info)


# ---------------------------------------------------------------------------------------------
# budget
# ---------------------------------------------------------------------------------------------
def flops_per_token(model, context: int) -> float:
    """Training FLOPs per token: 6 x (non-embedding + output-head parameters) + LLaMA's attention."""
    from protot.models import count_parameters

    c = model.config
    n = count_parameters(model)["non_embedding"] + c.hidden_size * c.vocab_size
    attn = 6 * c.num_hidden_layers * context * c.hidden_size if type(model).__name__.startswith("Llama") else 0
    return 6.0 * n + attn


def train_config(arch: str, setting: str, dry_run: bool):
    from protot.train.config import profile

    plan = PLAN[setting]
    # the authors' recipe (protot.train.config "authors-small") at the plan's batch and budget: their
    # optimiser settings, constant rate, no clipping, and their backbone for every architecture
    base = profile(plan["profile"]).replace(recipe="authors", lr=6e-4, beta2=0.999, grad_clip=0.0,
                                            schedule="constant")
    overrides = {}
    if arch == "protot" and not dry_run:
        overrides["chunk_size"] = 64          # the GPU tiling (sub-chunks of 16), see kernels/proto_mixer
    if dry_run:
        size, extra = DRY["sizes"][setting]
        overrides.update(extra)
        ctx, bs = DRY["context"], DRY["batch_size"]
        tokens = DRY["steps"] * bs * ctx
        warm = 1
    else:
        size, ctx, bs = base.size, base.context, base.batch_size
        tokens = plan["tokens"] // (bs * ctx) * (bs * ctx)
        warm = max(1, int(WARMUP_FRACTION * tokens // (bs * ctx)))
    # Mamba's pure-torch scan keeps a state per token for the backward: two micro-batches at the
    # large setting (and in the dry run, to test the path) halve that memory; the step is the same
    accum = 2 if arch == "mamba" and (setting == "large" or dry_run) else 1
    return base.replace(arch=arch, size=size, context=ctx, batch_size=bs, tokens=tokens, warmup_steps=warm,
                        grad_accum=accum,
                        model_overrides=tuple(sorted(overrides.items())), eval_blocks=DRY["eval_blocks"]
                        if dry_run else EVAL_BLOCKS)


# ---------------------------------------------------------------------------------------------
# one model
# ---------------------------------------------------------------------------------------------
def _optimizer(cfg, model, fused: bool):
    """AdamW as protot.train.trainer.make_optimizer (decay on matrices only, not on parameters marked
    ``_no_weight_decay``), fused on a GPU."""
    decay, no_decay, seen = [], [], set()
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            (decay if p.dim() >= 2 and not getattr(p, "_no_weight_decay", False) else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)


def _blocks(stream: np.ndarray, context: int, device) -> torch.Tensor:
    n = len(stream) // context
    if n < 1:
        raise ValueError(f"a token stream of {len(stream)} tokens holds no block of {context}")
    arr = np.asarray(stream[: n * context], dtype=np.int64).reshape(n, context)
    return torch.from_numpy(arr).to(device)


@torch.no_grad()
def evaluate(model, val: torch.Tensor, n_blocks: int, batch: int, amp) -> dict:
    model.eval()
    total, count = torch.zeros((), device=val.device, dtype=torch.float64), 0
    for lo in range(0, min(n_blocks, len(val)), batch):
        x = val[lo: min(lo + batch, n_blocks, len(val))]
        with amp:
            logits = model(input_ids=x, use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                                x[:, 1:].reshape(-1), reduction="sum")
        total += nll.double()
        count += x[:, 1:].numel()
    model.train()
    loss = float(total) / count
    return {"loss": loss, "ppl": math.exp(loss), "tokens": count}


def train_one(cfg, train_blocks: torch.Tensor, val_blocks: torch.Tensor, vocab_size: int, cap_s: float,
              device: torch.device, log) -> tuple[torch.nn.Module, dict, list[dict]]:
    from protot.train.packing import BatchSchedule
    from protot.train.trainer import build_model, lr_at

    cuda = device.type == "cuda"
    model = build_model(cfg, vocab_size).to(device)
    model.train()
    opt = _optimizer(cfg, model, fused=cuda)
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    sched = BatchSchedule(len(train_blocks), cfg.batch_size, cfg.seed)
    metrics, stopped, step = [], False, 0
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    first_step_s = None
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        ids = torch.from_numpy(sched.block_ids(step)).to(device)
        loss = torch.zeros((), device=device)
        for x in train_blocks[ids].chunk(cfg.grad_accum):
            with amp:
                part = model(input_ids=x, labels=x, use_cache=False, return_logits=False).loss / cfg.grad_accum
            part.backward()
            loss += part.detach()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 0:
            sync()
            first_step_s = time.perf_counter() - t0          # includes Triton compilation
            t_cap = time.perf_counter()                      # the cap counts from here
        if step % LOG_EVERY == 0 or step == cfg.steps - 1:
            entry = {"step": step, "tokens": (step + 1) * cfg.tokens_per_step, "loss": float(loss),
                     "grad_norm": float(gnorm), "lr": lr_at(cfg, step),
                     "elapsed_s": round(time.perf_counter() - t0, 3)}
            metrics.append(entry)
            log(f"  step {step:5d}/{cfg.steps} loss {entry['loss']:.4f} {entry['elapsed_s']:.1f}s")
        if time.perf_counter() - t_cap > cap_s and step < cfg.steps - 1:
            stopped = True
            break
    sync()
    seconds = time.perf_counter() - t0
    steps_done = step + 1
    tokens_seen = steps_done * cfg.tokens_per_step
    ev = evaluate(model, val_blocks, cfg.eval_blocks, cfg.batch_size, amp)
    fpt = flops_per_token(model, cfg.context)
    timing = {"seconds": round(seconds, 3), "first_step_s": round(first_step_s or 0.0, 3),
              "steps": steps_done, "tokens_seen": tokens_seen,
              "tokens_per_s": tokens_seen / seconds, "flops_per_token": fpt,
              "achieved_flops": fpt * tokens_seen / seconds, "stopped_by_time_cap": stopped,
              "cap_s": cap_s, "validation": ev}
    return model, timing, metrics


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------
def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("triton", "transformers", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def manifest(name: str, cfg, model, timing: dict, pack_info: dict, sha: str | None, size: int | None,
             device: str) -> dict:
    """A MANIFEST.json in the shape protot.train.pretrained writes (so pretrained can load the folder)."""
    from protot.models import count_parameters

    return {
        "name": name, "arch": cfg.arch, "model_class": type(model).__name__, "dtype": "float16",
        "parameters": count_parameters(model), "tokens_seen": timing["tokens_seen"], "steps": timing["steps"],
        "planned_steps": cfg.steps, "budget_history": [], "train_config": cfg.to_dict(),
        "model_config": json.loads(model.config.to_json_string()),
        "data": {"train": pack_info.get("source", "token pack"), "data_key": pack_info.get("data_key"),
                 "pack_sha256": pack_info.get("sha256")},
        "tokenizer": pack_info.get("tokenizer"),
        "weights_sha256": sha, "weights_bytes": size,
        "gpu_run": {**timing, "device": device, "versions": _versions(),
                    "command": "python -m protot.train.gpu train"},
    }


def export(out: Path, name: str, cfg, model, timing: dict, metrics: list[dict], pack_info: dict,
           device: str) -> dict:
    """``out/<name>.tar`` (fp16 weights, config.json, MANIFEST.json, metrics.jsonl) when it fits in
    MAX_FILE_BYTES; otherwise no file (the manifest, without weights, goes to gpu_train.json)."""
    from safetensors.torch import save

    half = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()
            if k != "lm_head.weight" or not getattr(model.config, "tie_word_embeddings", False)}
    blob = save(half, metadata={"format": "pt", "name": name})
    sha = hashlib.sha256(blob).hexdigest()
    man = manifest(name, cfg, model, timing, pack_info, sha, len(blob), device)
    files = {"model.safetensors": blob,
             "config.json": (model.config.to_json_string() + "\n").encode(),
             "MANIFEST.json": (json.dumps(man, indent=2, sort_keys=True, default=str) + "\n").encode(),
             "metrics.jsonl": "".join(json.dumps(m) + "\n" for m in metrics).encode()}
    if sum(len(b) for b in files.values()) + 512 * (2 * len(files) + 2) > MAX_FILE_BYTES:
        man.update(weights_sha256=None, weights_bytes=None,
                   weights_note=f"float16 weights ({len(blob)} bytes) exceed the {MAX_FILE_BYTES}-byte file "
                                "limit: not written; retrain from this manifest's train_config and seed")
        return man
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for fname, data in files.items():
            ti = tarfile.TarInfo(f"{name}/{fname}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tar.addfile(ti, io.BytesIO(data))
    (out / f"{name}.tar").write_bytes(buf.getvalue())
    man["archive"] = f"{name}.tar"
    return man


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


def run(pack: Path, out: Path, archs=FAMILIES, settings=SETTINGS, dry_run: bool = False,
        device: str | None = None, total_cap_s: float = 300.0) -> dict:
    from protot.train.packing import read_u16_pack

    if device is None:
        device = "cpu" if dry_run else "cuda"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("protot.train.gpu train needs a CUDA GPU (use --dry-run to check it on the CPU)")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    for a in archs:
        if a not in FAMILIES:
            raise ValueError(f"unknown arch {a!r}; valid: {', '.join(FAMILIES)}")
    for s in settings:
        if s not in SETTINGS:
            raise ValueError(f"unknown setting {s!r}; valid: {', '.join(SETTINGS)}")
    parts, info = read_u16_pack(pack)
    for need in ("train", "validation"):
        if need not in parts:
            raise ValueError(f"token pack {pack} has no {need!r} part")
    vocab = int(info.get("vocab_size") or int(max(parts["train"].max(), parts["validation"].max())) + 1)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg: str):   # stdout only: the caller keeps the log (every file under --out is a result)
        print(msg, flush=True)

    name_dev = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or "cpu")
    result = {"dry_run": dry_run, "device": name_dev, "versions": _versions(), "pack": {k: info.get(k) for k in (
              "sha256", "tokens", "parts", "data_key", "tokenizer", "vocab_size")}, "plan": PLAN,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "models": {}}
    t_all = time.perf_counter()
    blocks = {}
    for setting in settings:
        for arch in archs:
            cfg = train_config(arch, setting, dry_run)
            if cfg.context not in blocks:
                blocks[cfg.context] = (_blocks(parts["train"], cfg.context, dev),
                                       _blocks(parts["validation"], cfg.context, dev))
            tb, vb = blocks[cfg.context]
            name = f"{arch}-{setting}-gpu" if not dry_run else f"{arch}-{setting}-dry"
            left = total_cap_s - (time.perf_counter() - t_all)
            cap = min(PLAN[setting]["cap_s"], max(left, 0.0)) if not dry_run else 1e9
            log(f"{name}: {cfg.steps} steps x {cfg.tokens_per_step} tokens, cap {cap:.0f}s")
            if not dry_run and cap <= 0:
                result["models"][name] = {"skipped": "the total time cap was spent"}
                log("  skipped: total time cap spent")
                continue
            torch.manual_seed(cfg.seed)
            try:
                model, timing, metrics = train_one(cfg, tb, vb, vocab, cap, dev, log)
                man = export(out, name, cfg, model, timing, metrics, info, name_dev)
                man["metrics"] = metrics
                result["models"][name] = man
                log(f"  done: {timing['tokens_seen'] / 1e6:.2f} M tokens in {timing['seconds']:.1f}s "
                    f"({timing['tokens_per_s'] / 1e3:.0f} ktok/s, {timing['achieved_flops'] / 1e12:.1f} TFLOP/s), "
                    f"val loss {timing['validation']['loss']:.4f}")
                del model
            except Exception as err:  # noqa: BLE001 -- recorded; the other models still train
                result["models"][name] = {"error": f"{type(err).__name__}: {err}"[:2000]}
                log(f"  FAILED: {type(err).__name__}: {err}")
                if dry_run:
                    raise
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            _write_json(out / "gpu_train.json", result)     # after each model: a killed run keeps its results
    result["seconds"] = round(time.perf_counter() - t_all, 3)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write_json(out / "gpu_train.json", result)
    log(f"wrote {out / 'gpu_train.json'} ({result['seconds']:.0f}s in all)")
    return result


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m protot.train.gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="write the training / validation tokens as a uint16 pack")
    pk.add_argument("--out", type=Path, default=DEFAULT_PACK)
    pk.add_argument("--train-tokens", type=int, default=max(v["tokens"] for v in PLAN.values()))
    pk.add_argument("--val-tokens", type=int, default=EVAL_BLOCKS * 256)
    tr = sub.add_parser("train", help="train the eight models (or --archs / --sizes) from a pack")
    tr.add_argument("--pack", type=Path, default=DEFAULT_PACK)
    tr.add_argument("--out", type=Path, required=True)
    tr.add_argument("--archs", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    tr.add_argument("--sizes", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    tr.add_argument("--dry-run", action="store_true", help="the same code on the CPU: tiny models, 3 steps")
    tr.add_argument("--device", help="default: cuda (cpu with --dry-run)")
    tr.add_argument("--total-cap-s", type=float, default=300.0, help="wall-clock cap for all models together")
    a = p.parse_args(argv)
    if a.cmd == "pack":
        for flag in ("train_tokens", "val_tokens"):
            if getattr(a, flag) < 1:
                p.error(f"--{flag.replace('_', '-')} must be >= 1")
        meta = make_pack(a.out, a.train_tokens, a.val_tokens)
        print(json.dumps({k: meta[k] for k in ("tokens", "parts", "sha256", "vocab_size")}, indent=1))
        return meta
    if a.total_cap_s <= 0:
        p.error("--total-cap-s must be > 0")
    if a.dry_run:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    return run(a.pack, a.out, a.archs, a.sizes, dry_run=a.dry_run, device=a.device, total_cap_s=a.total_cap_s)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
