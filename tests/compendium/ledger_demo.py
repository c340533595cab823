"""A miniature compendium (the demo paper) for the tests of the ledger, the runner and publishing."""
from __future__ import annotations

import hashlib
import subprocess
import textwrap
from pathlib import Path

DEMO_CLAIMS = textwrap.dedent("""\
    paper:
      title: "A demo paper"
      arxiv: "0000.00000"
    claims:
      - id: gain
        statement: The gain is at least 5%.
        where: "§1"
        paper_value: 16.6
        unit: "%"
        source: brief
        notebook: demo/01_good
        check:
          quantity: gain
          op: ">="
          threshold: 5.0
          all_of:
            - {quantity: ci_low, op: ">", threshold: 0}
          assert_at: [cpu]
          measured_only_at: [paper]
          registered: "abc1234"
        preconditions:
          - id: uses-context
            statement: the output depends on context beyond the last token
            quantity: context_effect
            op: ">="
            threshold: 0.1
        history:
          - "2026-11-30: check pre-registered"
      - id: loss
        statement: The loss lies between 0 and 2 nats.
        where: "§2"
        paper_value: 1.0
        unit: nats
        source: paper
        notebook: demo/02_bad
        check: {quantity: loss, op: between, threshold: [0, 2], expect: does not hold}
      - id: plain
        statement: A number without a check.
        where: "§3"
        paper_value: null
        unit: ""
        source: paper
        notebook: demo/03_dies
      - id: flag
        statement: A yes/no property.
        where: "§4"
        paper_value: "yes"
        unit: ""
        source: paper
        notebook: null
        check: {quantity: ok, op: is, threshold: true, assert_at: [cpu]}
    """)

PARAMS = ('# %% tags=["parameters"]\nPROFILE = "cpu"\nSEED = 0\nDEVICE = "cpu"\nLABEL = "none"\nN = 3\n'
          'RATE = 0.5\nFLAG = False\n')

#: notebooks that run in real kernels (tests/compendium/test_runner.py)
KERNEL_NOTEBOOKS = {
    "demo/01_good": """\
        import pathlib

        from tqdm.auto import tqdm

        from compendium import claims

        pathlib.Path("seen.txt").write_text(f"{PROFILE} {SEED} {DEVICE} {LABEL}")
        total = 0
        for i in tqdm(range(200), desc="busy loop"):
            total += i
        print("loop total", total)
        claims.conclude(claims.Measurement("demo/gain", {"gain": 7.5, "ci_low": 0.4, "context_effect": 0.3}),
                        profile=PROFILE, seed=SEED)
        """,
    "demo/02_bad": """\
        from compendium import claims

        claims.conclude(claims.Measurement("demo/loss", {"loss": 1.5}), profile=PROFILE, seed=SEED)
        raise RuntimeError("the notebook fails after recording")
        """,
    "demo/03_dies": """\
        import os
        import signal

        from compendium import claims

        claims.conclude(claims.Measurement("demo/plain", {"size": 3}), profile=PROFILE, seed=SEED)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
}


def make_root(root: Path, notebooks: dict[str, str] | None = None, papers: dict[str, str] | None = None) -> Path:
    """The demo compendium in ``root``, committed to a git repository of its own (runs record its
    revision, and only a run from a known code state publishes). ``papers``: more papers beside the
    demo paper, {paper id: its claims.yaml}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("")
    (root / ".gitignore").write_text("build/\n/.publish.lock\n/.papers.publish-*/\nseen.txt\n")
    for paper, text in {"demo": DEMO_CLAIMS, **(papers or {})}.items():
        (root / "papers" / paper).mkdir(parents=True)
        (root / "papers" / paper / "claims.yaml").write_text(text)
    (root / "notebooks").mkdir()
    for name, body in (notebooks or {}).items():
        path = root / "notebooks" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# %% [markdown]\n# # {name}\n\n{PARAMS}\n# %%\n{textwrap.dedent(body)}")
    git = ["git", "-c", "user.name=demo", "-c", "user.email=demo@example.org", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "demo compendium"]):
        subprocess.run([*git, *cmd], cwd=root, check=True, capture_output=True)
    return root


def tree_digest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}



def write_published(root: Path, paper: str = "demo", **extra) -> Path:
    """A PUBLISHED.json for the results and figures now in ``papers/<paper>/`` of ``root``, listing
    the sha256 of each (``"sha256"``: {path relative to papers/<paper>/: hex}) as a publish does,
    for tests that place results by hand; ``extra``: more top-level fields. Returns its path."""
    import json

    base = root / "papers" / paper
    listing = {p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for sub in ("results", "figures") for p in sorted((base / sub).rglob("*"))
               if p.is_file() and p.name not in ("PUBLISHED.json", "verdict_board.png")}
    path = base / "results" / "PUBLISHED.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"sha256": listing, **extra}, indent=2))
    return path
