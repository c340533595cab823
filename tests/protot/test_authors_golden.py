"""The authors' mixer against golden numbers from running their code (tests/protot/golden).

Each case's parameters are loaded into ``AuthorsProtoMixer`` through ``load_authors_state`` (the
documented name map) and its output y and routing are compared:
- cases 00-07 within 1e-6 in the three torch forms of the op (chunk, recurrent, quadratic), the
  Triton kernels under the interpreter, and cached token-by-token decoding;
- case 08 (beta down to 0.3, 300 tokens) within 1e-6 with ``decay_arithmetic="authors-float32"``,
  while the exact equation (the default) is shown to depart from it there.
The golden y carries float32 rounding (their prefix runs in float32): ~5e-8, so 1e-6 is tight.

``test_each_element_reverted_fails`` changes one element of the authors' design at a time back to
the earlier reconstruction's choice and checks the golden comparison then fails.
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch

from protot.golden import cases, load_case
from protot.mixer_authors import exact_read, read_by_definition

GOLDEN = Path(__file__).parent / "golden"
CASES = cases()
EXACT_CASES = [c for c in CASES if not c.startswith("case08")]
TOL = 1e-6


def test_golden_files_intact():
    sums = dict(line.split()[::-1] for line in (GOLDEN / "SHA256SUMS").read_text().splitlines())
    assert len(CASES) == 9 and len(sums) == 19
    for name, digest in sums.items():
        assert hashlib.sha256((GOLDEN / name).read_bytes()).hexdigest() == digest, name


def run(mixer, x, *, form="chunk", backend="torch"):
    mixer.config.mixer_form, mixer.config.mixer_backend = form, backend
    with torch.no_grad():
        y, aux = mixer(x, output_gates=True)
    return y, aux


@pytest.mark.parametrize("case", EXACT_CASES)
@pytest.mark.parametrize("form", ["chunk", "recurrent", "quadratic"])
def test_torch_forms_match_golden(case, form):
    mixer, a, meta, unused = load_case(case)
    x = torch.from_numpy(a["x"])
    y, aux = run(mixer, x, form=form)
    assert (y - torch.from_numpy(a["y"])).abs().max().item() < TOL
    B, S, H, r = a["routing_Pi"].shape
    Pi = aux["write_gate"].reshape(B, S, H, r)
    assert (Pi - torch.from_numpy(a["routing_Pi"])).abs().max().item() < 1e-12
    if "routing_Pi_read" in a:
        Rd = aux["read_gate"].reshape(B, S, H, r)
        assert (Rd - torch.from_numpy(a["routing_Pi_read"])).abs().max().item() < 1e-12
    # what the authors' module holds and this layer never computes with: nothing else is left over
    allowed = {f"pre_r.{h}.weight" for h in range(H)} | {f"tau_read.{h}" for h in range(H)} | {"local_dw.dw.weight"}
    assert set(unused) <= allowed


@pytest.mark.parametrize("case", EXACT_CASES)
def test_cached_decoding_matches_golden(case):
    mixer, a, _, _ = load_case(case)
    x = torch.from_numpy(a["x"])
    cache: dict = {}
    outs = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            y_t, _ = mixer(x[:, t:t + 1], layer_cache=cache)
            outs.append(y_t)
    y = torch.cat(outs, 1)
    assert (y - torch.from_numpy(a["y"])).abs().max().item() < TOL
    # a prompt then token by token: the state hand-over in the middle of a sequence
    cache = {}
    with torch.no_grad():
        y0, _ = mixer(x[:, :20], layer_cache=cache)
        rest = [mixer(x[:, t:t + 1], layer_cache=cache)[0] for t in range(20, x.shape[1])]
    y = torch.cat([y0] + rest, 1)
    assert (y - torch.from_numpy(a["y"])).abs().max().item() < TOL


def test_case08_needs_the_authors_float32_arithmetic():
    case = [c for c in CASES if c.startswith("case08")][0]
    mixer, a, _, _ = load_case(case, decay_arithmetic="authors-float32")
    gold = torch.from_numpy(a["y"])
    y, _ = run(mixer, torch.from_numpy(a["x"]))
    assert (y - gold).abs().max().item() < TOL
    # the exact equation departs there (their float32 beta^t underflows; late tokens lose weight)
    exact, _, _, _ = load_case(case)
    y_exact, _ = run(exact, torch.from_numpy(a["x"]))
    assert (y_exact - gold).abs().max().item() > 0.1
    # and agrees on the first tokens, before beta^s nears 1e-12 for the smallest beta (0.3: s ~ 23)
    assert (y_exact - gold)[:, :15].abs().max().item() < TOL


# -- each element of the authors' design, reverted one at a time, breaks the golden comparison --------
def _revert_write_projection(m):          # a learned projection of the write query (identity -> random)
    orig = m.gates

    def gates(x):
        g = torch.Generator().manual_seed(0)
        W = torch.randn(x.shape[-1], x.shape[-1], generator=g, dtype=x.dtype) / math.sqrt(x.shape[-1])
        return orig(x @ W)
    m.gates = gates


def _revert_scaled_similarity(m):         # dot / sqrt(C) instead of the raw dot
    with torch.no_grad():
        m.prototypes.div_(math.sqrt(m.prototypes.shape[1]))


def _revert_learned_temperature(m):       # fixed temperature 1 instead of the learned tau
    with torch.no_grad():
        m.write_tau.fill_(1.0)


def _revert_current_token_included(m):    # read S_t / n_t (current token included), not the past only
    import protot.mixer_authors as ma
    m._orig_shift = ma.shift_by_one
    ma.shift_by_one = lambda x, pending=None: x


def _revert_alpha(m):                      # alpha fixed at 0.1
    with torch.no_grad():
        m.alpha.fill_(0.1)


def _revert_value_conv(m):                 # no value convolution (layers 0-1)
    m.value_conv = None


def _revert_heads_scaling(m):              # heads summed without 1 / sqrt(H)
    with torch.no_grad():
        m.alpha.mul_(math.sqrt(m.num_heads))


def _revert_read_routing(m):               # read with the write routing in a separate-routing layer
    m.shared_routing = True


REVERSIONS = {
    "write query projected": (_revert_write_projection, "case01_H1_L3_sepread"),
    "similarity scaled by 1/sqrt(C)": (_revert_scaled_similarity, "case00_H1_L3_shared"),
    "temperature fixed": (_revert_learned_temperature, "case00_H1_L3_shared"),
    "current token included": (_revert_current_token_included, "case00_H1_L3_shared"),
    "alpha fixed": (_revert_alpha, "case01_H1_L3_sepread"),
    "no value convolution": (_revert_value_conv, "case02_H1_L0_shared"),
    "heads not scaled by 1/sqrt(H)": (_revert_heads_scaling, "case05_H2_L3_sepread"),
    "read routing shared": (_revert_read_routing, "case01_H1_L3_sepread"),
}


@pytest.mark.parametrize("element", list(REVERSIONS))
def test_each_element_reverted_fails(element):
    import protot.mixer_authors as ma

    revert, case = REVERSIONS[element]
    mixer, a, _, _ = load_case(case)
    shift = ma.shift_by_one
    try:
        revert(mixer)
        y, _ = run(mixer, torch.from_numpy(a["x"]), form="quadratic")
    finally:
        ma.shift_by_one = shift
    assert (y - torch.from_numpy(a["y"])).abs().max().item() > 100 * TOL, element


def test_read_weights_and_floor_by_definition():
    """The (1 - beta) weights and the mass floor cancel in M = S / n unless the floor bites, which
    the golden cases never reach: here writes of ~1e-7 mass make n fall below 1e-6, so the op's read
    must equal the explicit sums with (1 - beta) beta^(t-1-s) weights and max(n, 1e-6), and differ
    from the same sums without the (1 - beta) factor."""
    g = torch.Generator().manual_seed(3)
    B, T, H, r, V = 2, 23, 2, 4, 5
    Pi = torch.softmax(torch.randn(B, T, H, r, generator=g, dtype=torch.float64) * 3, -1)
    Pi[:, :9] *= 1e-7                                                   # early writes far below the floor
    R = torch.softmax(torch.randn(B, T, H, r, generator=g, dtype=torch.float64), -1)
    v = torch.randn(B, T, H, V, generator=g, dtype=torch.float64)
    log_beta = torch.log(torch.rand(H, r, generator=g, dtype=torch.float64) * 0.5 + 0.45)
    ref = read_by_definition(Pi, R, v, log_beta)
    for form in ("chunk", "recurrent", "quadratic"):
        o, _ = exact_read(Pi, R, v, log_beta, form=form, chunk_size=8)
        assert (o - ref).abs().max().item() < 1e-12, form
    beta = log_beta.exp()
    o_plain, _ = exact_read(Pi / (1 - beta), R, v, log_beta, form="quadratic")   # weights beta^(t-s) only
    assert (o_plain - ref).abs().max().item() > 1e-3
    o_nofloor, _ = exact_read(Pi, R, v, log_beta, floor=1e-30, form="quadratic")
    assert (o_nofloor - ref).abs().max().item() > 1e-3
