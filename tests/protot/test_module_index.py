"""lib/protot/README.md's module index and protot/__init__'s docstring name every module of lib/protot
(the robustness package as one: its own docstring lists its modules), each index row with its role."""
import re
import subprocess
from pathlib import Path

import pytest

import protot

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "lib"
ROLES = {"model", "training", "study", "study (shared)", "performance"}
WHOLE = {"protot.robustness"}  # indexed as one package


def modules() -> list[str]:
    """Dotted names of the modules and packages of lib/protot that git tracks (a clean clone's files)."""
    try:
        out = subprocess.run(["git", "ls-files", "lib/protot"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # no git: the files on disk
        out = [str(p.relative_to(ROOT)) for p in (LIB / "protot").rglob("*.py")]
    names = set()
    for rel in out:
        if not rel.endswith(".py") or rel.endswith("__main__.py"):
            continue
        parts = list(Path(rel).relative_to("lib").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if name != "protot" and not any(name.startswith(w + ".") for w in WHOLE):
            names.add(name)
    return sorted(names)


def index_rows(readme: str) -> dict[str, str]:
    """{module: role} of the README's "Module index" table; a row `a.b.c` / `d` / `e` names a.b.c, a.b.d, a.b.e."""
    section = readme.split("## Module index", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            if rows and not line.startswith("|"):
                break
            continue
        names = re.findall(r"`([\w.]+)`", cells[0])
        first = names[0]
        prefix = first.rsplit(".", 1)[0]
        for n in names:
            rows[n if "." in n else f"{prefix}.{n}"] = cells[1]
    return rows


def missing_from_index(readme: str, names: list[str]) -> list[str]:
    rows = index_rows(readme)
    return [n for n in names if n not in rows]


def missing_from_docstring(doc: str, names: list[str]) -> list[str]:
    """A module is named as protot.a.b, or (a package's modules) as .b or b in its package's line."""
    words = set(re.findall(r"[\w.]+", doc))
    out = []
    for n in names:
        last = n.rsplit(".", 1)[1]
        if n not in words and f".{last}" not in words and (n.count(".") < 2 or last not in words):
            out.append(n)
    return out


def test_the_readme_indexes_every_module_with_a_role():
    readme = (LIB / "protot" / "README.md").read_text(encoding="utf-8")
    names = modules()
    assert "protot.perf.bench" in names and "protot.train.trainer" in names and "protot.labels" in names
    assert missing_from_index(readme, names) == []
    rows = index_rows(readme)
    assert {r: role for r, role in rows.items() if role not in ROLES} == {}
    # every row names a module that exists (the op, kernels.proto_mixer, lives outside lib/)
    assert [r for r in rows if r not in names and r not in WHOLE and not r.startswith("kernels.")] == []


def test_the_package_docstring_names_every_module():
    assert missing_from_docstring(protot.__doc__, modules()) == []


def test_a_module_left_out_is_reported():
    readme = (LIB / "protot" / "README.md").read_text(encoding="utf-8")
    planted = readme.replace("| `protot.women` |", "| women |")
    assert missing_from_index(planted, modules()) == ["protot.women"]
    assert missing_from_docstring(protot.__doc__.replace("protot.women", "women"), modules()) == ["protot.women"]
    with pytest.raises(IndexError):
        index_rows("no index here")
