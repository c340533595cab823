"""Helpers of the golden tests against the libraries (test_golden_baselines_*.py): small random models
whose every parameter matters, and one-entry changes of a name map."""

import torch

from protot.models import build_model

VOCAB = 53


def random_model(arch: str, seed: int = 0, **overrides):
    """A tiny float32 model of ``arch`` with PyTorch's default Linear initialisation and every parameter
    then moved by noise, so no two tensors of one shape hold the same values (norm weights are not all
    ones, Mamba's A_log rows differ, ...) and a swapped map entry or a changed setting shows."""
    torch.manual_seed(seed)
    model = build_model(arch, "tiny", overrides.pop("vocab_size", VOCAB), init_scheme="torch-default",
                        **overrides).float().eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * p.abs().mean().clamp(min=0.1) * torch.randn(p.shape, generator=gen))
    return model


def tokens(n: int, batch: int = 2, seed: int = 0, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def swapped(name_map: dict[str, str], a: str, b: str) -> dict[str, str]:
    """``name_map`` with the library names of entries ``a`` and ``b`` exchanged."""
    out = dict(name_map)
    out[a], out[b] = name_map[b], name_map[a]
    return out
