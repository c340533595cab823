"""Per-item results on disk, so that a resumed run does not redo the prompts it had finished.

A notebook that traces (or intervenes on) many prompts at the paper profile stores each prompt's
result as it is computed, one file per item, under its run folder::

    <run>/items/<notebook>/<kind>/<sha256 of the key>.json     {"key": ..., "value": ..., "sha256": ...}

``compendium run --resume RUN_DIR`` runs an interrupted notebook again in the same run folder
(:mod:`compendium.resume`); its loop then reads the items it finished and computes only the others.

The key of an item names everything its value depends on: the model (:func:`model_fingerprint`), the
:class:`accpp.trace.TraceConfig` (every field, :func:`config_key`), the code (:func:`code_fingerprint`:
the sources of the ``accpp`` modules that compute it, with the torch and transformers versions) and
the item itself (the prompt's token ids, its answers, ...). A file is used only when it parses, its
stored key equals the key asked for, and its checksum matches its content; anything else (cut
short, edited, another key) is ignored and recomputed, never trusted. Files are written atomically
(:mod:`compendium.atomic`): a stop mid-write leaves the old file or none.

Values are JSON; :meth:`ItemCache.get` returns the decoded stored value on a miss too, so a run that
computed an item and a run that read it back hold identical objects.

Where: :func:`for_run` gives the cache of the notebook the runner is executing (``compendium run``),
and None in an interactive kernel (JupyterLab, a plain ``python``) unless asked for
(``for_run(enabled=True)`` or ``COMPENDIUM_ITEM_CACHE=1``): outside runs a notebook recomputes as
before. The loops that use it: :func:`accpp.ioi.trace_many` and
:func:`accpp.intervention_summary.intervention_rows`.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from compendium import atomic

__all__ = ["ItemCache", "ItemCacheError", "for_run", "model_fingerprint", "config_key", "code_fingerprint",
           "digest", "base_key", "prompt_key", "circuit_digest", "ENV"]

log = logging.getLogger(__name__)

#: Set to 1 to use the run folder's item cache in an interactive kernel too.
ENV = "COMPENDIUM_ITEM_CACHE"
_FORMAT = 1


class ItemCacheError(OSError):
    """The cache folder cannot be made or written; the message names it."""


def _canonical(obj: Any) -> str:
    """Stable JSON (sorted keys, no spaces); floats written exactly (Python's shortest repr)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True)


def digest(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()


class ItemCache:
    """One file per item under ``folder``; see the module docstring.

    ``hits`` / ``misses`` count the items read back / computed by this object.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.hits = self.misses = 0
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            probe = atomic.write_text(self.folder / ".writable", "")
            probe.unlink()
        except OSError as err:
            raise ItemCacheError(f"the item cache folder {self.folder} cannot be written ({err.strerror or err}): give "
                                 "the run an output folder this user can write (compendium run --output)") from None

    def path(self, kind: str, key: dict) -> Path:
        if not kind or "/" in kind or kind.startswith("."):
            raise ValueError(f"kind must be a plain folder name, got {kind!r}")
        return self.folder / kind / f"{digest(key)}.json"

    def load(self, kind: str, key: dict) -> tuple[bool, Any]:
        """(True, value) when a valid file holds ``key``; (False, None) otherwise (missing, damaged,
        edited or another key: logged and left to be overwritten)."""
        path = self.path(kind, key)
        if not path.exists():
            return False, None
        why = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            data, why = None, f"unreadable ({err})"
        if why is None:
            if not isinstance(data, dict) or data.get("format") != _FORMAT or set(data) != {"format", "key", "value",
                                                                                          "sha256"}:
                why = "not an item file"
            elif data["key"] != json.loads(_canonical(key)):
                why = "it holds another key"
            elif data["sha256"] != digest([data["key"], data["value"]]):
                why = "its checksum does not match its content (edited)"
        if why is not None:
            log.warning("item cache: ignoring %s: %s; recomputing", path, why)
            return False, None
        return True, data["value"]

    def store(self, kind: str, key: dict, value: Any) -> Any:
        """Write ``value`` (JSON-serialisable) for ``key``, atomically; return the value as read back."""
        # the value's own key order is kept (a table's columns); raises TypeError on a value that is not JSON
        decoded = json.loads(json.dumps(value, allow_nan=True))
        key_json = json.loads(_canonical(key))
        record = dict(format=_FORMAT, key=key_json, value=decoded, sha256=digest([key_json, decoded]))
        path = self.path(kind, key)
        try:
            atomic.write_text(path, json.dumps(record, separators=(",", ":"), allow_nan=True))
        except OSError as err:
            raise ItemCacheError(f"cannot write the item file {path} ({err.strerror or err})") from None
        return decoded

    def get(self, kind: str, key: dict, compute: Callable[[], Any]) -> Any:
        """The stored value of ``key``, or ``compute()`` stored and read back (the same objects either way)."""
        found, value = self.load(kind, key)
        if found:
            self.hits += 1
            return value
        self.misses += 1
        return self.store(kind, key, compute())


def for_run(notebook: str | None = None, *, enabled: bool | None = None) -> ItemCache | None:
    """The item cache of ``notebook`` (default: the one the runner is executing) in this process's run
    folder, ``<run>/items/<notebook>/``; None where there is no runner (an interactive kernel) unless
    ``enabled`` (or ``$COMPENDIUM_ITEM_CACHE=1``). ``enabled=False``: always None."""
    from compendium import runs

    if enabled is None:
        enabled = runs.notebook_name() is not None or os.environ.get(ENV, "") == "1"
    if not enabled:
        return None
    name = notebook or runs.notebook_name() or "interactive"
    return ItemCache(runs.current() / "items" / name.replace("/", "__"))


def model_fingerprint(model, name: str | None = None) -> str:
    """sha256 naming the model's weights: the conversion record (``conversion.json``, which lists the
    sha256 of every converted file and is checked at each load) of an offline model ``name``, else
    the parameters' bytes; with the model's config and dtype either way."""
    import torch

    h = hashlib.sha256()
    h.update(model.config.to_json_string(use_diff=False).encode())
    first = next(model.parameters(), None)
    h.update(str(first.dtype if first is not None else None).encode())
    record = None
    if name is not None:
        from accpp import models

        if name in models.OFFLINE_MODELS:
            path = models.cached_folder(name) / models.MANIFEST
            record = path.read_bytes() if path.is_file() else None
    if record is not None:
        h.update(b"conversion:" + record)
    else:
        for pname, t in sorted(model.state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{pname}{tuple(t.shape)}{t.dtype}".encode())
            h.update((t.view(torch.uint8) if t.numel() else t).numpy().tobytes())
    return h.hexdigest()


def base_key(tracer, module: str) -> dict:
    """The part of an item's key shared by every prompt of a loop in ``module`` (its ``__name__``): the
    tracer's model and TraceConfig and the code of ``module`` (:func:`code_fingerprint`)."""
    return dict(model=model_fingerprint(tracer.model, tracer.name), config=config_key(tracer.config),
                code=code_fingerprint(module))


def prompt_key(prompt) -> dict:
    """Every field of a prompt dataclass (an IOIPrompt, a PronounPrompt: its token ids, answers, text,
    positions), as JSON values."""
    return json.loads(_canonical(asdict(prompt)))


def circuit_digest(circuit) -> str:
    """sha256 of a circuit's JSON without the trace's wall time (an input of items computed from it)."""
    return digest({k: v for k, v in circuit.to_json().items() if k != "seconds"})


def config_key(config) -> dict:
    """Every field of a dataclass config (a TraceConfig), as JSON values."""
    return json.loads(_canonical(asdict(config)))


def _accpp_imports(path: Path) -> set[str]:
    """The ``accpp`` modules a source file imports (anywhere in it, function bodies included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "accpp"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "accpp":
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # "from accpp import trace"
    return found


def code_fingerprint(*modules: str) -> str:
    """sha256 of the sources of ``modules`` and of every ``accpp`` module they import, transitively,
    with the torch and transformers versions (the code that computes an item)."""
    import torch
    import transformers

    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        try:
            spec = importlib.util.find_spec(mod) if mod.split(".")[0] == "accpp" else None
        except ImportError:  # "accpp.trace.TraceConfig": a name inside a module
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            if mod in modules:
                raise ValueError(f"{mod!r} is not an accpp module with a source file")
            continue  # "from accpp.x import name": the name is no module
        seen[mod] = Path(spec.origin)
        todo += sorted(_accpp_imports(seen[mod]))
    h = hashlib.sha256(f"torch {torch.__version__} transformers {transformers.__version__}".encode())
    for mod in sorted(seen):
        h.update(f"\n{mod}\n".encode() + seen[mod].read_bytes())
    return h.hexdigest()
