"""compendium.mutate: the summary of mutmut's results, the staged folder it runs in and its
configuration (mutmut itself is not run here: make mutate)."""
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from compendium import mutate, paths

RESULTS = """\
    compendium.stats.x__sample__mutmut_1: killed
    compendium.stats.x__sample__mutmut_3: survived
    compendium.stats.x_bootstrap_mean_ci__mutmut_1: killed
    compendium.judge.xǁOutcomeǁdescribe__mutmut_2: killed
    compendium.judge.x_derive__mutmut_5: timeout
    compendium.judge.x_derive__mutmut_6: no tests
    compendium.judge.x_derive__mutmut_7: survived
"""


def test_summary_counts_per_module_and_in_all():
    per, text = mutate.summary(RESULTS)
    assert per["compendium.stats"] == {"killed": 2, "survived": 1}
    assert per["compendium.judge"] == {"killed": 1, "timeout": 1, "no tests": 1, "survived": 1}
    lines = text.splitlines()
    assert lines[0] == "compendium.judge: 1 of 3 mutants survived (33.3%); no tests 1, timeout 1"
    assert lines[1] == "compendium.stats: 1 of 3 mutants survived (33.3%)"
    assert lines[2] == "all: 2 of 6 mutants survived (33.3%); no tests 1, timeout 1"


def _config(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]


def test_every_file_and_test_named_for_mutation_exists():
    root = paths.repo_root()
    config = _config(root)
    assert config["only_mutate"] and all(p.startswith("lib/") for p in config["only_mutate"])
    missing = [p for p in config["only_mutate"] if not (root / p).is_file()]
    selection = config["pytest_add_cli_args_test_selection"]
    for arg in selection:
        if arg.startswith("-"):
            continue
        path, _, test = arg.partition("::")
        if not (root / path).is_file():
            missing.append(arg)
        elif test and not re.search(rf"^def {re.escape(test)}\(", (root / path).read_text(encoding="utf-8"), re.M):
            missing.append(arg)          # a renamed test would be deselected or selected silently
    assert missing == []
    assert all(selection[i + 1].startswith("tests/") for i, a in enumerate(selection) if a == "--deselect")


def test_stage_sees_lib_as_src(tmp_path, monkeypatch):
    for folder in ("lib", "tests", "papers"):
        (tmp_path / folder).mkdir()
    text = (paths.repo_root() / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    monkeypatch.setenv("COMPENDIUM_ROOT", str(tmp_path))
    folder = mutate.stage()
    assert folder == tmp_path / "build" / "mutate"
    for link, target in (("src", "lib"), ("tests", "tests"), ("papers", "papers")):
        assert (folder / link).is_symlink() and (folder / link).resolve() == (tmp_path / target).resolve()
    staged = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    assert staged["tool"]["pytest"]["ini_options"]["pythonpath"] == ["src", "."]
    original = _config(tmp_path)
    assert staged["tool"]["mutmut"]["only_mutate"] == ["src/" + p.removeprefix("lib/") for p in original["only_mutate"]]
    selection = "pytest_add_cli_args_test_selection"
    assert staged["tool"]["mutmut"][selection] == original[selection]
    assert mutate.stage() == folder                      # a second staging reuses the links


def test_each_mutant_runs_on_one_thread_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = mutate.environment()
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("1", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("PATH", "/x")
    env = mutate.environment()
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["PATH"]) == ("3", "1", "/x")
