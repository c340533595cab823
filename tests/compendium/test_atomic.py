from __future__ import annotations

import pytest

from compendium import atomic


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "result.json"
    atomic.write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_text("half written")
            raise RuntimeError("crash in the middle")
    assert target.read_text().strip().replace(" ", "").replace("\n", "") == '{"a":1}'
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_atomic_dir_replaces_a_folder_whole_or_not_at_all(tmp_path):
    target = tmp_path / "model"
    with atomic.atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("1")
    with atomic.atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]  # replaced, not merged
    with pytest.raises(RuntimeError):
        with atomic.atomic_dir(target) as tmp:
            (tmp / "c.txt").write_text("3")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporaries left


def test_written_files_get_normal_permissions(tmp_path):
    """mkstemp makes owner-only files; an atomic write must not leave figures or tables unreadable."""
    import os

    from compendium import atomic

    old = os.umask(0o022)
    try:
        new = atomic.write_text(tmp_path / "new.txt", "a")
        assert new.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("x")
        kept.chmod(0o640)
        atomic.write_text(kept, "b")
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
