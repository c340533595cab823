"""Mutation testing of the code the claims rest on: ``make mutate`` (not part of ``make test``).

Runs mutmut (a maintained mutation tester from PyPI, installed on first use into
``build/mutmut-site``, outside the locked environment) on the files ``[tool.mutmut]`` of
``pyproject.toml`` names, each mutant against the tests named there, then prints, per file and in
all, how many mutants survived (the tests passed with the bug in place). The goal is at most 10%.
The files: the ledger's judging rule, schema and statistics helpers (``compendium.judge``,
``compendium.checks``, ``compendium.stats``) and the measure code of the ProtoT and ACC++ claims
(``protot.robustness.metrics`` and ``.compare``, ``protot.context_use``,
``protot.train.split_eval``, ``protot.preference``, ``protot.cola``, ``accpp.signals``,
``accpp.interventions``, ``accpp.head_patch``, ``accpp.intervention_summary``), each against its
fast tests (no pretrained model, no notebook).
Mutant globs split a run too long for one sitting (``"protot.*"``, ``"accpp.*"``,
``"compendium.*"``). Each mutant's tests run on one thread (``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` default to 1): mutants run side by side (``--max-children``), and no OpenMP
thread pool is started before mutmut forks the processes that run them.
mutmut names modules by their path under ``./``, ``src/`` or ``source/``, so it runs in
``build/mutate/``, where ``src`` is ``lib/`` (links to ``lib/``, ``tests/`` and ``papers/``, and
a copy of ``pyproject.toml`` with ``lib`` read as ``src``); its work is in
``build/mutate/mutants/`` (``mutmut browse`` there shows each survivor).

    python -m compendium.mutate [--max-children N] [MUTANT_GLOB ...]   (e.g. "compendium.judge.*")
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from compendium import paths

MUTMUT = "mutmut==3.8.1"
GOAL = 0.10


def site() -> Path:
    return paths.repo_root() / "build" / "mutmut-site"


def install() -> None:
    if not (site() / "mutmut").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site()), MUTMUT],
                       check=True)


def stage() -> Path:
    """build/mutate/: the repository as mutmut expects to see it (module docstring)."""
    root = paths.repo_root()
    folder = root / "build" / "mutate"
    folder.mkdir(parents=True, exist_ok=True)
    for link, target in (("src", "lib"), ("tests", "tests"), ("papers", "papers")):
        path = folder / link
        if not path.is_symlink():
            path.symlink_to(root / target, target_is_directory=True)
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    text = text.replace('pythonpath = ["lib", "."]', 'pythonpath = ["src", "."]').replace('"lib/', '"src/')
    (folder / "pyproject.toml").write_text(text, encoding="utf-8")
    return folder


def _mutmut(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # the locked environment's packages (pytest among them) come first; mutmut's own after them
    code = ("import sys; sys.path.append(sys.argv.pop(1)); sys.argv[0] = 'mutmut'; "
            "from mutmut.__main__ import cli; cli()")
    return subprocess.run([sys.executable, "-c", code, str(site()), *args], cwd=folder, env=environment(),
                          text=True, capture_output=args[0] == "results")


def environment() -> dict[str, str]:
    """mutmut's environment: this one, with one thread per test process unless set otherwise."""
    return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **os.environ}


def summary(results: str) -> tuple[dict[str, Counter], str]:
    """Per file, the count of each mutant status in ``mutmut results --all true`` output."""
    per: dict[str, Counter] = {}
    for line in results.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if not sep or "__mutmut_" not in name:
            continue
        per.setdefault(name.split(".x", 1)[0], Counter())[status.strip()] += 1   # compendium.stats.x_f__mutmut_3
    lines = []
    total = Counter()
    for module, counts in sorted(per.items()):
        total += counts
        lines.append(_line(module, counts))
    lines.append(_line("all", total))
    return per, "\n".join(lines)


def _line(name: str, counts: Counter) -> str:
    judged = sum(n for s, n in counts.items() if s in ("killed", "survived", "timeout"))
    survived = counts.get("survived", 0)
    rate = survived / judged if judged else float("nan")
    rest = ", ".join(f"{s} {n}" for s, n in sorted(counts.items()) if s not in ("killed", "survived"))
    return (f"{name}: {survived} of {judged} mutants survived ({100 * rate:.1f}%)"
            + (f"; {rest}" if rest else ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compendium.mutate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-children", type=int, default=2, help="mutants run in parallel (default 2)")
    ap.add_argument("names", nargs="*", help="only these mutants (globs of mutmut's names, e.g. 'compendium.stats.*')")
    args = ap.parse_args(argv)
    install()
    folder = stage()
    run = _mutmut(folder, "run", "--max-children", str(args.max_children), *args.names)
    results = _mutmut(folder, "results", "--all", "true")
    lines = [line for line in results.stdout.splitlines()
             if not args.names or any(fnmatch.fnmatch(line.strip().rpartition(": ")[0], n) for n in args.names)]
    _, text = summary("\n".join(lines))
    print(text)
    print(f"goal: at most {100 * GOAL:.0f}% of mutants survive")
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
