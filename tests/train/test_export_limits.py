"""An export that cannot be written (a file-size limit, a full disk) is a message naming the file and
the cause, with models/<name> as it was, never a raw traceback. The limit is real: the export runs in
a subprocess under RLIMIT_FSIZE, where the weights file is bigger than the limit."""
from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from compendium import paths
from protot.train import checkpoint, pretrained

SCRIPT = textwrap.dedent("""
    import resource, sys
    from pathlib import Path

    import torch

    from protot.train import pretrained

    target = Path(sys.argv[1])

    def export(run, name, **kw):  # the export's write step, on weights of 32 KiB
        half = torch.nn.Linear(128, 128).half()
        return pretrained._publish(target, half, name, lambda sha, size: {"weights_bytes": size}, {"arch": "x"})

    pretrained.export = export
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
    pretrained.main(["export", "some-run", target.name])
""")


def test_an_export_over_the_file_size_limit_is_a_message_and_changes_nothing(tmp_path):
    target = tmp_path / "models" / "tiny"
    target.mkdir(parents=True)
    (target / "MANIFEST.json").write_text('{"kind": "export"}\n')  # the model there before
    env = {"PYTHONPATH": str(paths.repo_root() / "lib"), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(target)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert ("export: error: could not export tiny: writing model.safetensors stopped (the file-size limit was "
            "reached (ulimit -f))") in out.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny"]              # no partial folder left
    assert [p.name for p in target.iterdir()] == ["MANIFEST.json"]
    assert (target / "MANIFEST.json").read_text() == '{"kind": "export"}\n'


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on the device"),
                                         (errno.EROFS, "the file system is read-only")])
def test_a_full_or_read_only_disk_at_export_names_the_file(tmp_path, monkeypatch, code, words):
    import os

    def fail(path, *a, **k):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: fail(self))
    target = tmp_path / "models" / "tiny"
    with pytest.raises(checkpoint.CheckpointWriteError, match=f"writing config.json stopped \\({words}\\)"):
        pretrained._publish(target, torch.nn.Linear(4, 4).half(), "tiny", lambda sha, size: {"weights_bytes": size},
                            {"arch": "x"})
    assert not target.exists() and list(target.parent.iterdir()) == []
