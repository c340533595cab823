"""Bad input to ``python -m protot.train`` stops before anything is written, with a message naming the
problem: unknown or mistyped ``--set`` fields, non-positive sizes, and an ``--out`` that would overwrite
committed files or a folder that is not a run."""
import json
import shutil

import pytest

from compendium import paths
from protot.train import config
from protot.train.__main__ import main

from train_helpers import ROOT, cli_args, tiny_cfg


def _refused(capsys, argv, *needles):
    """Run the CLI in-process; it must exit with code 2 and print every needle on stderr."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    for n in needles:
        assert n in err, f"{n!r} not in:\n{err}"
    return err


def test_unknown_set_key_is_an_error_listing_the_fields(tmp_path, capsys, tracked_unchanged):
    out = tmp_path / "run"
    err = _refused(capsys, cli_args(tiny_cfg(), out, "--max-steps", "1", "--set", "num_hiden_layers=4"),
                   "unknown model config field 'num_hiden_layers'", "num_hidden_layers", "num_prototypes")
    assert "vocab_size" not in err.split("valid fields:")[1]  # fixed by the tokenizer, not offered
    _refused(capsys, cli_args(tiny_cfg().replace(arch="llama"), out, "--set", "num_prototypes=4"),
             "for arch 'llama'", "num_attention_heads")
    _refused(capsys, cli_args(tiny_cfg(), out, "--set", "vocab_size=100"), "fixed by the tokenizer")
    _refused(capsys, cli_args(tiny_cfg(), out, "--set", "novalue"), "expected NAME=VALUE")
    assert not out.exists()


@pytest.mark.parametrize("item, needle", [
    ("num_hidden_layers=abc", "num_hidden_layers must be int, got 'abc' (str)"),
    ("num_hidden_layers=2.5", "num_hidden_layers must be int, got 2.5"),
    ("write_temperature=hot", "write_temperature must be float"),
    ("include_current=1", "include_current must be bool"),
    ("proto_dim=[3]", "proto_dim must be int | None"),
])
def test_set_values_are_type_checked(tmp_path, capsys, item, needle, tracked_unchanged):
    _refused(capsys, cli_args(tiny_cfg(), tmp_path / "run", "--set", item), needle)
    assert not (tmp_path / "run").exists()


def test_set_accepts_well_typed_values():
    config.check_model_overrides("protot", {"num_hidden_layers": 3, "write_temperature": 2, "proto_dim": None,
                                            "include_current": False, "init_decays": [0.5, 0.9]})
    config.check_model_overrides("hf-llama", {"num_key_value_heads": 1, "hidden_act": "silu"})


@pytest.mark.parametrize("flag, value, needle", [
    ("--context", "0", "context must be at least 1, got 0"),
    ("--batch-size", "0", "batch_size must be at least 1, got 0"),
    ("--batch-size", "-4", "batch_size must be at least 1, got -4"),
    ("--grad-accum", "0", "grad_accum must be at least 1, got 0"),
    ("--tokens", "0", "tokens must be at least 1, got 0"),
    ("--tokens", "64", "smaller than one optimiser step"),
    ("--lr", "0", "lr must be greater than 0.0, got 0.0"),
    ("--lr", "nan", "lr must be a number"),
    ("--warmup-steps", "-1", "warmup_steps must be at least 0"),
    ("--eval-every", "0", "eval_every must be at least 1"),
    ("--eval-blocks", "0", "eval_blocks must be at least 1"),
    ("--ckpt-every", "0", "ckpt_every must be at least 1"),
    ("--seed", "-1", "seed must be at least 0"),
    ("--max-steps", "0", "must be a positive integer, got 0"),
    ("--threads", "0", "must be a positive integer, got 0"),
    ("--size", "huge", "invalid choice: 'huge'"),
])
def test_non_positive_sizes_are_refused(tmp_path, capsys, flag, value, needle, tracked_unchanged):
    args = cli_args(tiny_cfg(), tmp_path / "run")
    if flag in args:
        i = args.index(flag)
        args = args[:i] + args[i + 2:]
    _refused(capsys, args + [flag, value], needle)
    assert not (tmp_path / "run").exists()


def test_train_config_validates_in_post_init():
    for changes, needle in [(dict(context=0), "context must be at least 1"),
                            (dict(batch_size=6, grad_accum=4), "multiple of grad_accum (4)"),
                            (dict(min_lr_ratio=1.5), "min_lr_ratio must be at most 1.0"),
                            (dict(beta2=1.0), "beta2 must be below 1.0"),
                            (dict(context="256"), "context must be an integer, got '256'"),
                            (dict(keep_checkpoints=0), "keep_checkpoints must be at least 1"),
                            (dict(size="medium"), "unknown model size 'medium'")]:
        with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            tiny_cfg(**changes)
    # every committed profile is valid, and manifests' configs still load
    for name in config.PROFILES:
        config.profile(name)
    for man in sorted((ROOT / "models").glob("*/MANIFEST.json")):
        config.TrainConfig.from_dict(json.loads(man.read_text())["train_config"])


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    """A repository root (COMPENDIUM_ROOT) holding a copy of models/protot-authors-small/config.json, real data and cache."""
    cache, data = paths.cache_dir(), paths.data_dir()
    root = tmp_path / "root"
    for d in ("papers/protot", "notebooks", "models/protot-authors-small"):
        (root / d).mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    shutil.copy(ROOT / "models/protot-authors-small/config.json", root / "models/protot-authors-small/config.json")
    (root / "papers/protot/notes.md").write_text("notes\n")
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_CACHE", str(cache))
    monkeypatch.setenv("COMPENDIUM_DATA", str(data))
    monkeypatch.delenv("PROTOT_MODELS", raising=False)
    monkeypatch.chdir(root)
    return root


def test_out_inside_models_or_papers_is_refused(fake_root, capsys, streams, tracked_unchanged):
    committed = (fake_root / "models/protot-authors-small/config.json").read_bytes()
    for out in ("models/protot-authors-small", str(fake_root / "models" / "new-run"), "papers/protot", "papers/run",
                "data/run"):
        _refused(capsys, cli_args(tiny_cfg(), out, "--max-steps", "1"), "holds committed files", ".cache/runs/")
    assert (fake_root / "models/protot-authors-small/config.json").read_bytes() == committed
    assert sorted(p.name for p in (fake_root / "models").iterdir()) == ["protot-authors-small"]
    assert sorted(p.name for p in (fake_root / "papers").iterdir()) == ["protot"]
    assert sorted(p.name for p in (fake_root / "papers/protot").iterdir()) == ["notes.md"]
    assert not (fake_root / "data").exists()


def test_non_empty_out_that_is_not_a_run_is_refused(tmp_path, capsys, streams, tracked_unchanged):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.json").write_text('{"hidden_size": 256}\n')
    (out / "notes.txt").write_text("keep me\n")
    _refused(capsys, cli_args(tiny_cfg(), out, "--max-steps", "1"), "is not empty and is not a training run",
             "config.json, notes.txt")
    assert (out / "config.json").read_text() == '{"hidden_size": 256}\n'
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt"]
    # a file is not a run folder either
    _refused(capsys, cli_args(tiny_cfg(), out / "notes.txt", "--max-steps", "1"), "is a file")
    # an empty folder, and a run of this trainer (resumed), are fine
    empty = tmp_path / "empty"
    empty.mkdir()
    main(cli_args(tiny_cfg(), empty, "--max-steps", "1"))
    assert (empty / "metrics.jsonl").is_file()
    main(cli_args(tiny_cfg(), empty, "--max-steps", "2", "--resume"))
    assert [m["step"] for m in map(json.loads, (empty / "metrics.jsonl").read_text().splitlines())][-1] == 2
