"""Offline by default: importing this module (``import compendium`` does) sets the Hugging Face
libraries' offline and telemetry switches, unless the user already set them (an explicit value
wins, e.g. ``HF_HUB_OFFLINE=0`` to use the Hub). The libraries read them when first imported, so
this must be imported before them; ``compendium``, ``protot`` and ``accpp`` import it."""
from __future__ import annotations

import os

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_DATASETS_DISABLE_TELEMETRY": "1",
}


def apply_offline_defaults() -> None:
    """Set :data:`OFFLINE_DEFAULTS` in ``os.environ`` where not already set."""
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)


apply_offline_defaults()
