"""How much a causal LM uses its left context: the power precondition of the concept, ablation and
robustness claims (a model that predicts from the last few tokens cannot show an effect that goes
through context, so a "does not hold" from it would be a test without power).

Three measurements on token streams (``protot.train.packing``), for any causal LM of
:mod:`protot.models` (ProtoT, LLaMA, ...; anything whose ``model(ids).logits`` is (B, T, V)):

- **loss by position**: next-token loss (nats) at each position of ``context``-token blocks, mean
  over blocks with a bootstrap interval (:func:`loss_by_position`); a model that uses context has a
  loss that keeps falling with position.
- **replaced first half**: the change of the loss on the tokens at positions ``split .. T-1`` when
  the tokens at positions ``0 .. split-1`` are replaced by the first ``split`` tokens of another
  block of the stream (another place in the corpus: almost always another document), paired over
  blocks, with a seeded percentile bootstrap interval (:func:`replaced_prefix_cost`). Block ``i``
  gets the prefix of block ``(i + 1) mod n`` of the same sample. Positive: the true prefix helped.
- **context effect** on a target word: mean log p(target) at the positions whose next token is the
  target, with ``context`` tokens of left context minus with only the last ``short`` (8) tokens,
  paired over occurrences, bootstrap interval (:func:`context_effect`), in nats. About 0 when the
  model predicts the word from its last few tokens alone.

:func:`context_use` runs all three and returns a :class:`ContextUse`; :func:`summary_table` puts
several in one table; :func:`plot_context_use` draws them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compendium.stats import bootstrap_mean_ci  # noqa: F401  (re-exported: callers use it from here)

SHORT = 8          # tokens of left context in the "short" condition of the context effect
SPLIT = 128        # the replaced prefix: positions 0 .. SPLIT-1
CONTEXT = 256      # block length (the models' training context)


def _device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


@torch.no_grad()
def token_nll(model, ids: torch.Tensor, batch_size: int = 16) -> np.ndarray:
    """(N, T-1) float64: next-token NLL (nats) of ``ids`` (N, T); column j is the loss of token j+1."""
    if ids.ndim != 2 or ids.shape[1] < 2 or ids.shape[0] == 0:
        raise ValueError(f"ids must be a non-empty (N, T >= 2) tensor, got shape {tuple(ids.shape)}")
    was = model.training
    model.eval()
    dev = _device(model)
    out = []
    try:
        for a in range(0, ids.shape[0], batch_size):
            x = ids[a:a + batch_size].to(dev)
            logits = model(x, use_cache=False).logits[:, :-1].double()
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
            out.append(nll.view(x.shape[0], -1).cpu())
    finally:
        model.train(was)
    return torch.cat(out).numpy()


@torch.no_grad()
def target_logprobs(model, contexts: torch.Tensor, target: int, batch_size: int = 16) -> np.ndarray:
    """(n,) float64: log p(target | row) at the last position of each row of ``contexts`` (n, T)."""
    was = model.training
    model.eval()
    dev = _device(model)
    out = []
    try:
        for a in range(0, contexts.shape[0], batch_size):
            logits = model(contexts[a:a + batch_size].to(dev), use_cache=False, logits_to_keep=1).logits[:, -1].double()
            out.append(torch.log_softmax(logits, -1)[:, target].cpu())
    finally:
        model.train(was)
    return torch.cat(out).numpy() if out else np.zeros(0)


def loss_by_position(nll: np.ndarray, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """From (N, T-1) token losses: one row per predicted position (1 .. T-1) with the mean loss over
    blocks and a bootstrap interval (blocks resampled, the same draws for every position)."""
    nll = np.asarray(nll, dtype=np.float64)
    if nll.ndim != 2 or nll.shape[0] == 0:
        raise ValueError(f"nll must be a non-empty (N, T-1) array, got shape {nll.shape}")
    rng = np.random.default_rng(seed)
    means = nll[rng.integers(0, nll.shape[0], size=(n_boot, nll.shape[0]))].mean(1)      # (n_boot, T-1)
    return pd.DataFrame({"position": np.arange(1, nll.shape[1] + 1), "loss": nll.mean(0),
                         "ci_lo": np.quantile(means, 0.025, axis=0), "ci_hi": np.quantile(means, 0.975, axis=0)})


def binned_loss(nll: np.ndarray, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """From (N, T-1) token losses: the mean loss in doubling position bins (1, 2-3, 4-7, ...), per
    block then over blocks, with a bootstrap interval over blocks. Columns first, last, position
    (geometric centre), loss, ci_lo, ci_hi."""
    nll = np.asarray(nll, dtype=np.float64)
    if nll.ndim != 2 or nll.shape[0] == 0:
        raise ValueError(f"nll must be a non-empty (N, T-1) array, got shape {nll.shape}")
    T1 = nll.shape[1]
    edges = [1]
    while edges[-1] <= T1:
        edges.append(edges[-1] * 2)
    rng = np.random.default_rng(seed)
    draw = rng.integers(0, nll.shape[0], size=(n_boot, nll.shape[0]))
    rows = []
    for a, b in zip(edges[:-1], edges[1:]):
        last = min(b - 1, T1)
        per_block = nll[:, a - 1:last].mean(1)              # column j is the loss of position j + 1
        means = per_block[draw].mean(1)
        rows.append({"first": a, "last": last, "position": float(np.sqrt(a * last)), "loss": float(per_block.mean()),
                     "ci_lo": float(np.quantile(means, 0.025)), "ci_hi": float(np.quantile(means, 0.975))})
    return pd.DataFrame(rows)


def replace_prefix(blocks: torch.Tensor, split: int) -> torch.Tensor:
    """``blocks`` (N, T) with positions 0 .. split-1 of row i taken from row (i + 1) mod N."""
    if blocks.shape[0] < 2:
        raise ValueError("replacing the prefix needs at least 2 blocks (one donates to the other)")
    if not 0 < split < blocks.shape[1]:
        raise ValueError(f"split must be in (0, {blocks.shape[1]}), got {split}")
    out = blocks.clone()
    out[:, :split] = torch.roll(blocks[:, :split], shifts=-1, dims=0)
    return out


@dataclass
class ContextUse:
    """The context-use report of one model (see the module doc). All losses and effects in nats."""

    model: str
    blocks: int
    context: int
    split: int
    replaced_cost: float                    # mean over blocks of (replaced - true) loss on tokens split..T-1
    replaced_ci: tuple[float, float]
    loss_true: float                        # mean loss on tokens split..T-1, true prefix
    target: str | None
    target_contexts: int
    context_effect: float                   # mean log p(target): full - last `short` tokens
    context_effect_ci: tuple[float, float]
    logp_full: float
    logp_short: float
    short: int
    target_context: int
    by_position: pd.DataFrame               # position, loss, ci_lo, ci_hi
    by_bin: pd.DataFrame                    # first, last, position, loss, ci_lo, ci_hi (doubling bins)
    per_block: pd.DataFrame                 # block, loss_true, loss_replaced, cost
    per_target: pd.DataFrame = field(default_factory=pd.DataFrame)   # logp_full, logp_short, effect

    def values(self, prefix: str = "") -> dict:
        """The named numbers (for Measurement.values / evidence), keys prefixed with ``prefix``."""
        v = {"replaced_prefix_cost_nats": self.replaced_cost, "replaced_prefix_ci_low": self.replaced_ci[0],
             "replaced_prefix_ci_high": self.replaced_ci[1], "context_effect_nats": self.context_effect,
             "context_effect_ci_low": self.context_effect_ci[0], "context_effect_ci_high": self.context_effect_ci[1],
             "context_effect_contexts": self.target_contexts, "context_use_blocks": self.blocks}
        return {prefix + k: (float(x) if isinstance(x, (float, np.floating)) else x) for k, x in v.items()}

    def summary(self) -> str:
        s = (f"{self.model}: replacing tokens 0-{self.split - 1} by another block's changes the loss on tokens "
             f"{self.split}-{self.context - 1} by {self.replaced_cost:+.4f} nats (95% CI {self.replaced_ci[0]:+.4f}.."
             f"{self.replaced_ci[1]:+.4f}, {self.blocks} blocks)")
        if self.target is not None:
            s += (f"; log p({self.target!r}) with {self.target_context} vs the last {self.short} tokens: "
                  f"{self.context_effect:+.4f} nats (95% CI {self.context_effect_ci[0]:+.4f}..{self.context_effect_ci[1]:+.4f}, "
                  f"{self.target_contexts} occurrences)")
        return s


def replaced_prefix_cost(model, blocks: torch.Tensor, split: int = SPLIT, *, batch_size: int = 16,
                         n_boot: int = 2000, seed: int = 0):
    """(per-block DataFrame, mean cost, CI, true-prefix nll (N, T-1)): the loss change on tokens
    ``split .. T-1`` when the prefix is replaced (:func:`replace_prefix`)."""
    nll_true = token_nll(model, blocks, batch_size)
    nll_repl = token_nll(model, replace_prefix(blocks, split), batch_size)
    a = nll_true[:, split - 1:].mean(1)          # column j is the loss of token j + 1
    b = nll_repl[:, split - 1:].mean(1)
    df = pd.DataFrame({"block": np.arange(len(a)), "loss_true": a, "loss_replaced": b, "cost": b - a})
    return df, float(df["cost"].mean()), bootstrap_mean_ci(df["cost"], n_boot=n_boot, seed=seed), nll_true


def context_effect(model, contexts: torch.Tensor, target: int, short: int = SHORT, *, batch_size: int = 16,
                   n_boot: int = 2000, seed: int = 0):
    """(per-occurrence DataFrame, mean effect, CI): log p(target) with the whole row of ``contexts``
    (n, T; the next token after each row is ``target``) minus with its last ``short`` tokens."""
    if contexts.ndim != 2 or contexts.shape[0] == 0:
        raise ValueError(f"contexts must be a non-empty (n, T) tensor, got shape {tuple(contexts.shape)}")
    if not 0 < short < contexts.shape[1]:
        raise ValueError(f"short must be in (0, {contexts.shape[1]}), got {short}")
    full = target_logprobs(model, contexts, target, batch_size)
    cut = target_logprobs(model, contexts[:, -short:], target, batch_size)
    df = pd.DataFrame({"logp_full": full, "logp_short": cut, "effect": full - cut})
    return df, float(df["effect"].mean()), bootstrap_mean_ci(df["effect"], n_boot=n_boot, seed=seed)


def target_context_effect(model, stream: np.ndarray, tokenizer, word: str = " women", *, context: int = SPLIT,
                          short: int = SHORT, max_contexts: int | None = 256, batch_size: int = 16,
                          n_boot: int = 2000, seed: int = 0):
    """(per-occurrence DataFrame, mean effect, CI) of :func:`context_effect` on every occurrence of
    ``word`` (one token) in ``stream`` with ``context`` tokens before it (at most ``max_contexts``)."""
    from protot import concepts

    tid = concepts.token_id(tokenizer, word)
    ctx = concepts.windows_at(stream, tid, context, where="before", max_windows=max_contexts, seed=seed)
    if len(ctx) < 2:
        raise ValueError(f"{word!r} occurs {len(ctx)} times with {context} tokens before it in the stream; need at least 2")
    return context_effect(model, ctx, tid, short, batch_size=batch_size, n_boot=n_boot, seed=seed)


def context_use(model, stream: np.ndarray, *, name: str = "model", tokenizer=None, target: str | None = " women",
                blocks: int = 64, context: int = CONTEXT, split: int = SPLIT, short: int = SHORT,
                target_context: int = SPLIT, max_target_contexts: int | None = 256, batch_size: int = 16,
                n_boot: int = 2000, seed: int = 0) -> ContextUse:
    """The context-use report of ``model`` on ``stream`` (e.g. the validation token stream).

    ``blocks`` seeded blocks of ``context`` tokens give the loss by position and the replaced-prefix
    cost; the context effect on ``target`` (one token of ``tokenizer``; None skips it) uses every
    occurrence with ``target_context`` tokens before it (at most ``max_target_contexts``, seeded).
    """
    from protot import concepts

    ids = concepts.sample_blocks(stream, blocks, context, seed=seed)
    per_block, cost, ci, nll = replaced_prefix_cost(model, ids, split, batch_size=batch_size, n_boot=n_boot, seed=seed)
    by_pos = loss_by_position(nll, n_boot=min(n_boot, 1000), seed=seed)
    by_bin = binned_loss(nll, n_boot=min(n_boot, 1000), seed=seed)
    per_target, eff, eff_ci, n_t = pd.DataFrame(), float("nan"), (float("nan"), float("nan")), 0
    lf = ls = float("nan")
    if target is not None:
        if tokenizer is None:
            raise ValueError("a target word needs the tokenizer")
        per_target, eff, eff_ci = target_context_effect(model, stream, tokenizer, target, context=target_context,
                                                        short=short, max_contexts=max_target_contexts,
                                                        batch_size=batch_size, n_boot=n_boot, seed=seed)
        n_t, lf, ls = len(per_target), float(per_target["logp_full"].mean()), float(per_target["logp_short"].mean())
    return ContextUse(model=name, blocks=len(ids), context=context, split=split, replaced_cost=cost, replaced_ci=ci,
                      loss_true=float(per_block["loss_true"].mean()), target=target, target_contexts=n_t,
                      context_effect=eff, context_effect_ci=eff_ci, logp_full=lf, logp_short=ls, short=short,
                      target_context=target_context,
                      by_position=by_pos, by_bin=by_bin, per_block=per_block, per_target=per_target)


def summary_table(reports: list[ContextUse]) -> pd.DataFrame:
    """One row per model with the numbers of each report."""
    return pd.DataFrame([{"model": r.model, "loss (tokens split..T-1)": r.loss_true, **r.values(),
                          "logp_full": r.logp_full, "logp_short": r.logp_short} for r in reports])


def plot_context_use(reports: list[ContextUse], axes=None, colors=None):
    """Loss by position (with the replaced-prefix cost in the legend) and the context effect on the
    target, one colour per report. Returns the figure."""
    import matplotlib.pyplot as plt

    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    else:
        fig = axes[0].figure
    colors = colors or [f"C{i}" for i in range(len(reports))]
    ax = axes[0]
    for r, c in zip(reports, colors):
        d = r.by_bin
        ax.errorbar(d.position, d.loss, yerr=[d.loss - d.ci_lo, d.ci_hi - d.loss], color=c, lw=1.2, marker="o", ms=4,
                    capsize=3, label=f"{r.model}: prefix replaced {r.replaced_cost:+.3f} nats "
                                     f"[{r.replaced_ci[0]:+.3f}, {r.replaced_ci[1]:+.3f}]")
    ax.axvline(reports[0].split, color="0.5", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("position of the predicted token (doubling bins)")
    ax.set_ylabel("next-token loss (nats)")
    ax.set_title(f"Loss by position ({reports[0].blocks} blocks, 95% CI)", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    xs = np.arange(len(reports))
    eff = np.array([r.context_effect for r in reports])
    lo = np.array([r.context_effect_ci[0] for r in reports])
    hi = np.array([r.context_effect_ci[1] for r in reports])
    ax.bar(xs, eff, color=colors[:len(reports)])
    ax.errorbar(xs, eff, yerr=[eff - lo, hi - eff], fmt="none", color="k", capsize=4)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xticks(xs, [r.model for r in reports])
    tgt = reports[0].target
    ax.set_ylabel(f"log p({tgt!r}): {reports[0].target_context} - last {reports[0].short} tokens (nats)")
    ax.set_title("Context effect on the target word", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Reports for the committed models: models/<name>/CONTEXT_USE.json, models/CONTEXT_USE.md + .png
# ---------------------------------------------------------------------------------------------
REPORT_FILE = "CONTEXT_USE.json"


def model_report(name: str, stream: np.ndarray, *, blocks: int = 64, seed: int = 0) -> tuple[ContextUse, dict]:
    """The context-use report of committed model ``name`` (models/<name>) and its JSON record."""
    from protot.train import pretrained

    m = pretrained.load(name)
    r = context_use(m.model, stream, name=name, tokenizer=m.tokenizer, blocks=blocks, seed=seed)
    man = m.manifest
    record = {
        "model": name, "weights_sha256": man["weights_sha256"], "steps": man.get("steps"),
        "planned_steps": man.get("planned_steps"), "tokens_seen": man.get("tokens_seen"),
        "status": man.get("status", "final"), "split": "validation", "seed": seed,
        "context": r.context, "replaced_prefix": [0, r.split - 1], "short_context": r.short,
        "target": r.target, "loss_positions_split_to_end": r.loss_true, **r.values(),
        "loss_by_bin": r.by_bin.round(5).to_dict(orient="records"),
    }
    return r, record


def render_reports(records: list[dict]) -> str:
    """models/CONTEXT_USE.md from the records (every number formatted from them)."""
    lines = ["# How much the committed models use their context",
             "",
             "Generated by `python -m protot.context_use` from each model's `CONTEXT_USE.json`; do not edit. "
             "Validation split; the replaced-half cost is the loss change on positions 128-255 when positions "
             "0-127 are another block's (paired over blocks); the context effect is log p(\" women\") with 128 "
             "tokens of context minus with the last 8 (paired over occurrences); 95% bootstrap intervals. "
             "These are the power preconditions of the concept, ablation and robustness claims.",
             "",
             "| model | status | tokens seen | loss, positions 128-255 | replaced-half cost (nats) | context effect on \" women\" (nats) |",
             "|---|---|---|---|---|---|"]
    for r in records:
        status = r["status"] if r["status"] == "final" else f"{r['status']} (step {r['steps']} of {r['planned_steps']})"
        lines.append(
            f"| `{r['model']}` | {status} | {r['tokens_seen'] / 1e6:.2f} M | {r['loss_positions_split_to_end']:.3f} | "
            f"{r['replaced_prefix_cost_nats']:+.3f} [{r['replaced_prefix_ci_low']:+.3f}, {r['replaced_prefix_ci_high']:+.3f}] | "
            f"{r['context_effect_nats']:+.3f} [{r['context_effect_ci_low']:+.3f}, {r['context_effect_ci_high']:+.3f}] "
            f"(n={r['context_effect_contexts']}) |")
    return "\n".join(lines) + "\n"


def write_reports(names: list[str] | None = None, *, blocks: int = 64, seed: int = 0) -> list[dict]:
    """Write CONTEXT_USE.json into each committed model's folder (all when ``names`` is None), then
    models/CONTEXT_USE.md and models/context_use.png for every model that has one."""
    import json

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from compendium import atomic
    from protot.train import packing, pretrained

    have = pretrained.available()
    names = have if names is None else list(names)
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(f"no committed model named {unknown} (committed: {have})")
    stream = packing.token_stream("validation")
    reports = {}
    for name in names:
        r, rec = model_report(name, stream, blocks=blocks, seed=seed)
        atomic.write_text(pretrained.models_dir() / name / REPORT_FILE, json.dumps(rec, indent=2) + "\n")
        reports[name] = r
        print(r.summary(), flush=True)
    records = []
    for name in have:   # the summary covers every model with a report, current or earlier
        path = pretrained.models_dir() / name / REPORT_FILE
        if path.exists():
            rec = json.loads(path.read_text())
            if rec["weights_sha256"] != pretrained.manifest(name)["weights_sha256"]:
                raise ValueError(f"{path} was made from other weights than models/{name}'s: re-run "
                                 f"`python -m protot.context_use {name}`")
            records.append(rec)
    atomic.write_text(pretrained.models_dir() / "CONTEXT_USE.md", render_reports(records))
    if reports:
        fig = plot_context_use(list(reports.values()))
        with atomic.atomic_path(pretrained.models_dir() / "context_use.png") as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        plt.close(fig)
    return records


def main(argv=None) -> int:
    import argparse

    import torch

    p = argparse.ArgumentParser(prog="python -m protot.context_use",
                                description="Write the context-use report of committed models (models/<name>/"
                                            f"{REPORT_FILE}, models/CONTEXT_USE.md, models/context_use.png).")
    p.add_argument("names", nargs="*", help="committed model names (default: all)")
    p.add_argument("--blocks", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    write_reports(args.names or None, blocks=args.blocks, seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
