"""Exporting a model is atomic and non-destructive: an existing models/<name> is refused without
--force, and a failure at any point before the swap (size limit, manifest, verification) leaves
the existing model exactly as it was, loadable, with no temporary folder behind."""
import hashlib
import json

import pytest

from protot.train import checkpoint, pretrained
from protot.train.trainer import train

from train_helpers import run_cli, tiny_cfg


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def exported(tmp_path, monkeypatch, streams):
    models = tmp_path / "models"
    monkeypatch.setenv("PROTOT_MODELS", str(models))
    run = tmp_path / "run"
    train(tiny_cfg(), run, progress=False, threads=1, max_steps=4)
    pretrained.export(run, "tiny", eval_blocks=2)
    train(tiny_cfg(), run, resume=True, progress=False, threads=1, max_steps=8)  # a newer checkpoint
    return run, models / "tiny"


def _intact(folder, before):
    assert _digests(folder) == before
    m = pretrained.load(folder.name)
    assert m.manifest["steps"] == 4
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no .tmp-/.old- folders left


def test_existing_model_is_refused_without_force(exported, tracked_unchanged):
    run, folder = exported
    before = _digests(folder)
    with pytest.raises(FileExistsError, match="already exists; pass force=True"):
        pretrained.export(run, "tiny", eval_blocks=2)
    _intact(folder, before)
    r = run_cli(["export", str(run), "tiny", "--eval-blocks", "2"], module=("-m", "protot.train.pretrained"))
    assert r.returncode == 1 and "--force" in r.stderr, r.stderr[-2000:]
    _intact(folder, before)
    man = pretrained.export(run, "tiny", eval_blocks=2, force=True)
    assert man["steps"] == 8 and pretrained.load("tiny").manifest["steps"] == 8
    assert _digests(folder)["model.safetensors"] != before["model.safetensors"]


def test_size_limit_failure_leaves_the_existing_model(exported, monkeypatch, tracked_unchanged):
    run, folder = exported
    before = _digests(folder)
    monkeypatch.setattr(pretrained, "MAX_BYTES", 1000)
    with pytest.raises(ValueError, match="MiB"):
        pretrained.export(run, "tiny", eval_blocks=2, force=True)
    _intact(folder, before)


def test_failure_while_writing_the_manifest_leaves_the_existing_model(exported, monkeypatch, tracked_unchanged):
    run, folder = exported
    before = _digests(folder)

    def boom():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pretrained.provenance, "describe", boom)  # after the weights, before the manifest
    with pytest.raises(OSError, match="No space left"):
        pretrained.export(run, "tiny", eval_blocks=2, force=True)
    _intact(folder, before)


def test_failure_in_verification_or_swap_leaves_the_existing_model(exported, monkeypatch, tracked_unchanged):
    run, folder = exported
    before = _digests(folder)
    real_verify = pretrained._verify_folder

    def corrupting_verify(tmp, man, half):  # the written weights get damaged before they are checked
        w = tmp / "model.safetensors"
        blob = bytearray(w.read_bytes())
        blob[-3] ^= 0xFF
        w.write_bytes(bytes(blob))
        real_verify(tmp, man, half)

    monkeypatch.setattr(pretrained, "_verify_folder", corrupting_verify)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="sha256"):
        pretrained.export(run, "tiny", eval_blocks=2, force=True)
    _intact(folder, before)
    monkeypatch.setattr(pretrained, "_verify_folder", real_verify)

    real_rename = pretrained.os.rename
    calls = []

    def failing_second_rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # target moved aside; putting the new folder in place fails
            raise OSError(5, "Input/output error")
        return real_rename(src, dst)

    monkeypatch.setattr(pretrained.os, "rename", failing_second_rename)
    with pytest.raises(OSError, match="Input/output error"):
        pretrained.export(run, "tiny", eval_blocks=2, force=True)
    monkeypatch.setattr(pretrained.os, "rename", real_rename)
    _intact(folder, before)


def test_swap_cut_between_renames_is_recovered(exported, tracked_unchanged):
    run, folder = exported
    before = _digests(folder)
    folder.rename(folder.parent / ".old-tiny-12345")  # as if killed after moving the old folder aside
    man = pretrained.export(run, "tiny", eval_blocks=2, force=True)
    assert man["steps"] == 8
    assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny"]
    assert json.loads((folder / "MANIFEST.json").read_text())["weights_sha256"] != before["model.safetensors"]


def test_export_manifest_says_how_to_reproduce(exported, tracked_unchanged, monkeypatch):
    """The manifest names its run, whether the run had finished, and the two commands that make the
    model again; the training command parses back to the run's own configuration."""
    import shlex

    from protot.train import __main__ as cli
    from protot.train.config import TrainConfig

    run, folder = exported
    man = json.loads((folder / "MANIFEST.json").read_text())
    assert man["kind"] == "export" and man["steps"] == 4
    assert man["status"] == ("final" if man["planned_steps"] <= 4 else "partial")
    train_cmd, export_cmd = man["reproduce"]
    assert "reproduce_missing_fields" not in man
    args = shlex.split(train_cmd)
    assert args[:3] == ["python", "-m", "protot.train"] and "--resume" in args
    assert "--resume-from-snapshot" not in args
    parser = cli.build_parser()
    parsed = cli.config_from_args(parser.parse_args(args[3:]), parser)
    assert parsed.identity() == TrainConfig.from_dict(man["train_config"]).identity()
    assert shlex.split(export_cmd)[3:] == ["export", str(run), "tiny", "--eval-blocks", "2", "--force"]
    # the command evaluates as the export did: the CLI passes export() the recorded evaluation size
    seen = {}

    def capture(run, name, *, eval_blocks, force):
        seen.update(eval_blocks=eval_blocks, force=force)
        raise SystemExit(0)

    monkeypatch.setattr(pretrained, "export", capture)
    with pytest.raises(SystemExit):
        pretrained.main(shlex.split(export_cmd)[3:])
    assert seen == {"eval_blocks": man["data"]["eval_blocks_per_split"], "force": True} and seen["eval_blocks"] == 2


def test_a_damaged_manifest_is_named(tmp_path, monkeypatch):
    from compendium.atomic import JSONFileError
    from protot.train import pretrained

    folder = tmp_path / "models" / "cut"
    folder.mkdir(parents=True)
    (folder / "MANIFEST.json").write_text('{"name": "cut", "arch": ')     # cut short
    monkeypatch.setattr(pretrained, "models_dir", lambda: tmp_path / "models")
    with pytest.raises(JSONFileError, match="MANIFEST.json.*not valid JSON"):
        pretrained.manifest("cut")
