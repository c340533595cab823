"""The claims ledger is the only place a paper's value is written, and notebook parameters are live.

1. No paper value from ``papers/*/claims.yaml`` appears as a literal in ``lib/**/*.py`` or
   ``notebooks/**/*.py``: code reads it with ``claims.get_claim(key).paper_value``. Distinctive
   values only: numbers with at least two significant digits other than 0, 1, 2, 10, 100, and
   strings longer than 8 characters. Numbers are matched against numeric literals and against
   numbers written inside string constants (labels, notes, f-string text; docstrings excepted);
   strings against every string constant. Comments (and so the markdown cells of a jupytext
   notebook) are not code and are not searched.
2. Every name the ``parameters`` cell of a notebook assigns is read somewhere else in that
   notebook: a parameter that nothing uses (a ``DEVICE`` that never reaches the model) is a
   switch that does nothing.
"""
from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path

import jupytext
import pytest
import yaml

from compendium import paths

ROOT = paths.repo_root()
COMMON_NUMBERS = {0, 1, 2, 10, 100}
MIN_STRING_LENGTH = 9  # strings longer than 8 characters


def _leaves(value):
    """The scalar values inside a paper_value (a number, a string, or a dict/list of them)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None:
        yield value


def significant_digits(x: int | float) -> int:
    digits = Decimal(repr(x)).normalize().as_tuple().digits
    return len(digits) if any(digits) else 1


def is_distinctive(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return significant_digits(value) >= 2 and abs(value) not in COMMON_NUMBERS
    if isinstance(value, str):
        return len(value) >= MIN_STRING_LENGTH
    return False


def paper_values() -> list[tuple[str, int | float | str]]:
    """(claim key, value) for every distinctive paper value of every paper."""
    out = []
    for path in sorted(paths.papers_dir().glob("*/claims.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        for claim in raw["claims"]:
            for value in _leaves(claim.get("paper_value")):
                if is_distinctive(value):
                    out.append((f"{path.parent.name}/{claim['id']}", value))
    return out


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0].value))
    return ids


def _number_pattern(x: int | float) -> re.Pattern:
    """``x`` written as a number inside text (16.6 but not 116.6 or 16.65; 32768 or 32,768)."""
    forms = {repr(x), str(x)}
    if isinstance(x, float) and x.is_integer():
        forms.add(str(int(x)))
    if abs(x) >= 1000 and float(x).is_integer():
        forms.add(f"{int(x):,}")
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.compile(rf"(?<![\d.])(?:{alternatives})(?!\.?\d)")


def find_paper_literals(source: str, values) -> list[str]:
    """Descriptions of every place in ``source`` (Python) where one of ``values`` is typed."""
    tree = ast.parse(source)
    docstrings = _docstring_nodes(tree)
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
            continue
        for key, value in values:
            if isinstance(value, str):
                if isinstance(node.value, str) and value.casefold() in node.value.casefold():
                    hits.append(f"line {node.lineno}: string {node.value[:60]!r} contains {key}'s paper value {value!r}")
            elif isinstance(node.value, (int, float)):
                if node.value == value:
                    hits.append(f"line {node.lineno}: literal {node.value!r} is {key}'s paper value")
            elif isinstance(node.value, str) and id(node) not in docstrings:
                if _number_pattern(value).search(node.value):
                    hits.append(f"line {node.lineno}: text {node.value[:60]!r} types {key}'s paper value {value!r}")
    return hits


SOURCES = sorted(
    p for base in ("lib", "notebooks") for p in (ROOT / base).rglob("*.py")
    if ".ipynb_checkpoints" not in p.parts and "egg-info" not in str(p)
)


def test_the_ledger_has_distinctive_values_to_look_for():
    found = dict(paper_values())
    assert len(found) >= 10, found
    assert not is_distinctive(1.0) and not is_distinctive(5) and not is_distinctive(100)
    assert is_distinctive(16.6) and is_distinctive(0.99) and is_distinctive(32768) and is_distinctive(1020)


def test_the_search_finds_typed_values_and_passes_read_ones():
    values = [("p/a", 16.6), ("p/b", 32768), ("p/c", "es-pt closest")]
    typed = 'x = 16.6\ny = [256, 32768]\nz = f"paper: {x}, 16.6%"\nw = "the es-pt closest pair"\n'
    assert len(find_paper_literals(typed, values)) == 4
    read = ('"""Docstring: the paper reports 16.6."""\nx = get_claim("p/a").paper_value\n'
            'y = [256 * 2**k for k in range(8)]\nz = 116.6, 16.65, "1.66", "ratio 16.60x"\n')
    assert find_paper_literals(read, values) == [], find_paper_literals(read, values)


@pytest.mark.parametrize("path", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES])
def test_no_paper_value_is_typed_outside_the_ledger(path: Path):
    hits = find_paper_literals(path.read_text(encoding="utf-8"), paper_values())
    assert not hits, (f"{path.relative_to(ROOT)} types paper values that belong in claims.yaml "
                      "(read them with claims.get_claim(key).paper_value):\n" + "\n".join(hits))


def _code(source: str) -> str:
    """A cell's source without IPython magics and shell escapes (not Python)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def unused_parameters(notebook_py: Path) -> tuple[list[str], list[str]]:
    """(assigned names of the parameters cell, those never read in another code cell)."""
    nb = jupytext.read(notebook_py)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in cells if "parameters" in c.metadata.get("tags", ())]
    if len(params) != 1:
        raise AssertionError(f"{notebook_py.name}: expected one cell tagged 'parameters', found {len(params)}")
    assigned = [t.id for node in ast.walk(ast.parse(_code(params[0].source))) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)]
    rest = ast.parse("\n".join(_code(c.source) for c in cells if c is not params[0]))
    read = {n.id for n in ast.walk(rest) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return assigned, [name for name in assigned if name not in read]


NOTEBOOKS = sorted(p for p in paths.notebooks_dir().rglob("*.py") if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.relative_to(paths.notebooks_dir()).as_posix() for p in NOTEBOOKS])
def test_every_parameter_is_used(path: Path):
    assigned, unused = unused_parameters(path)
    assert assigned, f"{path.name}: the parameters cell assigns nothing"
    assert not unused, f"{path.relative_to(ROOT)}: parameters {unused} are never used outside the parameters cell"


def test_unused_parameter_is_caught(tmp_path):
    nb = tmp_path / "nb.py"
    nb.write_text('# %% tags=["parameters"]\nPROFILE = "cpu"\nDEVICE = "cpu"\n\n# %%\nprint(PROFILE)\n')
    assert unused_parameters(nb) == (["PROFILE", "DEVICE"], ["DEVICE"])
