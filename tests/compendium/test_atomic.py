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
