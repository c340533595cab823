"""protot.circuits: the exact decomposition of gate logits into upstream atoms, the trace, the claim's measure,
for both ProtoT variants (compendium-v1 and the authors' mixer, protot.circuits_authors)."""

import numpy as np
import pytest
import torch

from protot import circuits, intervene
from protot.models import build_model

VOCAB = 40
TOL = 1e-12   # float64: the atoms and the model's logit differ only by summation order


def tiny(seed=0, **kw):
    """A tiny float64 ProtoT with gates sharp enough (tau 0.1) and mixers loud enough (alpha 0.7) that every
    component matters; 3 layers, the causal conv in layers 0 and 1 (the default conv_layers=2)."""
    torch.manual_seed(seed)
    kw = {"variant": "compendium-v1", "num_hidden_layers": 3, "write_temperature": 0.1, "read_temperature": 0.05, **kw}
    m = build_model("protot", "tiny", VOCAB, **kw).double().eval()
    with torch.no_grad():
        for mx in m.mixers():
            mx.alpha.fill_(0.7)
    return m


def tiny_authors(seed=0, **kw):
    """A tiny float64 ProtoT of the authors' variant (the default), 3 layers, with sharp routing (every
    temperature 0.1) and a loud mixer (alpha 0.7): layer 0 reads with its write routing, layers 1 and 2
    through W_r; the value convolution in layers 0 and 1 (the default value_conv_layers=2)."""
    torch.manual_seed(seed)
    m = build_model("protot", "tiny", VOCAB, **{"num_hidden_layers": 3, **kw}).double().eval()
    assert m.config.variant == "authors"
    with torch.no_grad():
        for mx in m.mixers():
            mx.alpha.fill_(0.7)
            mx.write_tau.fill_(0.1)
            if mx.read_tau is not None:
                mx.read_tau.fill_(0.1)
    return m


AUTHORS = {
    "authors": {},
    "authors, two heads": {"num_heads": 2},
    "authors, no shared routing, no value conv": {"shared_routing_layers": 0, "value_conv_layers": 0},
    "authors, shared routing everywhere, two heads": {"shared_routing_layers": 3, "num_heads": 2, "value_conv_layers": 3},
}


def model_of(variant, seed=0):
    return tiny_authors(seed, **AUTHORS[variant]) if variant in AUTHORS else tiny(seed, **VARIANTS[variant])


VARIANTS = {
    "separate keys": {},
    "shared keys": {"shared_keys": True},
    "exclusive, eps 0": {"include_current": False, "norm_eps": 0.0},
    "shared keys, exclusive": {"shared_keys": True, "include_current": False},
    "cosine, count": {"similarity": "cosine", "normalization": "count"},
    "no conv, no normalisation": {"conv_layers": 0, "normalization": "none"},
}


@pytest.mark.parametrize("variant", list(VARIANTS) + list(AUTHORS))
def test_atoms_sum_to_the_logit_and_softmax_gives_the_gate(variant):
    m = model_of(variant)
    ids = torch.randint(0, VOCAB, (3, 21), generator=torch.Generator().manual_seed(1))
    pos = torch.tensor([7, 0, 20])
    cap = circuits.capture(m, ids)
    ref = intervene.gates(m, ids)
    for layer in range(3):
        for gate in ("write", "read"):
            for centered in (False, True):
                d = circuits.decompose(m, cap, layer, gate, pos, centered=centered)
                assert d.logit.abs().max() > 1.0, "logits too small for the test to mean anything"
                assert d.error() <= TOL, (variant, layer, gate, centered, d.error())
                g = circuits.gate_softmax(m, layer, d.total())
                want = ref[layer][f"{gate}_gate"][torch.arange(3), pos]
                assert (g - want).abs().max() <= TOL, (variant, layer, gate, centered)
                # the number of atoms: (embedding + per earlier layer R channels and the MLP) per conv tap
                # (the authors' routing sees no convolution: one tap)
                conv = m.config.variant != "authors" and layer < m.config.conv_layers
                taps = m.config.conv_size if conv else 1
                assert d.contrib.shape == (3, taps * (1 + layer * (m.config.num_prototypes + 1)), m.config.num_prototypes)


def test_the_logit_is_the_models_own_and_dropping_any_component_breaks_the_sum():
    m = tiny()
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2))
    cap = circuits.capture(m, ids)
    d = circuits.decompose(m, cap, 2, "write", 9)
    # the model's logit, straight from its modules at the mixer input (no conv in layer 2)
    mx = m.layers[2].mixer
    a = mx.write_proj(cap.mixer_in[2][:, 9])
    want = a @ mx.prototypes.t() / mx.prototypes.shape[1] ** 0.5 / m.config.write_temperature
    assert (d.logit - want).abs().max() <= TOL
    for kind in ("embed", "channel", "mlp"):
        keep = torch.tensor((d.meta.kind != kind).to_numpy())
        assert (d.contrib[:, keep].sum(1) - d.logit).abs().max() > 1e-3, kind


def test_the_authors_logit_is_the_models_own_and_dropping_any_component_breaks_the_sum():
    """The write query is the normed token itself (no projection); the read query of a layer past the
    shared-routing one goes through W_r; both over the head's learned temperature (+ 2e-6)."""
    m = tiny_authors(num_heads=2)
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2))
    cap = circuits.capture(m, ids)
    for layer, gate in ((0, "write"), (0, "read"), (2, "write"), (2, "read")):
        mx = m.layers[layer].mixer
        x = cap.mixer_in[layer][:, 9]
        want = []
        for h in range(2):
            P = mx.prototypes[4 * h:4 * (h + 1)]
            side = "write" if gate == "write" or layer == 0 else "read"
            q = x if side == "write" else x @ mx.read_proj[h].t()
            tau = (mx.write_tau if side == "write" else mx.read_tau)[h]
            want.append(q @ P.t() / (tau.abs() + 2e-6))
        d = circuits.decompose(m, cap, layer, gate, 9)
        assert (d.logit - torch.cat(want, -1)).abs().max() <= TOL
        assert d.error() <= TOL
    d = circuits.decompose(m, cap, 2, "write", 9)
    for kind in ("embed", "channel", "mlp"):
        keep = torch.tensor((d.meta.kind != kind).to_numpy())
        assert (d.contrib[:, keep].sum(1) - d.logit).abs().max() > 1e-3, kind
    # centred within each head: the centred logits of a head sum to 0, the two heads' means differ
    dc = circuits.decompose(m, cap, 2, "write", 9, centered=True)
    assert dc.logit.reshape(2, 2, 4).sum(-1).abs().max() <= TOL
    assert (d.logit.reshape(2, 2, 4).mean(-1)).std() > 1e-3


@pytest.mark.parametrize("variant", ["separate keys", "exclusive, eps 0", "cosine, count"] + list(AUTHORS))
def test_channel_terms_sum_to_the_mixer_output_and_sources_to_the_atom(variant):
    m = model_of(variant)
    ids = torch.randint(0, VOCAB, (2, 18), generator=torch.Generator().manual_seed(3))
    cap = circuits.capture(m, ids)
    rows, pos = torch.tensor([0, 1]), torch.tensor([11, 17])
    for j in range(3):
        terms, _ = circuits.channel_terms(m, cap, j, rows, pos)
        assert (terms.sum(1) - cap.mixer_out[j][rows, pos]).abs().max() <= TOL
    # residual = embedding + mixer and MLP outputs of the earlier layers
    h = cap.embed + sum(cap.mixer_out[j] + cap.mlp_out[j] for j in range(2))
    assert (h - cap.block_in[2]).abs().max() <= TOL
    d = circuits.decompose(m, cap, 2, "read", pos, rows=rows, prototypes=[3])
    src = circuits.channel_sources(m, cap, 1, rows, pos, d.readout[:, 0, :, 0])   # (N, T, R)
    for k in (0, 5):
        atom = d.contrib[:, d.atom_index(f"L1.P{k}", 0), 0]
        assert (src[:, :, k].sum(1) - atom).abs().max() <= TOL
    if not getattr(m.config, "include_current", True) or m.config.variant == "authors":
        assert src[torch.arange(2), pos].abs().max() == 0   # s < t: the token's own value is not in its channels
    else:
        assert src[torch.arange(2), pos].abs().max() > 0


def test_conv_taps_before_position_zero_are_zero_and_later_ones_are_not():
    m = tiny()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(4))
    cap = circuits.capture(m, ids)
    d = circuits.decompose(m, cap, 1, "write", 1, prototypes=[0, 2])   # layer 1 has the conv (width 4)
    off = torch.tensor(d.meta.offset.to_numpy())
    assert d.contrib[:, off >= 2].abs().max() == 0                        # positions -1, -2: padding
    assert d.contrib[:, off == 1].abs().max() > 1e-3                      # position 0 reaches position 1
    assert d.error() <= TOL


@pytest.mark.parametrize("variant", ["separate keys", "authors", "authors, two heads"])
def test_masked_prototypes_and_float32_models(variant):
    m = model_of(variant)
    ids = torch.randint(0, VOCAB, (2, 14), generator=torch.Generator().manual_seed(5))
    with intervene.mask_prototype(m, 0, 3):          # upstream edits flow through the captured gates
        cap = circuits.capture(m, ids)
        d = circuits.decompose(m, cap, 2, "write", 13)
        assert d.error() <= TOL
        assert d.contrib[:, d.atom_index("L0.P3", 0)].abs().max() == 0   # nothing is written into a masked channel
    m32 = model_of(variant).float()
    d32 = circuits.decompose(m32, circuits.capture(m32, ids), 2, "write", 13)
    assert 1e-12 < d32.error() <= 1e-5                                    # float32 rounding, not float64 exactness


def test_bad_input_is_named():
    m = tiny()
    ids = torch.randint(0, VOCAB, (2, 8))
    cap = circuits.capture(m, ids)
    with pytest.raises(ValueError, match="layer"):
        circuits.decompose(m, cap, 3, "write", 0)
    with pytest.raises(ValueError, match="gate"):
        circuits.decompose(m, cap, 0, "value", 0)
    with pytest.raises(ValueError, match="positions must lie"):
        circuits.decompose(m, cap, 0, "write", 8)
    with pytest.raises(ValueError, match="prototypes"):
        circuits.decompose(m, cap, 0, "write", 0, prototypes=[8])
    with pytest.raises(ValueError, match="positions for"):
        circuits.decompose(m, cap, 0, "write", [1, 2, 3])
    with pytest.raises(ValueError, match="not a ProtoT"):
        circuits.capture(build_model("llama", "tiny", VOCAB), ids)


@pytest.mark.parametrize("variant", ["separate keys", "authors", "authors, two heads"])
def test_trace_table_graph_and_sources(variant):
    m = model_of(variant)
    ids = torch.randint(0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(6))
    tr = circuits.trace(m, ids, 12, layer=2, prototype=1, recurse=2, edges=4)
    t0 = tr.table[tr.table.level == 0]
    assert abs(t0["mean"].sum() - float(tr.decomposition.logit.mean())) <= TOL
    lvl1 = tr.table[tr.table.level == 1]
    assert lvl1.target.nunique() == 2
    # the recursed targets are the two channel atoms with the largest mean term
    top = t0[t0.kind == "channel"].sort_values("mean", ascending=False).atom.head(2).tolist()
    assert sorted(lvl1.target.unique()) == sorted(top)
    # each level-1 target's atoms sum to that channel's centred read logit at the token
    cap = circuits.capture(m, ids)
    for tgt in top:
        j, k = (int(x[1:]) for x in tgt.split("@")[0].split("."))
        d = circuits.decompose(m, cap, j, "read", 12, prototypes=[k], centered=True)
        assert abs(lvl1[lvl1.target == tgt]["mean"].sum() - float(d.logit.mean())) <= TOL
    # sources of a traced channel sum (per row) to its level-0 atom
    for atom in top:
        per_row = tr.sources[tr.sources.channel_atom == atom].groupby("row").term.sum().to_numpy()
        want = tr.decomposition.contrib[:, tr.decomposition.atom_index(atom.split("@")[0], 0), 0].numpy()
        np.testing.assert_allclose(per_row, want, rtol=0, atol=TOL)
    G = tr.graph
    assert tr.target in G and G.in_degree(tr.target) == 4
    for tgt in top:                                  # every traced channel is a node with its attributes
        atoms = int((lvl1.target == tgt).sum())      # (the authors' layer 0 reads from the embedding alone)
        assert G.nodes[tgt]["kind"] == "channel" and G.in_degree(tgt) == min(4, atoms)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    circuits.draw_trace(tr, ax)
    plt.close(fig)


# -- the claim's measure: it can fail, and it can hold ---------------------------------------------------
class WordTokenizer:
    """Token i is the string 't{i}'; the probed word is one token."""

    def encode(self, text, add_special_tokens=False):
        return [int(text.strip()[1:])]

    def decode(self, ids):
        return "".join(f"t{int(i)}" for i in ids)


def _stream(word_id, n=6000, every=37, seed=0):
    s = np.random.default_rng(seed).integers(0, VOCAB, size=n)
    s[s == word_id] = (word_id + 1) % VOCAB
    s[every::every] = word_id
    return s


def _steer_word_embedding(m, word_id, layer, k, scale):
    """Set the word's embedding to its old value minus its part along the tap-0 readout of the centred
    write logit of (layer, k), plus ``scale`` times that (unit) direction."""
    from protot import circuits_authors

    mx, norm = m.layers[layer].mixer, m.layers[layer].mixer_norm
    if circuits_authors.is_authors(mx):   # the normed token meets the prototypes: no projection, no conv
        u = circuits_authors.readout_vectors(mx, "write", centered=True)[:, k].to(norm.weight.dtype)
        tap = norm.weight.detach()
    else:
        W = mx.write_proj.weight.detach()
        P = mx.prototypes.detach()
        u = W.t() @ (P[k] - P.mean(0))
        tap = norm.weight.detach() * (mx.conv.weight[:, -1].detach() if mx.conv is not None else 1.0)
    r = tap * u
    r = r / r.norm()
    with torch.no_grad():
        e = m.embed_tokens.weight[word_id]
        m.embed_tokens.weight[word_id] = e - (e @ r) * r + scale * r


@pytest.mark.parametrize("variant", ["separate keys", "authors"])
def test_measure_fails_when_the_embedding_does_not_carry_the_decision(variant):
    from compendium import claims

    word = 7
    m = model_of(variant, seed=3)
    _steer_word_embedding(m, word, 2, 1, 0.0)       # the word's own embedding is blind to the decision
    meas = circuits.measure_write_circuit(m, WordTokenizer(), _stream(word), 2, 1, word="t7", context=32,
                                          null_blocks=16, n_boot=200)
    v = meas.values
    assert v["decomposition_error"] <= 1e-9 and v["n_occurrences"] >= 20
    # zero up to rounding: the atom's rounding (~1e-16 of the logit) over the positive attribution,
    # which on some occurrences is a small part of the logit
    assert v["embed_share"] <= 1e-9
    claim = claims.get_claim("protot/women-write-circuit")
    assert not claim.check.main.test(v["embed_share"])
    status, *_ = claims.evaluate(claim, v, "cpu", meas.evidence)   # the margin's interval ends: values and evidence
    assert status != "holds"


@pytest.mark.parametrize("variant, push", [("separate keys", 0.5), ("authors", 5.0)])
def test_measure_holds_when_the_embedding_carries_the_decision(variant, push):
    from compendium import claims

    word = 7
    m = model_of(variant, seed=3)
    # a large push along the decision, from the embedding alone (how large depends on the size of the
    # other atoms of each tiny model: in the authors' one a push of 0.5 leaves the embedding about 0.76)
    _steer_word_embedding(m, word, 2, 1, push)
    meas = circuits.measure_write_circuit(m, WordTokenizer(), _stream(word), 2, 1, word="t7", context=32,
                                          null_blocks=16, n_boot=200)
    v = meas.values
    assert v["embed_share"] > 0.9 and v["write_selectivity"] > 2
    status, *_ = claims.evaluate(claims.get_claim("protot/women-write-circuit"), v, "cpu", meas.evidence)
    assert status == "holds", (status, v)
    # the intervals, recomputed from the per-position shares: the share's over occurrences, the margin's over
    # occurrences and null positions drawn each on their own (occurrences first), both with the measure's seed
    sh = meas.tables["circuit_embed_shares"]
    sw, sn = (sh[sh.group == g].embed_share.to_numpy() for g in ("word", "null"))
    assert v["n_occurrences"] == len(sw) and v["embed_share"] == pytest.approx(sw.mean(), rel=1e-12)
    idx = np.random.default_rng(0).integers(0, len(sw), size=(200, len(sw)))
    assert (v["embed_share_ci_low"], v["embed_share_ci_high"]) == pytest.approx(
        tuple(np.quantile(sw[idx].mean(1), [0.025, 0.975])), rel=1e-12)
    r = np.random.default_rng(0)
    iw, inull = r.integers(0, len(sw), size=(200, len(sw))), r.integers(0, len(sn), size=(200, len(sn)))
    assert v["embed_share_margin"] == pytest.approx(sw.mean() - sn.mean(), rel=1e-12)
    assert (v["embed_share_margin_ci_low"], v["embed_share_margin_ci_high"]) == pytest.approx(
        tuple(np.quantile(sw[iw].mean(1) - sn[inull].mean(1), [0.025, 0.975])), rel=1e-12)
    # a share whose interval straddles 0.5 is inconclusive; one wholly below it does not hold
    claim = claims.get_claim("protot/women-write-circuit")
    straddle = {**v, "embed_share": 0.52, "embed_share_ci_low": 0.45, "embed_share_ci_high": 0.6}
    assert claims.evaluate(claim, straddle, "cpu")[0] == claims.INCONCLUSIVE
    below = {**v, "embed_share": 0.3, "embed_share_ci_low": 0.2, "embed_share_ci_high": 0.45}
    assert claims.evaluate(claim, below, "cpu")[0] == claims.DOES_NOT_HOLD
    few = {**v, "n_occurrences": 19}
    status, _, _, reason = claims.evaluate(claim, few, "cpu")
    assert status == claims.INCONCLUSIVE and "min-units" in reason
