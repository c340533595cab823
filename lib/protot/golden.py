"""Golden numbers from running the authors' ProtoT mixer (tests/protot/golden, README there).

    cases()                        the case names (case00 .. case08)
    compare(forms)                 our mixer against every case, per form (and token-by-token decoding)
    decay_arithmetic_gap(model, ids)  exact vs "authors-float32" decay arithmetic on a whole model
    decay_arithmetic_perplexity(model, split)  a split's perplexity under each decay arithmetic
                                    (python -m protot.golden MODEL: a committed model, whole split)
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

__all__ = ["golden_dir", "cases", "load_case", "compare", "decay_arithmetic_gap", "decay_arithmetic_perplexity"]


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


def compare(forms=("chunk", "recurrent", "quadratic"), decoding: bool = True) -> list[dict]:
    """One row per (case, form): the largest |y - y_golden| of our mixer with the case's parameters,
    and of its write and read routing. Case 08 is computed with decay_arithmetic="authors-float32"
    (its "arithmetic" column says which) and, as a second row, with the exact equation.
    ``decoding``: add a "decoding" form (token by token with the cache; exact arithmetic only)."""
    rows = []
    for case in cases():
        arithmetic = ["authors-float32", "exact"] if case.startswith("case08") else ["exact"]
        for arith in arithmetic:
            mixer, a, meta, _ = load_case(case, decay_arithmetic=arith)
            x, gold = torch.from_numpy(a["x"]), torch.from_numpy(a["y"])
            B, S, H, r = a["routing_Pi"].shape
            for form in list(forms) + (["decoding"] if decoding and arith == "exact" else []):
                with torch.no_grad():
                    if form == "decoding":
                        cache: dict = {}
                        y = torch.cat([mixer(x[:, t:t + 1], layer_cache=cache)[0] for t in range(S)], 1)
                        aux = None
                    else:
                        mixer.config.mixer_form = form
                        y, aux = mixer(x, output_gates=True)
                row = {"case": case, "arithmetic": arith, "form": form,
                       "y_max_abs_diff": (y - gold).abs().max().item(), "y_max_abs": gold.abs().max().item()}
                if aux is not None:
                    row["write_routing_diff"] = (aux["write_gate"].reshape(B, S, H, r)
                                                 - torch.from_numpy(a["routing_Pi"])).abs().max().item()
                    if "routing_Pi_read" in a:
                        row["read_routing_diff"] = (aux["read_gate"].reshape(B, S, H, r)
                                                    - torch.from_numpy(a["routing_Pi_read"])).abs().max().item()
                rows.append(row)
    return rows


@torch.no_grad()
def decay_arithmetic_gap(model, ids: torch.Tensor) -> dict:
    """How far the authors' float32 decay arithmetic moves a ProtoT (variant "authors") from the exact
    equation on token ids (B, T): the largest |logit difference|, the mean |difference of the
    next-token NLL| over positions, and the NLL of each (the model is left as it was)."""
    import torch.nn.functional as F

    mixers = model.mixers()
    before = [m.config.decay_arithmetic for m in mixers]
    out = {}
    try:
        for arith in ("exact", "authors-float32"):
            for m in mixers:
                m.config.decay_arithmetic = arith
            logits = model(ids, use_cache=False).logits.float()
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                  reduction="none").view(ids.shape[0], -1)
            out[arith] = (logits, nll)
    finally:
        for m, a in zip(mixers, before):
            m.config.decay_arithmetic = a
    (le, ne), (la, na) = out["exact"], out["authors-float32"]
    return {"tokens": int(ids.shape[1]), "sequences": int(ids.shape[0]),
            "max_abs_logit_diff": (le - la).abs().max().item(),
            "mean_abs_nll_diff": (ne - na).abs().mean().item(),
            "nll_exact": ne.mean().item(), "nll_authors_float32": na.mean().item()}


@torch.no_grad()
def decay_arithmetic_perplexity(model, split: str = "validation", context: int = 256, *, batch_size: int = 16,
                                max_blocks: int | None = None, lang: str = "en") -> dict:
    """Perplexity of a ProtoT (variant "authors") under each decay arithmetic: {arithmetic:
    protot.train.evaluate.perplexity(...)} for "exact" and "authors-float32", with the evaluation of the
    committed models' manifests (non-overlapping blocks of ``context`` tokens; the whole split unless
    ``max_blocks``). Both without the decoding cache (the float32 form uses absolute positions, whole
    blocks only). The model's config is left as it was, also on an error."""
    from protot.mixer_authors import DECAY_ARITHMETIC
    from protot.train import evaluate

    if getattr(model.config, "variant", None) != "authors":
        raise ValueError("decay arithmetic is a setting of ProtoT's authors variant; got a "
                         f"{type(model).__name__} with variant {getattr(model.config, 'variant', None)!r}")
    configs = {id(c): c for c in [model.config] + [m.config for m in model.mixers()]}
    before = {k: (c.decay_arithmetic, c.use_cache) for k, c in configs.items()}
    out = {}
    try:
        for arith in DECAY_ARITHMETIC:
            for c in configs.values():
                c.decay_arithmetic, c.use_cache = arith, False
            out[arith] = evaluate.perplexity(model, split, context, batch_size=batch_size,
                                             max_blocks=max_blocks, lang=lang)
    finally:
        for k, c in configs.items():
            c.decay_arithmetic, c.use_cache = before[k]
    return out


def main(argv=None) -> dict:
    """python -m protot.golden MODEL [--split S] [--max-blocks N]: the perplexity of committed ProtoT
    MODEL (models/MODEL) under each decay arithmetic, as one JSON object (whole split by default)."""
    import argparse

    from protot.train import pretrained

    ap = argparse.ArgumentParser(prog="python -m protot.golden", description=main.__doc__.split(":", 1)[1])
    ap.add_argument("name", help="a committed ProtoT of variant 'authors' under models/")
    ap.add_argument("--split", default="validation")
    ap.add_argument("--max-blocks", type=int, default=None, help="default: the whole split")
    args = ap.parse_args(argv)
    m = pretrained.load(args.name)
    context = int(m.manifest["train_config"]["context"])
    res = {"model": args.name, "trained_with": m.model.config.decay_arithmetic, "split": args.split,
           "context": context, **decay_arithmetic_perplexity(m.model, args.split, context, max_blocks=args.max_blocks)}
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
