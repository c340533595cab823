"""The mixer-variant pilot: which ProtoT variant the long CPU runs train.

Two 4 x 256 ProtoTs are trained with the same data order, seed and token budget (profile
``cpu-hour``, 1,000 steps of 8 x 256 tokens = 2.05 M tokens, one core each):

- ``default``: the mixer as first built: separate write and read projections (W_w, W_r), and the
  write of token i aggregated over j <= i (the current token included);
- ``shared-past``: the paper's text read literally: one set of prototype keys compared with the
  token for both gates (separate write / read temperatures) and a write that aggregates only
  the past (j < i); ``intermediate_size`` 792 instead of 704 gives back the parameters of the
  projection it no longer has: its non-embedding count is 0.27% above the default's, the nearest
  a SwiGLU width in steps of 8 gets (one step is 0.8%).

Each is assessed on the validation split by three numbers: perplexity (a fixed set of blocks),
context use (:mod:`protot.context_use`: the loss change on positions 128-255 when positions 0-127
are replaced by another document's, and the context effect on p(" women")), and the concept score
(:func:`protot.labels.measure_concepts`: mean coherence of each prototype's top write tokens
minus that of the best of three untrained ProtoTs with matched gate entropy).

The decision rule was stated before the runs (and is applied by :func:`choose`, not by hand):
prefer the variant closest to the paper's text (``shared-past``) unless its validation perplexity
is more than 5% above the default's. Context use and the concept score are reported beside it.

Record the pilot (after both runs finished)::

    python -m protot.train.pilot .cache/runs/pilot-default .cache/runs/pilot-shared-past

writes ``papers/protot/pilot/pilot.json`` (numbers, rule, choice, provenance), ``pilot.md`` (the
table rendered from the JSON), ``learning_curves.csv`` and ``pilot.png``.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

PREFERRED = "shared-past"      # closest to the paper's text
BASELINE = "default"
MAX_PPL_RATIO = 1.05           # "clearly worse": more than 5% higher validation perplexity
RULE = (f"prefer '{PREFERRED}' (the paper's text: shared prototype keys, past-only write) unless its "
        f"validation perplexity exceeds '{BASELINE}''s by more than {100 * (MAX_PPL_RATIO - 1):.0f}%")
VARIANTS = {   # of the earlier reconstruction ("compendium-v1"), whose open choices the pilot compared
    "default": {"variant": "compendium-v1"},
    "shared-past": {"variant": "compendium-v1", "shared_keys": True, "include_current": False,
                    "intermediate_size": 792},
}


def choose(ppl: dict[str, float], *, preferred: str = PREFERRED, baseline: str = BASELINE,
           max_ratio: float = MAX_PPL_RATIO) -> tuple[str, float]:
    """(chosen variant, ppl ratio preferred / baseline) under the pre-stated rule."""
    for name in (preferred, baseline):
        if name not in ppl:
            raise ValueError(f"the pilot needs a perplexity for {name!r}; got {sorted(ppl)}")
        if not (isinstance(ppl[name], (int, float)) and math.isfinite(ppl[name]) and ppl[name] > 0):
            raise ValueError(f"perplexity of {name!r} must be a positive finite number, got {ppl[name]!r}")
    ratio = ppl[preferred] / ppl[baseline]
    return (preferred if ratio <= max_ratio else baseline), float(ratio)


def variant_of(config: dict) -> str:
    """The pilot variant a model config (dict) belongs to, or ValueError."""
    for name, overrides in VARIANTS.items():
        base = {"variant": "compendium-v1", "shared_keys": False, "include_current": True}
        want = {**base, **overrides}
        if all(config.get(k, base.get(k)) == v for k, v in want.items() if k != "intermediate_size"):
            return name
    raise ValueError(f"config matches no pilot variant ({sorted(VARIANTS)}): shared_keys="
                     f"{config.get('shared_keys')}, include_current={config.get('include_current')}")


def learning_curve(run: Path) -> pd.DataFrame:
    """Validation perplexity and training loss by step of a run folder (from its metrics.jsonl)."""
    rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val = pd.DataFrame([r for r in rows if r.get("split") == "validation"])
    train = pd.DataFrame([r for r in rows if "loss" in r and "split" not in r])
    if train.empty:
        raise ValueError(f"{run}/metrics.jsonl has no training steps")
    # a resumed run re-logs the steps after its last checkpoint: keep the last record of each step
    train = train.drop_duplicates("step", keep="last").sort_values("step")
    out = train[["step", "tokens", "loss"]].copy()
    if not val.empty:
        val = val.drop_duplicates("step", keep="last")[["step", "ppl"]].rename(columns={"ppl": "val_ppl"})
        out = out.merge(val, on="step", how="left")
    else:
        out["val_ppl"] = np.nan
    return out.reset_index(drop=True)


@dataclass
class Assessment:
    name: str
    row: dict
    curve: pd.DataFrame


def assess(run: Path, *, val: np.ndarray, ref, ppl_blocks: int = 256, concept_blocks: int = 48,
           null_seeds=(1, 2, 3), context_blocks: int = 64, seed: int = 0) -> Assessment:
    """The pilot's numbers for one finished run folder (latest checkpoint)."""
    from protot import concepts, context_use, labels
    from protot.train import checkpoint, evaluate

    run = Path(run)
    ck = checkpoint.latest(run)
    if ck is None:
        raise FileNotFoundError(f"{run} has no checkpoint")
    state = json.loads((ck / "state.json").read_text())
    cfg = state["config"]
    steps_planned = cfg["tokens"] // (cfg["batch_size"] * cfg["context"] * cfg.get("grad_accum", 1))
    if state["step"] < steps_planned:
        raise ValueError(f"{run} is not finished: step {state['step']} of {steps_planned}")
    lm = concepts.load_model(str(run))
    model, tok = lm.model, lm.tokenizer
    variant = variant_of(model.config.to_dict())
    ppl = evaluate.perplexity(model, "validation", model.config.max_position_embeddings, max_blocks=ppl_blocks)
    cu = context_use.context_use(model, val, name=variant, tokenizer=tok, blocks=context_blocks, seed=seed)
    ids = concepts.sample_blocks(val, concept_blocks, 256, seed=seed)
    stats = concepts.collect_gates(model, ids)
    entropy = labels.mean_gate_entropy(model, ids)
    search = ids[:8, :64]
    target = labels.mean_gate_entropy(model, search)
    null_stats, null_entropy = [], []
    for s in null_seeds:
        n = labels.matched_null(model, s, search, target)
        null_stats.append(concepts.collect_gates(n.model, ids))
        null_entropy.append(labels.mean_gate_entropy(n.model, ids))
    m = labels.measure_concepts(stats, null_stats, ref, trained_entropy=entropy, null_entropy=null_entropy,
                                  seed=seed)
    from protot.models import count_parameters

    n_params = count_parameters(model)["non_embedding"]
    row = {"variant": variant, "run": run.name, "step": state["step"], "tokens": state["tokens_seen"],
           "non_embedding_params": int(n_params), "val_ppl": ppl["ppl"], "val_tokens": ppl["tokens"],
           "bits_per_byte": ppl["bits_per_byte"], **cu.values(), "loss_positions_128_255": cu.loss_true,
           "coherence_margin": m.values["coherence_margin"],
           "coherence_trained": float(m.values.get("coherence_trained", float("nan"))),
           "coherence_null_max": float(max(m.evidence["coherence_null"])),
           "null_entropy_gap": m.values["null_entropy_gap"], "write_entropy": entropy["write"],
           "read_entropy": entropy["read"], "elapsed_s": state.get("elapsed_s")}
    return Assessment(variant, row, learning_curve(run))


def render(record: dict) -> str:
    """pilot.md from pilot.json's record (every number formatted from the record)."""
    rows = record["variants"]
    order = [BASELINE, PREFERRED]
    by = {r["variant"]: r for r in rows}
    lines = [
        "# Mixer-variant pilot (generated from pilot.json by `python -m protot.train.pilot`; do not edit)",
        "",
        f"Two 4 x 256 ProtoTs, profile `{record['profile']}`, same data order and seed, "
        f"{by[BASELINE]['tokens'] / 1e6:.2f} M training tokens each, one CPU core each. "
        f"Decision rule, stated before the runs: {record['rule']}.",
        "",
        "| | " + " | ".join(f"`{v}`" for v in order) + " |",
        "|---|" + "---|" * len(order),
    ]
    fmt = [
        ("non-embedding parameters", lambda r: f"{r['non_embedding_params']:,}"),
        (f"validation perplexity ({by[BASELINE]['val_tokens']:,} tokens)", lambda r: f"{r['val_ppl']:.1f}"),
        ("bits per byte", lambda r: f"{r['bits_per_byte']:.3f}"),
        ("loss on positions 128-255 (nats)", lambda r: f"{r['loss_positions_128_255']:.3f}"),
        ("replaced-first-half cost (nats, 95% CI)", lambda r: f"{r['replaced_prefix_cost_nats']:+.3f} "
                                                             f"[{r['replaced_prefix_ci_low']:+.3f}, {r['replaced_prefix_ci_high']:+.3f}]"),
        ("context effect on log p(\" women\") (nats, 95% CI)", lambda r: f"{r['context_effect_nats']:+.3f} "
                                                                       f"[{r['context_effect_ci_low']:+.3f}, {r['context_effect_ci_high']:+.3f}] "
                                                                       f"(n={r['context_effect_contexts']})"),
        ("concept coherence margin over matched nulls", lambda r: f"{r['coherence_margin']:+.4f}"),
        ("matched-null write-entropy gap", lambda r: f"{100 * r['null_entropy_gap']:.1f}%"),
    ]
    for label, f in fmt:
        lines.append(f"| {label} | " + " | ".join(f(by[v]) for v in order) + " |")
    lines += ["", f"Perplexity ratio `{PREFERRED}` / `{BASELINE}`: {record['ppl_ratio']:.4f}. "
                  f"**Chosen: `{record['chosen']}`** ({'within' if record['chosen'] == PREFERRED else 'outside'} "
                  f"the {100 * (record['max_ppl_ratio'] - 1):.0f}% allowance).",
              "", "Reproduce: " + "; ".join(f"`{c}`" for c in record["commands"]) + ".",
              "", f"Recorded at revision `{provenance_revision(record)}`."]
    return "\n".join(lines) + "\n"


def provenance_revision(record: dict) -> str:
    rev = record.get("provenance", {}).get("git_revision", "unknown")
    sha, dirty = rev.split("+")[0], rev.endswith("+dirty")
    return sha[:12] + ("+dirty" if dirty else "")


def commands() -> list[str]:
    base = "python -m protot.train --arch protot --profile cpu-hour --resume --threads 1"
    out = []
    for name, ov in VARIANTS.items():
        sets = "".join(f" --set {k}={v}" for k, v in ov.items())
        out.append(f"{base}{sets} --out .cache/runs/pilot-{name}")
    out.append("python -m protot.train.pilot .cache/runs/pilot-default .cache/runs/pilot-shared-past")
    return out


def plot(curves: dict[str, pd.DataFrame]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, (name, c) in enumerate(curves.items()):
        sm = c["loss"].rolling(25, min_periods=1).mean()
        axes[0].plot(c["tokens"] / 1e6, sm, color=f"C{i}", label=name)
        v = c.dropna(subset=["val_ppl"])
        axes[1].plot(v["tokens"] / 1e6, v["val_ppl"], "o-", color=f"C{i}", label=name)
    axes[0].set_xlabel("training tokens (M)"); axes[0].set_ylabel("training loss (25-step mean)")
    axes[1].set_xlabel("training tokens (M)"); axes[1].set_ylabel("validation perplexity"); axes[1].set_yscale("log")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle("Mixer-variant pilot (4 x 256, cpu-hour profile)", fontsize=10)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m protot.train.pilot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs=2, help="the two finished pilot run folders")
    p.add_argument("--out", default=None, help="output folder (default papers/protot/pilot)")
    p.add_argument("--ppl-blocks", type=int, default=256)
    args = p.parse_args(argv)

    import torch

    from compendium import atomic, paths, provenance
    from protot import labels
    from protot.train import packing
    from protot.train import tokenizer as tk

    torch.set_num_threads(1)
    out = Path(args.out) if args.out else paths.repo_root() / "papers" / "protot" / "pilot"
    val = packing.token_stream("validation")
    ref = labels.reference_embeddings(tk.load_hf_tokenizer())
    results = {}
    for run in args.runs:
        a = assess(Path(run), val=val, ref=ref, ppl_blocks=args.ppl_blocks)
        if a.name in results:
            raise ValueError(f"both runs are variant {a.name!r}")
        results[a.name] = a
        print(f"{a.name}: val ppl {a.row['val_ppl']:.2f}, replaced-prefix cost {a.row['replaced_prefix_cost_nats']:+.3f}, "
              f"coherence margin {a.row['coherence_margin']:+.4f}", flush=True)
    if set(results) != set(VARIANTS):
        raise ValueError(f"the pilot needs one run of each variant {sorted(VARIANTS)}, got {sorted(results)}")
    tokens = {a.row["tokens"] for a in results.values()}
    if len(tokens) != 1:
        raise ValueError(f"the two runs saw different token counts {sorted(tokens)}: not a matched pilot")
    chosen, ratio = choose({k: a.row["val_ppl"] for k, a in results.items()})
    record = {"profile": "cpu-hour", "rule": RULE, "max_ppl_ratio": MAX_PPL_RATIO, "preferred": PREFERRED,
              "ppl_ratio": ratio, "chosen": chosen, "variants": [results[k].row for k in VARIANTS],
              "overrides": VARIANTS, "commands": commands(), "provenance": provenance.describe()}
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "pilot.json", json.dumps(record, indent=2, default=float) + "\n")
    atomic.write_text(out / "pilot.md", render(record))
    curves = pd.concat([a.curve.assign(variant=k) for k, a in results.items()], ignore_index=True)
    atomic.write_text(out / "learning_curves.csv", curves.to_csv(index=False))
    fig = plot({k: a.curve for k, a in results.items()})
    fig.savefig(out / "pilot.png", dpi=120)
    print(render(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
