"""The two dependency lists agree, and the README's commands exist."""
from __future__ import annotations

import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import yaml

from compendium.paths import repo_root

ROOT = repo_root()


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_installs_the_pyproject_set():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    extras = _pyproject()["project"]["optional-dependencies"]
    # the project itself, with every extra, is what conda users install
    editable = [p for p in pip_section if p.startswith("-e")]
    assert editable == ["-e .[" + ",".join(sorted(extras)) + "]"] or editable == [
        "-e .[" + ",".join(e for e in ("dev", "models")) + "]"
    ]
    assert set(extras) == {"dev", "models"}
    # nothing else is installed beside it except the torch pin the Makefile also uses
    others = [p for p in pip_section if not p.startswith("-e")]
    makefile = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile, re.M).group(1)
    assert others == [torch_pin]


def test_card_packages_are_dependencies():
    deps = {re.split(r"[<>=\[ ;]", d)[0].lower() for d in _pyproject()["project"]["dependencies"]}
    for pkg in ("jupyterlab", "jupytext", "papermill", "torch", "triton", "nnsight", "seaborn", "datasets",
                "transformers", "gguf", "safetensors", "tqdm"):
        assert pkg in deps, f"{pkg} is missing from pyproject.toml"


def test_ci_calls_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci
    assert "make test" in readme and "make all" in readme
