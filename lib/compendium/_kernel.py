"""Run at the start of every kernel the runner launches (IPKernelApp.exec_lines), before the
notebook's first cell.

tqdm's notebook bar ignores ``TQDM_DISABLE`` (it passes ``disable=False`` itself), and a widget
bar would be saved into the executed notebook. With ``TQDM_DISABLE`` set, every tqdm entry point
(``tqdm``, ``tqdm.auto``, ``tqdm.notebook``, ``trange``) is replaced by a bar that is disabled.
"""
from __future__ import annotations

import os


def setup() -> None:
    if os.environ.get("TQDM_DISABLE", "").lower() not in ("1", "true", "yes"):
        return
    try:
        import tqdm
        import tqdm.auto
        import tqdm.autonotebook
        import tqdm.notebook
        import tqdm.std
    except ImportError:  # pragma: no cover
        return

    class QuietTqdm(tqdm.std.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    def trange(*args, **kwargs):
        return QuietTqdm(range(*args), **kwargs)

    for module in (tqdm, tqdm.std, tqdm.auto, tqdm.autonotebook, tqdm.notebook):
        for name in ("tqdm", "tqdm_notebook"):
            if hasattr(module, name):
                setattr(module, name, QuietTqdm)
        for name in ("trange", "tnrange"):
            if hasattr(module, name):
                setattr(module, name, trange)


KERNEL_SETUP = "__import__('compendium._kernel')._kernel.setup()"
