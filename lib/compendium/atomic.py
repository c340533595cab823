"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

A reader (or a crash) never sees a half-written file: either the old content or the new.
:func:`read_json` is the matching reader: a file that is not valid JSON raises an error naming it.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        # mkstemp creates the file readable by its owner only; give it the permissions of a file
        # created normally (0666 less the umask), or of the file it replaces
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask()
        os.chmod(tmp_path, mode)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder next to ``path``; on success it replaces ``path`` (a folder) by a
    rename, so a reader sees the old folder or the complete new one, never a partial one."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


class JSONFileError(ValueError):
    """A JSON file cannot be read or parsed; the message names the file."""


def read_json(path: str | os.PathLike, *, kind: type | None = dict) -> Any:
    """The parsed content of the JSON file ``path``; :class:`JSONFileError` naming the file (relative
    to the repository when inside it) when it cannot be read, is not valid JSON (truncated, say), or
    is not of type ``kind`` (None: any)."""
    from compendium.paths import display

    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise JSONFileError(f"{display(path)}: not valid JSON ({exc}); the file is damaged or was cut short") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JSONFileError(f"{display(path)}: cannot be read ({exc})") from None
    if kind is not None and not isinstance(value, kind):
        raise JSONFileError(f"{display(path)}: expected a JSON {'object' if kind is dict else kind.__name__}, "
                            f"got {type(value).__name__}")
    return value


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Swap the paths ``a`` and ``b`` (two folders on one filesystem) in one atomic step, Linux's
    ``renameat2(RENAME_EXCHANGE)``: every reader sees either both before or both after. False, with
    nothing changed, where the system or filesystem cannot (then two renames are the fallback)."""
    import ctypes
    import errno

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, f"cannot exchange {a} and {b}: {os.strerror(err)}")


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a folder's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
