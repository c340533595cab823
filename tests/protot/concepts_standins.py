"""Stand-ins shared by the tests of protot.concepts and its neighbours (test_concepts_gates.py,
test_concepts_nulls.py, test_concepts_labels.py): tiny random ProtoT models, token blocks holding
the probe word, and gate statistics built from given gates. The tokenizer and the probe word's id
are fixtures (conftest.py)."""
from __future__ import annotations

import numpy as np
import torch

from protot import concepts as C
from protot.models import build_model

T = 32


def _model(vocab, seed=0, **overrides):
    """A tiny ProtoT of our earlier variant (compendium-v1; its write projection lets a test plant a prototype)."""
    torch.manual_seed(seed)
    return build_model("protot", "tiny", vocab, **{"variant": "compendium-v1", **overrides}).eval()


def _ids(n, women_id, seed=0, vocab_hi=400):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_hi, (n, T), generator=g)
    ids[:, 5] = women_id            # the probe word occurs in every row, twice
    ids[:, 20] = women_id
    return ids


def _stats_with(write: np.ndarray, ids: np.ndarray, vocab: int) -> C.GateStats:
    L, R = write.shape[0], write.shape[-1]
    return C.GateStats(ids=ids, write=write.astype(np.float32), read=write.astype(np.float32),
                       half_life=np.ones((L, R)), vocab_size=vocab)
