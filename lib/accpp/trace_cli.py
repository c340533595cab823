"""``compendium trace``: the ACC++ circuit of one prompt, from the shell.

    compendium trace "When Mary and John went to the store, John gave a drink to" \\
        --answer " Mary" --wrong " John" --model smollm2-135m --out build/trace/mary

prints the circuit's summary (status and reason, seeds, firings, signals, the signal-rank histogram)
and writes ``circuit.json`` (:func:`accpp.graph.save_circuit`; read back with ``load_circuit``) and
``circuit.html`` (the interactive viewer, :mod:`accpp.viewer`) into ``--out``.

Answers are text, each ONE token of the model's tokenizer (with its leading space where the word
follows another: " Mary"); an answer of several tokens is refused with its pieces listed (a set of
tokens is traced from Python with :class:`accpp.seeding.TokenSet`). A prompt ending in whitespace is
refused (``--allow-trailing-space`` traces it anyway, with the warning); an answer lacking the
leading space the prompt implies gets a warning (:mod:`accpp.prompt_checks`).

Options: ``--seeding linear|prob`` (prob takes no ``--wrong``), ``--variant authors|per-position``,
``--tau-factor`` (tau(d) = min(1, factor / visible tokens), the paper's 2.5), ``--bos`` / ``--no-bos``
(prepend the tokenizer's beginning-of-sequence token or leave special tokens out; default: the
tokenizer's own choice), ``--position``, and any :class:`accpp.trace.TraceConfig` field with
``--set FIELD=VALUE`` (repeatable). ``--model``: an offline model (``smollm2-135m``, ``gemma-3-270m``), a
Hugging Face id in the local cache, or ``tiny:FAMILY`` (a tiny random model of :mod:`accpp.testing`
with a one-character-per-token tokenizer, for checking the command itself).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from collections import Counter

__all__ = ["add_parser", "run", "main", "parse_set", "CharTokenizer"]

EXIT_USAGE = 2


class TraceInputError(ValueError):
    """A refused input of ``compendium trace`` (the message says what to change)."""


class CharTokenizer:
    """One token per character of a small alphabet (id = index), no special tokens: the tokenizer of the
    ``tiny:FAMILY`` models (vocabulary 61)."""

    alphabet = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,!?'-:;"
    bos_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = True):
        bad = sorted({c for c in text if c not in self.alphabet})
        if bad:
            raise TraceInputError(f"characters {bad} are not in the tiny model's alphabet {self.alphabet!r}")
        return {"input_ids": [self.alphabet.index(c) for c in text]}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.alphabet[int(i)] for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [self.alphabet[int(i)] for i in ids]


def _load(name: str):
    if name.startswith("tiny:"):
        from accpp.testing import tiny_model

        return tiny_model(name.split(":", 1)[1]), CharTokenizer()
    from accpp.models import load_model

    return load_model(name)


def parse_set(items: list[str]) -> dict:
    """``FIELD=VALUE`` strings as TraceConfig keyword arguments, each VALUE converted to the field's type
    (bool: true/false; int; float; none for optional fields; text otherwise)."""
    from accpp.trace import TraceConfig

    fields = {f.name: f for f in dataclasses.fields(TraceConfig)}
    out = {}
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise TraceInputError(f"--set takes FIELD=VALUE, got {item!r}")
        if key not in fields:
            raise TraceInputError(f"--set {key}: TraceConfig has no field {key!r}; its fields: {', '.join(fields)}")
        default = fields[key].default
        text = raw.strip()
        typ = str(fields[key].type)
        try:
            if text.lower() == "none" and ("None" in typ or default is None):
                out[key] = None
            elif "bool" in typ:
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError("expected true or false")
                out[key] = text.lower() in ("true", "1", "yes")
            elif "int" in typ and "float" not in typ:
                out[key] = int(text)
            elif "float" in typ:
                out[key] = float(text)
            else:
                out[key] = text
        except ValueError as err:
            raise TraceInputError(f"--set {key}={raw!r}: not a value of type {typ} ({err})") from None
    return out


def one_token(tokenizer, text: str, what: str, model: str) -> int:
    """The id of ``text`` if it is exactly one token (no special tokens), else a TraceInputError listing
    its pieces."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise TraceInputError(f"--{what} {text!r} is no token at all: give the answer's text, e.g. ' Mary'")
    pieces = tokenizer.convert_ids_to_tokens(ids)
    raise TraceInputError(
        f"--{what} {text!r} is {len(ids)} tokens for {model}: {pieces} (ids {ids}). The metric needs ONE token on "
        f"each side: choose a single-token answer (with its leading space where it follows a word, e.g. ' Mary'), "
        f"or trace a set of tokens from Python with accpp.seeding.TokenSet (the mean logit of the set).")


def encode_prompt(tokenizer, text: str, bos: bool | None) -> list[int]:
    """The prompt's ids: the tokenizer's own special tokens (``bos`` None), none (False), or its
    beginning-of-sequence token first (True; refused when the tokenizer has none)."""
    if bos is None:
        return list(tokenizer(text)["input_ids"])
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if bos:
        b = getattr(tokenizer, "bos_token_id", None)
        if b is None:
            raise TraceInputError("--bos: this tokenizer has no beginning-of-sequence token")
        ids = [int(b)] + ids
    return ids


def summary_lines(circuit, tokenizer, top: int = 8) -> list[str]:
    """The printed summary: status and reason, metric, seeds, firings, signals, rank histogram."""
    from accpp.graph import signal_ranks, summary

    g, m = circuit.graph, circuit.meta
    s = summary(g)
    lines = [f"status: {circuit.status}" + (f" ({circuit.reason})" if circuit.reason else ""),
             f"metric ({m.get('metric', 'logit difference')}): {circuit.logit_diff:.4f}",
             f"seeds: {m.get('n_seeds', 0)} ({m.get('n_head_seeds', 0)} attention heads)"]
    seeds = sorted(((d.get("weight", 0.0), u) for u, _, d in g.edges(data=True) if d.get("side") == "seed"),
                   reverse=True)
    for w, u in seeds[:top]:
        lines.append(f"  {u:18s} {w:+.4f}")
    if len(seeds) > top:
        lines.append(f"  ... and {len(seeds) - top} more")
    lines.append(f"firings expanded: {circuit.n_firings}" + (" (truncated by max_firings)" if m.get("truncated") else ""))
    lines.append(f"nodes: {s['nodes']} ({s['heads']} distinct heads), edges: {s['edges']}, signals: {s['signal_edges']}")
    ranks = Counter(signal_ranks(g))
    if ranks:
        lines.append("signal ranks: " + ", ".join(f"rank {r}: {n}" for r, n in sorted(ranks.items())))
        lines.append(f"rank-1 fraction: {ranks.get(1, 0) / sum(ranks.values()):.3f}")
    lines.append(f"traced in {circuit.seconds:.2f} s")
    return lines


def add_parser(sub) -> argparse.ArgumentParser:
    """Register ``trace`` on the ``compendium`` command's subparsers."""
    p = sub.add_parser("trace", help="trace the ACC++ circuit of one prompt; print its summary, write JSON and a "
                                     "viewer page", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prompt", help="the prompt's text (no trailing whitespace)")
    p.add_argument("--answer", required=True, help="the answer, one token (e.g. ' Mary', with its leading space)")
    p.add_argument("--wrong", default=None, help="the counterfactual, one token (e.g. ' John'); not with --seeding prob")
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default), gemma-3-270m, a Hugging Face id in "
                                                           "the local cache, or tiny:FAMILY")
    p.add_argument("--seeding", choices=["linear", "prob"], default=None, help="linear (the paper's, default) or prob")
    p.add_argument("--variant", choices=["authors", "per-position"], default=None, help="key-side candidates")
    p.add_argument("--tau-factor", type=float, default=None, help="tau(d) = min(1, FACTOR / visible tokens); 2.5")
    bos = p.add_mutually_exclusive_group()
    bos.add_argument("--bos", dest="bos", action="store_true", default=None, help="prepend the tokenizer's BOS token")
    bos.add_argument("--no-bos", dest="bos", action="store_false", help="leave special tokens out")
    p.add_argument("--position", type=int, default=-1, help="the traced position (default: the last token)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TraceConfig field (e.g. --set max_firings=50 --set expand_layer0=true)")
    p.add_argument("--out", default=None, help="folder for circuit.json and circuit.html (default: build/trace)")
    p.add_argument("--allow-trailing-space", action="store_true", help="trace a prompt ending in whitespace anyway")
    p.add_argument("--top", type=int, default=8, help="seeds listed in the summary")
    return p


def run(args) -> int:
    """Run a parsed ``compendium trace``; 0 when traced (whatever the circuit's status), 2 on refused input."""
    try:
        return _run(args)
    except TraceInputError as err:
        print(f"compendium trace: {err}", file=sys.stderr)
        return EXIT_USAGE


def _run(args) -> int:
    from accpp.prompt_checks import PromptWarning, answer_space_problem, ends_in_whitespace
    from accpp.trace import TraceConfig, Tracer
    from accpp.viewer import write_html
    from accpp.graph import save_circuit
    from compendium import paths

    kw = parse_set(args.sets)
    for name, val in (("seeding", args.seeding), ("variant", args.variant), ("tau_factor", args.tau_factor)):
        if val is not None:
            kw[name] = val
    try:
        cfg = TraceConfig(**kw)
    except (TypeError, ValueError) as err:
        raise TraceInputError(str(err)) from None
    if cfg.seeding == "prob" and args.wrong is not None:
        raise TraceInputError("--seeding prob traces the answer's log-probability: give no --wrong")
    if cfg.seeding == "linear" and args.wrong is None:
        raise TraceInputError("the linear seeding traces logit(answer) - logit(wrong): give --wrong (or --seeding prob)")
    if args.prompt.strip() == "":
        raise TraceInputError("the prompt is empty")
    try:  # checked before any work: never into the sources or committed files
        out = paths.check_output(args.out, "--out") if args.out else paths.output_dir() / "trace"
    except paths.UnsafeOutputError as err:
        raise TraceInputError(str(err)) from None
    model, tok = _load(args.model)
    ids = encode_prompt(tok, args.prompt, args.bos)
    if not ids:
        raise TraceInputError("the prompt has no tokens")
    msg = ends_in_whitespace(tok, ids)
    if msg and not args.allow_trailing_space:
        raise TraceInputError(msg + " (--allow-trailing-space traces it anyway)")
    correct = one_token(tok, args.answer, "answer", args.model)
    wrong = one_token(tok, args.wrong, "wrong", args.model) if args.wrong is not None else None
    for what, t in (("correct", correct), ("wrong", wrong)):
        m = answer_space_problem(tok, ids, t, what) if t is not None else None
        if m:
            print(f"compendium trace: warning: {m}", file=sys.stderr)
    tracer = Tracer(model, tok, name=None if args.model.startswith("tiny:") else args.model, config=cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptWarning)  # already reported above
        try:
            circuit = tracer.trace(ids, correct, wrong, position=args.position)
        except (TypeError, ValueError) as err:
            raise TraceInputError(str(err)) from None
    circuit.meta.update(text=args.prompt, answer=args.answer, wrong_text=args.wrong, model_name=args.model)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{args.model}: {len(ids)} tokens; answer {args.answer!r} (id {correct})"
          + (f" vs {args.wrong!r} (id {wrong})" if wrong is not None else ""))
    for line in summary_lines(circuit, tok, args.top):
        print(line)
    jpath = save_circuit(circuit, out / "circuit.json")
    hpath = write_html(circuit, out / "circuit.html", title=f"{args.model}: {args.prompt} -> {args.answer!r}")
    print(f"wrote {paths.display(jpath)} and {paths.display(hpath)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m accpp.trace_cli ...``, the same as ``compendium trace ...``."""
    parser = argparse.ArgumentParser(prog="compendium")
    add_parser(parser.add_subparsers(dest="cmd", required=True))
    return run(parser.parse_args(["trace", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
