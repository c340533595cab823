"""The compendium machinery: paths, profiles, the claims ledger, run folders, the notebook
runner and publishing, the offline corpus loader, plotting and provenance.

Importing ``compendium`` has one side effect (in :mod:`compendium.offline`): it makes the Hugging Face libraries offline by
default, by setting these environment variables unless they are already set (a value the user
set explicitly wins, e.g. ``HF_HUB_OFFLINE=0`` to use the Hub):

    HF_HUB_OFFLINE=1  HF_DATASETS_OFFLINE=1  TRANSFORMERS_OFFLINE=1
    HF_HUB_DISABLE_TELEMETRY=1  HF_DATASETS_DISABLE_TELEMETRY=1

The Hugging Face libraries read these when they are first imported, so import ``compendium``
(or ``protot`` / ``accpp``, which import it) before them. Nothing else happens at import time
(no seeding, no downloads, no file writes).
"""
from compendium.offline import OFFLINE_DEFAULTS, apply_offline_defaults  # noqa: F401  (sets the defaults)
