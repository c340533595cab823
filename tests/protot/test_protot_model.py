"""ProtoT model, the "compendium-v1" variant (the earlier reconstruction; the authors' variant,
the default, is tested in test_authors_model.py and test_authors_golden.py): the mixer equals its definition, forms agree inside the model, decoding with the
recurrent cache equals full recomputation, config validation, gates, interventions, save/load; each
for the open choices (normalisation, s <= t or s < t, shared or separate keys, norm_eps = 0)."""

import itertools
import math
import os

import pytest
import torch

from protot.intervene import clamp_prototype, gates, mask_prototype, reinit_prototype
from protot.models import ProtoTConfig, ProtoTForCausalLM, build_model, count_parameters, matched_intermediate_size
from protot_testing import assert_close

VOCAB = 50


def tiny(dtype=torch.float64, seed=0, **overrides):
    torch.manual_seed(seed)
    kw = dict(variant="compendium-v1", alpha_init=1.0, init_half_life_min=0.5, init_half_life_max=40.0, chunk_size=8)
    kw.update(overrides)
    return build_model("protot", "tiny", VOCAB, **kw).to(dtype).eval()


def mixer_by_definition(mixer, x):
    """y_t = alpha W_o sum_k r_{t,k} c_{t,k}, c by explicit sums over s (loops; float64)."""
    cfg = mixer.config
    if mixer.conv is not None:
        x = mixer.conv(x)
    P = mixer.prototypes
    sim = (lambda a: torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(P, dim=-1).t()) \
        if cfg.similarity == "cosine" else (lambda a: a @ P.t() / math.sqrt(a.shape[-1]))
    a_w, a_r = (mixer.key_proj(x),) * 2 if cfg.shared_keys else (mixer.write_proj(x), mixer.read_proj(x))
    w = torch.softmax(sim(a_w) / cfg.write_temperature, -1)                   # (B, T, R)
    r = torch.softmax(sim(a_r) / cfg.read_temperature, -1)
    v = mixer.value_proj(x)                                                   # (B, T, Dv)
    beta = mixer.log_decay().exp()                                            # (R,)
    B, T, R = w.shape
    out = []
    for t in range(T):
        past = range(t + 1) if cfg.include_current else range(t)
        last = t if cfg.include_current else t - 1                            # reads S_t or S_{t-1}
        num = torch.zeros(B, R, v.shape[-1], dtype=x.dtype)
        den = torch.zeros(B, R, dtype=x.dtype)
        for s in past:
            f = beta ** (last - s)                                            # (R,)
            num = num + f[None, :, None] * w[:, s, :, None] * v[:, s, None, :]
            den = den + f[None] * (w[:, s] if cfg.normalization == "write_mass" else 1.0)
        if cfg.normalization == "none":
            c = num
        elif cfg.norm_eps == 0 and t == 0 and not cfg.include_current:
            c = torch.zeros_like(num)                                         # no past: defined as 0
        else:
            c = num / (den[..., None] + cfg.norm_eps)
        out.append(torch.einsum("br,brv->bv", r[:, t], c))
    return mixer.alpha * mixer.out_proj(torch.stack(out, 1))


@pytest.mark.parametrize("normalization,include_current,similarity,shared_keys,norm_eps", [
    ("write_mass", True, "dot", False, 1e-9), ("write_mass", False, "cosine", False, 1e-9),
    ("count", True, "cosine", False, 1e-9), ("count", False, "dot", False, 1e-9),
    ("none", True, "dot", False, 0.0), ("none", False, "dot", False, 0.0),
    ("write_mass", True, "dot", True, 1e-9), ("write_mass", False, "dot", True, 0.0),
    ("write_mass", False, "cosine", True, 1e-6), ("count", False, "dot", True, 0.0)])
def test_mixer_equals_definition(normalization, include_current, similarity, shared_keys, norm_eps):
    model = tiny(normalization=normalization, include_current=include_current, similarity=similarity,
                 shared_keys=shared_keys, write_temperature=0.7, read_temperature=1.9, norm_eps=norm_eps)
    x = torch.randn(2, 19, 64, dtype=torch.float64)
    for layer in (0, 1):   # layer 0 has the short convolution, layer 1 not (tiny: conv_layers = 2 -> override)
        mixer = model.layers[layer].mixer
        for form in ("chunk", "quadratic", "recurrent"):
            mixer.config.mixer_form = form
            y, _ = mixer(x)
            assert_close(f"layer {layer} {form}", mixer_by_definition(mixer, x), y, tol=1e-12)


FORM_CASES = [(n, inc, False, 1e-6) for n, inc in itertools.product(["write_mass", "count", "none"], [True, False])] + [
    ("write_mass", True, True, 1e-6), ("write_mass", False, True, 1e-6), ("count", False, True, 1e-6),
    ("write_mass", False, True, 0.0), ("write_mass", True, False, 0.0), ("count", False, False, 0.0)]


@pytest.mark.parametrize("normalization,include_current,shared_keys,norm_eps", FORM_CASES)
def test_forms_agree_in_model_with_grads(normalization, include_current, shared_keys, norm_eps):
    """Quadratic, recurrent and chunked forms: the same logits and the same gradient of every
    parameter (float64, ~1e-12), at odd sizes (R = 5, P = 9, d_v = 7, T = 29 with chunks of 8)."""
    ids = torch.randint(0, VOCAB, (2, 29), generator=torch.Generator().manual_seed(0))
    results = {}
    for form in ("quadratic", "recurrent", "chunk"):
        model = tiny(mixer_form=form, normalization=normalization, include_current=include_current, conv_layers=1,
                     shared_keys=shared_keys, norm_eps=norm_eps, num_prototypes=5, proto_dim=9, value_dim=7)
        out = model(ids, labels=ids, use_cache=False)
        out.loss.backward()
        results[form] = (out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    ref_logits, ref_grads = results["quadratic"]
    for form in ("recurrent", "chunk"):
        logits, grads = results[form]
        assert_close(f"{form} logits", ref_logits, logits, tol=1e-12)
        for name, g in ref_grads.items():
            assert torch.isfinite(g).all(), name
            assert_close(f"{form} d{name}", g, grads[name], tol=1e-12)
    # the mixer parameters do receive gradient (the comparison above is not vacuous)
    assert ref_grads["layers.1.mixer.decay_param"].abs().max() > 0
    assert ref_grads["layers.0.mixer.prototypes"].abs().max() > 0


@pytest.mark.parametrize("include_current,shared_keys,norm_eps", [
    (True, False, 1e-6), (False, False, 1e-6), (True, True, 1e-6), (False, True, 1e-6), (False, True, 0.0),
    (False, False, 0.0)])
def test_incremental_decoding_equals_full(include_current, shared_keys, norm_eps):
    model = tiny(include_current=include_current, shared_keys=shared_keys, norm_eps=norm_eps)
    ids = torch.randint(0, VOCAB, (2, 23), generator=torch.Generator().manual_seed(1))
    full = model(ids, use_cache=False).logits
    out = model(ids[:, :10], use_cache=True)                     # prefill 10 (chunked), then 3 + 1 + 1 ...
    logits, cache = [out.logits], out.cache
    out = model(ids[:, 10:13], cache=cache, use_cache=True)
    logits.append(out.logits)
    for t in range(13, 23):
        out = model(ids[:, t:t + 1], cache=cache, use_cache=True)
        logits.append(out.logits)
    assert cache.get_seq_length() == 23
    assert_close("logits", full, torch.cat(logits, 1), tol=1e-12)
    # the per-layer state is O(1): its size does not depend on the number of tokens seen
    sizes = {k: tuple(v.shape) for k, v in cache.layers[0].items() if torch.is_tensor(v)}
    assert sizes["S"] == (2, 1, 8, 32) and sizes["n"] == (2, 8) and sizes["conv"] == (2, 3, 64)


def test_generate_uses_cache_and_equals_recompute():
    model = tiny(dtype=torch.float32, seed=3, initializer_range=0.5)   # large init: varied greedy tokens
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    lengths = []
    hook = model.embed_tokens.register_forward_hook(lambda m, i, o: lengths.append(i[0].shape[1]))
    gen = model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)
    hook.remove()
    assert lengths == [12] + [1] * 9, lengths                # prefill once, then one token per step
    x = ids
    for _ in range(10):
        nxt = model(x, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        x = torch.cat([x, nxt], 1)
    assert torch.equal(gen, x)
    assert len(set(gen[0, 12:].tolist())) > 1                # not a degenerate constant continuation


def test_save_load_roundtrip(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM
    model = tiny(dtype=torch.float32, normalization="count", include_current=False, init_decays=[0.5] * 8)
    model.save_pretrained(tmp_path)
    assert os.path.exists(tmp_path / "model.safetensors")
    cfg = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(cfg, ProtoTConfig) and cfg.normalization == "count" and cfg.include_current is False
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, ProtoTForCausalLM)
    ids = torch.randint(0, VOCAB, (1, 17))
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1


@pytest.mark.parametrize("field,value", [
    ("num_prototypes", 0), ("write_temperature", 0.0), ("read_temperature", -1.0),
    ("init_decays", [0.5] * 7 + [1.0]), ("init_decays", [0.0] + [0.5] * 7), ("init_decays", [0.5] * 3),
    ("init_half_life_min", 0.0), ("normalization", "softmax"), ("mixer_form", "fft"), ("mixer_backend", "cuda"),
    ("similarity", "l2"), ("decay_parametrization", "tanh"), ("chunk_size", 0), ("value_dim", 0),
    ("hidden_size", 0), ("conv_size", 0), ("shared_keys", "yes"), ("include_current", 1)])
def test_invalid_config_names_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        build_model("protot", "tiny", VOCAB, **{field: value})


def test_build_model_errors_and_sizes():
    with pytest.raises(ValueError, match="deltanet.*llama.*mamba.*protot"):
        build_model("gpt", "tiny", VOCAB)
    with pytest.raises(ValueError, match="tiny.*small.*large"):
        build_model("protot", "huge", VOCAB)
    counts = {}
    for arch in ("protot", "llama", "deltanet", "mamba"):
        m = build_model(arch, "small", 1000)
        assert m.config.num_hidden_layers == 6 and m.config.hidden_size == 256
        assert m.config.max_position_embeddings == 256
        counts[arch] = count_parameters(m)
        assert counts[arch]["total"] == counts[arch]["embedding"] + counts[arch]["non_embedding"]
        # the baselines tie their head (counted once); ProtoT (the authors') has an untied head
        assert counts[arch]["embedding"] == (2 if arch == "protot" else 1) * 1000 * 256
    for arch in ("llama", "deltanet", "mamba"):                        # size-matched within 1%
        assert abs(counts[arch]["non_embedding"] / counts["protot"]["non_embedding"] - 1) < 0.01, counts


def test_gates_and_states_exposed():
    model = tiny(include_current=True)
    ids = torch.randint(0, VOCAB, (2, 13))
    g = gates(model, ids)
    assert len(g) == 2
    for layer in g:
        assert layer["write_gate"].shape == (2, 13, 8) and layer["read_gate"].shape == (2, 13, 8)
        assert_close("write sums to 1", torch.ones(2, 13, dtype=torch.float64), layer["write_gate"].sum(-1))
        assert layer["state"].shape == (2, 8, 32) and layer["channel"].shape == (2, 8, 32)
    # half-lives: geometric from init_half_life_min to max
    hl = model.half_lives()
    assert hl.shape == (2, 8)
    # (theta was stored in float32 at construction, before .double(): float32 tolerance)
    assert_close("half-life range", torch.tensor([0.5, 40.0], dtype=torch.float64), hl[0, [0, -1]], torch.float32)
    # the final state equals the one the cache carries
    out = model(ids, use_cache=True, output_gates=True)
    assert_close("state", out.cache.layers[1]["S"][:, 0], out.gates[1]["state"])


def test_exclusive_state_folds_in_last_token():
    """include_current=False: the exposed channel state is the full discounted mean up to T-1."""
    inc, exc = tiny(include_current=True), tiny(include_current=False)
    ids = torch.randint(0, VOCAB, (1, 11))
    gi = inc(ids, use_cache=False, output_gates=True).gates
    ge = exc(ids, use_cache=False, output_gates=True).gates
    # same weights, same layer-0 input (layer 1's input differs: the layer-0 outputs differ)
    assert torch.equal(gi[0]["write_gate"], ge[0]["write_gate"])
    assert_close("state", gi[0]["state"], ge[0]["state"])
    assert_close("channel", gi[0]["channel"], ge[0]["channel"])


def test_interventions_mask_clamp_reinit_restore():
    model = tiny()
    ids = torch.randint(0, VOCAB, (2, 15))
    base = model(ids).logits
    before = {n: p.clone() for n, p in model.named_parameters()}
    with mask_prototype(model, layer=1, k=3):
        g = gates(model, ids)[1]
        assert (g["write_gate"][..., 3] == 0).all() and (g["read_gate"][..., 3] == 0).all()
        assert_close("renormalised", torch.ones(2, 15, dtype=torch.float64), g["read_gate"].sum(-1))
        assert (model(ids).logits - base).abs().max() > 1e-6
    with clamp_prototype(model, layer=0, k=2, value=0.25, gate="write"):
        g = gates(model, ids)[0]
        assert (g["write_gate"][..., 2] == 0.25).all()
        assert not (g["read_gate"][..., 2] == 0.25).all()
    with reinit_prototype(model, layer=1, k=5, seed=7):
        assert not torch.equal(model.layers[1].mixer.prototypes[5], before["layers.1.mixer.prototypes"][5])
        assert (model(ids).logits - base).abs().max() > 1e-6
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert torch.equal(model(ids).logits, base)
    with pytest.raises(ValueError, match="prototype k"):
        with mask_prototype(model, layer=0, k=8):
            pass
    with pytest.raises(ValueError, match="layer"):
        with mask_prototype(model, layer=2, k=0):
            pass


def test_nnsight_wraps_and_traces():
    from nnsight import NNsight
    model = tiny(dtype=torch.float32)
    ids = torch.randint(0, VOCAB, (1, 9))
    wrapped = NNsight(model)
    with wrapped.trace(ids):
        wrapped.layers[1].mixer.read_proj.output[:] = 0.0       # uniform read gate: an intervention
        mixer_out = wrapped.layers[1].mixer.output[0].save()    # (in execution order, as nnsight asks)
        logits = wrapped.output.logits.save()
    assert mixer_out.shape == (1, 9, 64)
    plain = model(ids).logits
    assert (logits - plain).abs().max() > 1e-6
    with torch.no_grad():
        model.layers[1].mixer.read_proj.weight.zero_()
    assert_close("same intervention by hand", model(ids).logits, logits)


def test_long_sequence_model_finite_with_extreme_decays():
    """T = 8192 through a tiny ProtoT whose decays span 1e-6 .. 1 - 1e-6: loss and grads finite."""
    betas = [1e-6, 1e-3, 0.3, 0.9, 0.99, 0.999, 1 - 1e-4, 1 - 1e-6]
    model = tiny(dtype=torch.float32, init_decays=betas, chunk_size=64)
    model.train()
    ids = torch.randint(0, VOCAB, (1, 8192), generator=torch.Generator().manual_seed(0))
    out = model(ids, labels=ids, output_gates=True)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    for n, p in model.named_parameters():
        assert torch.isfinite(p.grad).all(), n
    assert_close("decays", torch.tensor(betas, dtype=torch.float64), model.layers[0].mixer.log_decay().exp().double(),
                 torch.float32)
    assert torch.isfinite(out.gates[1]["channel"]).all()


# -- shared keys, the exclusive write with norm_eps = 0, parameter matching ----------------------------
def test_shared_keys_one_key_projection():
    """shared_keys: one key projection W_k for both gates (no W_w, W_r), one d x P matrix fewer per
    layer; with equal temperatures the write and read gates are the same softmax."""
    sep, sh = tiny(), tiny(shared_keys=True)
    for m in sh.mixers():
        assert hasattr(m, "key_proj") and not hasattr(m, "write_proj") and not hasattr(m, "read_proj")
    for m in sep.mixers():
        assert not hasattr(m, "key_proj")
    cfg = sh.config
    diff = count_parameters(sep)["non_embedding"] - count_parameters(sh)["non_embedding"]
    assert diff == cfg.num_hidden_layers * cfg.hidden_size * cfg.proto_width
    same = tiny(shared_keys=True, write_temperature=0.8, read_temperature=0.8)
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(4))
    for layer in gates(same, ids):
        assert torch.equal(layer["write_gate"], layer["read_gate"])
    # different temperatures: the same ranking of prototypes, different sharpness
    g = gates(tiny(shared_keys=True, write_temperature=0.3, read_temperature=3.0), ids)[1]
    assert torch.equal(g["write_gate"].argmax(-1), g["read_gate"].argmax(-1))
    assert (g["write_gate"].max(-1).values >= g["read_gate"].max(-1).values).all()


def test_shared_keys_save_load_and_interventions(tmp_path):
    from transformers import AutoModelForCausalLM
    model = tiny(dtype=torch.float32, shared_keys=True, include_current=False, norm_eps=0.0)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.shared_keys is True and loaded.config.norm_eps == 0.0
    ids = torch.randint(0, VOCAB, (1, 17))
    base = model(ids).logits
    assert torch.equal(base, loaded(ids).logits)
    with mask_prototype(model, layer=1, k=3):      # a masked prototype has n = 0: reads 0, no NaN
        g = gates(model, ids)[1]
        assert (g["write_gate"][..., 3] == 0).all() and (g["read_gate"][..., 3] == 0).all()
        masked = model(ids).logits
        assert torch.isfinite(masked).all() and (masked - base).abs().max() > 1e-6
    assert torch.equal(model(ids).logits, base)


@pytest.mark.parametrize("shared_keys", [False, True])
@pytest.mark.parametrize("normalization", ["write_mass", "count"])
def test_exclusive_write_norm_eps_zero_position_zero(shared_keys, normalization):
    """include_current=False, norm_eps=0: position 0 has no past, every channel's normaliser is 0,
    and the mixer outputs exactly 0 there (not 0/0); logits, gates and gradients are finite, in
    float64 and float32, and position t >= 1 reads the exact prefix mean of s < t."""
    for dtype in (torch.float64, torch.float32):
        model = tiny(dtype=dtype, include_current=False, norm_eps=0.0, shared_keys=shared_keys,
                     normalization=normalization)
        model.train()
        ids = torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(5))
        captured = []
        hooks = [m.register_forward_hook(lambda mod, i, o, captured=captured: captured.append(o[0]))
                 for m in model.mixers()]
        out = model(ids, labels=ids, output_gates=True)
        for h in hooks:
            h.remove()
        for y in captured:
            assert (y[:, 0] == 0).all() and (y[:, 1:] != 0).any()
        out.loss.backward()
        assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
        for n, p in model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), n
        for layer in out.gates:
            assert torch.isfinite(layer["channel"]).all()
    # a one-token prompt, then decoding: the first step is the no-past case on the cached path
    model = tiny(include_current=False, norm_eps=0.0, shared_keys=shared_keys, normalization=normalization)
    full = model(ids, use_cache=False).logits
    out = model(ids[:, :1], use_cache=True)
    steps = [out.logits]
    for t in range(1, 11):
        out = model(ids[:, t:t + 1], cache=out.cache, use_cache=True)
        steps.append(out.logits)
    assert_close("decode from one token", full, torch.cat(steps, 1), tol=1e-12)


def test_norm_eps_moves_prefix_mean_only_where_mass_is_small():
    """norm_eps = 1e-6 against 0 (float64): the same model, logits differ, by at most what the
    relative bias eps / (n + eps) of each channel allows; with include_current=True n > 0 everywhere."""
    a, b = tiny(norm_eps=1e-6), tiny(norm_eps=0.0)
    ids = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(6))
    la, lb = a(ids).logits, b(ids).logits
    assert torch.isfinite(lb).all()
    assert 0 < (la - lb).abs().max() < 1e-4   # near-uniform gates at init: n >~ 1/R, bias eps/n <~ 1e-5


def test_matched_intermediate_size_for_shared_keys():
    """shared_keys drops L d P parameters; the matched SwiGLU width gives the LLaMA baseline's
    non-embedding count back (within one width step of 8: 3 d 8 L parameters)."""
    llama = count_parameters(build_model("llama", "small", VOCAB))["non_embedding"]
    for size, L, d in (("tiny", 2, 64), ("small", 6, 256)):
        width = matched_intermediate_size("protot", size, variant="compendium-v1", shared_keys=True)
        ref = count_parameters(build_model("llama", size, VOCAB))["non_embedding"]
        got = count_parameters(build_model("protot", size, VOCAB, variant="compendium-v1", shared_keys=True,
                                           intermediate_size=width))["non_embedding"]
        assert abs(got - ref) <= 3 * d * 8 * L // 2, (size, width, got, ref)
    width = matched_intermediate_size("protot", "small", variant="compendium-v1", shared_keys=True)
    got = count_parameters(build_model("protot", "small", VOCAB, variant="compendium-v1", shared_keys=True, intermediate_size=width))
    assert abs(got["non_embedding"] / llama - 1) < 1e-3


@pytest.mark.parametrize("shared_keys,include_current", [(False, True), (True, False)])
def test_batch_invariant_logits(shared_keys, include_current):
    """float32, torch forms: a sequence's logits and gates are bitwise the same alone and in a batch."""
    model = tiny(dtype=torch.float32, shared_keys=shared_keys, include_current=include_current)
    ids = torch.randint(0, VOCAB, (6, 37), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        full = model(ids, use_cache=False, output_gates=True)
        for b in range(6):
            one = model(ids[b:b + 1], use_cache=False, output_gates=True)
            assert torch.equal(full.logits[b:b + 1], one.logits)
            for g_full, g_one in zip(full.gates, one.gates):
                assert torch.equal(g_full["read_gate"][b:b + 1], g_one["read_gate"])


def test_an_exception_inside_an_intervention_leaves_no_edit_behind():
    model = tiny()
    ids = torch.randint(0, VOCAB, (2, 15))
    base = model(ids).logits
    for edit in (lambda: mask_prototype(model, layer=1, k=3), lambda: mask_prototype(model, layer=0, k=2, gate="read"),
                 lambda: clamp_prototype(model, layer=0, k=2, value=0.25, gate="write")):
        with pytest.raises(RuntimeError, match="inside the edit"):
            with edit():
                raise RuntimeError("inside the edit")
        for layer in model.layers:
            mixer = layer.mixer
            assert not mixer.mask_write and not mixer.mask_read and not mixer.clamp_write and not mixer.clamp_read
        assert torch.equal(model(ids).logits, base)
