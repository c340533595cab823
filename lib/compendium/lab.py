"""The contents manager of ``make lab``: jupytext's pairing, plus the kernel's metadata.

Each notebook is a pair, a ``.py`` (percent format) and an ``.ipynb``, written together on every
save by jupytext's contents manager under the settings of ``notebooks/jupytext.toml`` (jupytext
looks for that file in the folder JupyterLab serves and the folders above it inside the served
tree, so it has to live in ``notebooks/``).

Neither half stores the notebook's ``kernelspec`` or ``language_info``: the ``.py`` keeps no
notebook metadata, and the ``.ipynb`` is written by ``jupytext --sync`` from the ``.py``. JupyterLab
adds both entries to a notebook that lacks them as soon as it opens it (and again when the kernel
reports its ``language_info``), which marks the notebook modified before anything was edited. So
this manager fills them in when a notebook is read from its ``.py``, with exactly what the server's default kernel
will report, and leaves them out again when a notebook is saved with those same values: opening a
notebook does not mark it modified, and saving an unchanged notebook rewrites both files as they
were. A notebook saved with another kernel keeps its own metadata.
"""
from __future__ import annotations

import copy
import functools
import os
import sys
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

#: The notebook metadata entries that describe the kernel rather than the notebook.
KERNEL_KEYS = ("kernelspec", "language_info")


def kernelspec_metadata(name: str, kernel_spec_manager=None) -> dict[str, str] | None:
    """The ``kernelspec`` entry JupyterLab writes for kernel ``name`` (None when it is not installed)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = kernel_spec_manager or KernelSpecManager()
    try:
        spec = ksm.get_kernel_spec(name)
    except NoSuchKernel:
        return None
    return {"name": name, "display_name": spec.display_name, "language": spec.language}


def _runs_this_interpreter(argv: list[str]) -> bool:
    """Whether a kernel command line starts ipykernel on the Python running this process."""
    if len(argv) < 3 or "ipykernel_launcher" not in argv:
        return False
    try:
        return os.path.samefile(argv[0], sys.executable)
    except OSError:
        return False


def language_info_metadata(name: str, kernel_spec_manager=None) -> dict[str, Any] | None:
    """The ``language_info`` that kernel ``name`` reports when it starts, or None where that cannot
    be known without starting it (a kernel that is not ipykernel on this very interpreter)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = kernel_spec_manager or KernelSpecManager()
    try:
        spec = ksm.get_kernel_spec(name)
    except NoSuchKernel:
        return None
    if not _runs_this_interpreter(spec.argv):
        return None
    return copy.deepcopy(_ipykernel_language_info())


@functools.lru_cache(maxsize=1)
def _ipykernel_language_info() -> dict[str, Any]:
    from ipykernel.ipkernel import IPythonKernel  # imported once: it brings IPython

    return dict(IPythonKernel.language_info)


def add_kernel_metadata(metadata: dict, defaults: dict[str, Any]) -> dict:
    """``metadata`` with each entry of ``defaults`` it lacks added (in place; returned)."""
    for key, value in defaults.items():
        if value is not None and key not in metadata:
            metadata[key] = copy.deepcopy(value)
    return metadata


def drop_kernel_metadata(metadata: dict, defaults: dict[str, Any]) -> dict:
    """``metadata`` without the entries equal to ``defaults`` (in place; returned): what
    :func:`add_kernel_metadata` would add back. Entries that differ are kept."""
    for key, value in defaults.items():
        if value is not None and metadata.get(key) == value:
            del metadata[key]
    return metadata


_Jupytext = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)


class PairedContentsManager(_Jupytext):
    """Jupytext's contents manager (over jupyter_server's default one) that supplies the default
    kernel's ``kernelspec`` and ``language_info`` on read and leaves them out on save."""

    def _default_kernel_name(self) -> str:
        kernel_manager = getattr(self.parent, "kernel_manager", None)
        return getattr(kernel_manager, "default_kernel_name", None) or "python3"

    def kernel_defaults(self) -> dict[str, Any]:
        name = self._default_kernel_name()
        ksm = getattr(self.parent, "kernel_spec_manager", None)
        return {"kernelspec": kernelspec_metadata(name, ksm), "language_info": language_info_metadata(name, ksm)}

    @staticmethod
    def _is_text_notebook(model: dict, path: str) -> bool:
        """A notebook read from or saved to a text file (a ``.py``), not a plain ``.ipynb``, whose
        stored kernel metadata stays as it is."""
        return (model.get("type") == "notebook" and model.get("content") is not None
                and not path.endswith(".ipynb"))

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if self._is_text_notebook(model, path):
            add_kernel_metadata(model["content"].setdefault("metadata", {}), self.kernel_defaults())
        return model

    async def save(self, model, path=""):
        if self._is_text_notebook(model, path):
            model = {**model, "content": copy.deepcopy(model["content"])}
            drop_kernel_metadata(model["content"].setdefault("metadata", {}), self.kernel_defaults())
        return await super().save(model, path)
