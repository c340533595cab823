"""Stand-ins shared by the tests of protot.concepts and its neighbours (test_concepts_gates.py,
test_concepts_nulls.py, test_concepts_labels.py): tiny random ProtoT models, token blocks holding
the probe word, gate statistics built from given gates, and a planted prototype. The tokenizer and
the probe word's id are fixtures (conftest.py)."""
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


def _plant_class(model, k: int, targets, strength: float = 12.0):
    """Layer 0 (no convolution) sees x_t = RMSNorm(E[token]). Give every token of ``targets`` the
    same embedding direction (dim 0, unused by every other token), make W_w the identity and point
    prototype ``k`` (only) along dim 0: its write gate is ~1 on those tokens and ~0 elsewhere."""
    mixer = model.layers[0].mixer
    with torch.no_grad():
        E = model.get_input_embeddings().weight
        E[:, 0] = 0.0
        for t in targets:
            E[t] = 0.0
            E[t, 0] = 1.0
        mixer.write_proj.weight.copy_(torch.eye(mixer.write_proj.weight.shape[0]))
        mixer.prototypes[:, 0] = 0.0
        mixer.prototypes[k] = 0.0
        mixer.prototypes[k, 0] = strength
