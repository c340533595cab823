"""The authors' ProtoT as a language model (the default variant): every row of the block, init and
recipe parts of the comparison with their code (tests/protot/golden/README.md), each checked so that
changing it back to the earlier reconstruction fails; the model's forms, decoding and save/load."""
from __future__ import annotations

import math

import pytest
import torch

from protot.models import (
    AuthorsProtoMixer, ProtoMixer, authors_ffn_width, build_model, config_from_dict, count_parameters,
)
from protot.models.protot_authors import unused_authors_parameters
from protot.train.config import PROFILES, recipe_model_overrides
from protot.train.trainer import build_model as train_build_model, lr_at, make_optimizer

VOCAB = 300


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return build_model("protot", "small", VOCAB)


def test_default_is_the_authors_variant(small):
    cfg = small.config
    assert cfg.variant == "authors"
    assert all(isinstance(m, AuthorsProtoMixer) for m in small.mixers())
    assert authors_ffn_width(256) == 688 and authors_ffn_width(512) == 1376 and cfg.intermediate_size == 688
    assert small.layers[0].ffn.gate_proj.out_features == 688


def test_per_layer_routing_and_value_convolution(small):
    mixers = small.mixers()
    assert mixers[0].shared_routing and mixers[0].read_proj is None
    assert all(not m.shared_routing and m.read_proj.shape == (1, 256, 256) for m in mixers[1:])
    assert mixers[0].write_tau.item() == 3.0 and all(m.write_tau.item() == 1.0 for m in mixers[1:])
    assert all(m.read_tau.item() == 1.0 for m in mixers[1:])
    assert [m.value_conv is not None for m in mixers] == [True, True, False, False, False, False]
    assert mixers[0].value_conv.shape == (128, 5) and mixers[0].value_proj.shape == (1, 128, 256)


def test_mixer_initialisation(small):
    for m in small.mixers():
        assert torch.allclose(torch.sigmoid(m.decay_logit), torch.full_like(m.decay_logit, 0.9))
        assert torch.allclose(m.prototypes.norm(dim=1), torch.ones(32))          # unit rows
        assert m.alpha.item() == 1.0
        # PyTorch's Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), std 1/sqrt(3 fan_in)
        for w in (m.value_proj, m.out_proj):
            bound = 1 / math.sqrt(w.shape[-1])
            assert w.abs().max() <= bound and abs(w.std().item() / (bound / math.sqrt(3)) - 1) < 0.05


def test_backbone_rows(small):
    cfg = small.config
    assert not cfg.tie_word_embeddings and small.lm_head.weight is not small.embed_tokens.weight
    assert cfg.rms_norm_eps is None and cfg.dropout == 0.1 and cfg.init_scheme == "torch-default"
    assert abs(small.embed_tokens.weight.std().item() - 0.02) < 0.001
    assert abs(small.lm_head.weight.std().item() - 0.02) < 0.001
    w = small.layers[2].ffn.gate_proj.weight                           # a Linear: PyTorch's default
    assert abs(w.std().item() * math.sqrt(3 * 256) - 1) < 0.05
    # RMSNorm's eps is the input dtype's machine epsilon (float32: 1.19e-7; eps 1e-6 would give 0.707)
    norm = small.layers[0].mixer_norm
    x = torch.full((1, 1, 256), 1e-3)
    want = 1e-3 / math.sqrt(1e-6 + torch.finfo(torch.float32).eps)      # 0.9453
    assert torch.allclose(norm(x), torch.full((1, 1, 256), want), rtol=1e-5)
    assert torch.allclose(norm(x.double()), torch.full((1, 1, 256), 1e-3 / math.sqrt(1e-6 + 2.0 ** -52),
                                                       dtype=torch.float64), rtol=1e-12)


def test_dropout_in_training_only(small):
    ids = torch.randint(0, VOCAB, (2, 17), generator=torch.Generator().manual_seed(1))
    small.eval()
    with torch.no_grad():
        a, b = small(ids).logits, small(ids).logits
    assert torch.equal(a, b)
    small.train()
    with torch.no_grad():
        c = small(ids).logits
    small.eval()
    assert (c - a).abs().max() > 1e-3
    assert sum(isinstance(mod, torch.nn.Dropout) for mod in small.modules()) == 1 + 6 * 3


def test_parameter_count_and_unused_authors_parameters(small):
    n = count_parameters(small)
    assert n["embedding"] == 2 * VOCAB * 256                            # untied head
    # per layer: prototypes, W_v, U, decays, tau, alpha (+ W_r and tau_r past layer 0, + conv in 0-1)
    per_layer = 32 * 256 + 2 * 128 * 256 + 32 + 1 + 1
    mixer = 6 * per_layer + 5 * (256 * 256 + 1) + 2 * 128 * 5
    ffn_norms = 6 * (3 * 256 * 688 + 2 * 256) + 256
    assert n["non_embedding"] == mixer + ffn_norms
    assert unused_authors_parameters(small.config) == (256 * 256 + 1) + 4 * 128 * 5


def test_baselines_matched_to_the_authors_protot():
    p = count_parameters(build_model("protot", "small", VOCAB))["non_embedding"]
    for arch in ("llama", "deltanet", "mamba"):
        b = count_parameters(build_model(arch, "small", VOCAB, **recipe_model_overrides("authors", arch)))
        assert abs(b["non_embedding"] / p - 1) < 0.01, arch
        assert b["embedding"] == 2 * VOCAB * 256                        # untied under the authors' recipe


@pytest.mark.parametrize("form", ["quadratic", "recurrent"])
def test_forms_and_decoding_agree_in_the_model(form):
    torch.manual_seed(2)
    m = build_model("protot", "tiny", VOCAB, chunk_size=8, num_heads=2).double().eval()
    ids = torch.randint(0, VOCAB, (2, 29), generator=torch.Generator().manual_seed(3))
    ref = m(ids, use_cache=False).logits
    for mixer in m.mixers():
        mixer.config.mixer_form = form
    assert (m(ids, use_cache=False).logits - ref).abs().max() < 1e-10
    for mixer in m.mixers():
        mixer.config.mixer_form = "chunk"
    out = m(ids[:, :11], use_cache=True)
    steps = [out.logits]
    cache = out.cache
    for t in range(11, 29):
        o = m(ids[:, t:t + 1], cache=cache, use_cache=True)
        cache = o.cache
        steps.append(o.logits)
    assert (torch.cat(steps, 1) - ref).abs().max() < 1e-10


def test_authors_float32_arithmetic_refuses_a_cache():
    m = build_model("protot", "tiny", VOCAB, decay_arithmetic="authors-float32").eval()
    ids = torch.randint(0, VOCAB, (1, 9))
    m(ids, use_cache=False)
    with pytest.raises(NotImplementedError, match="whole sequences"):
        m(ids, use_cache=True)


def test_stored_configs_load_as_the_variant_they_were_built_with():
    v1 = build_model("protot", "tiny", VOCAB, variant="compendium-v1")
    old = {k: v for k, v in v1.config.to_dict().items()
           if k not in ("variant", "dropout", "init_scheme", "num_heads")}   # a config.json from before
    back = config_from_dict("protot", old)
    assert back.variant == "compendium-v1" and back.dropout == 0.0 and back.tie_word_embeddings
    assert isinstance(type(v1)(back).mixers()[0], ProtoMixer)
    new = config_from_dict("protot", build_model("protot", "tiny", VOCAB).config.to_dict())
    assert new.variant == "authors" and new.dropout == 0.1


def test_authors_recipe():
    cfg = PROFILES["authors-small"]
    assert (cfg.lr, cfg.beta1, cfg.beta2, cfg.weight_decay, cfg.grad_clip) == (6e-4, 0.9, 0.999, 0.1, 0.0)
    assert (cfg.batch_size, cfg.context, cfg.seed, cfg.recipe, cfg.schedule) == (32, 256, 4257, "authors", "constant")
    assert cfg.tokens >= 12_000_000 and cfg.size == "small"
    assert all(lr_at(cfg, s) == 6e-4 for s in (0, 1, 700, cfg.steps - 1))
    tiny = cfg.replace(size="tiny", context=32, tokens=32 * 32 * 4)
    model = train_build_model(tiny, VOCAB)
    groups = make_optimizer(tiny, model).param_groups
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    for m in model.mixers():                                            # no decay on prototypes and decays
        assert id(m.prototypes) not in decayed and id(m.decay_logit) not in decayed
        assert id(m.value_proj) in decayed
    llama = train_build_model(tiny.replace(arch="llama"), VOCAB)
    assert llama.config.dropout == 0.1 and not llama.config.tie_word_embeddings
    assert llama.config.init_scheme == "torch-default" and llama.config.rms_norm_eps is None


def test_reinit_draws_a_prototype_as_each_variant_initialises_it(small):
    from protot.intervene import reinit_prototype

    authors = small.eval()
    mixer = next(m for n, m in authors.named_modules() if n.endswith("layers.2.mixer"))
    saved = mixer.prototypes[5].detach().clone()
    with reinit_prototype(authors, layer=2, k=5, seed=3):
        fresh = mixer.prototypes[5].detach().clone()
        assert abs(float(fresh.norm()) - 1.0) < 1e-5            # unit rows, as the authors initialise them
        assert not torch.equal(fresh, saved)
    assert torch.equal(mixer.prototypes[5], saved)
    with reinit_prototype(authors, layer=2, k=5, seed=3, std=2.0):
        assert float(mixer.prototypes[5].norm()) > 5.0             # a plain N(0, 4) draw: norm about 2 sqrt(C)
    torch.manual_seed(0)
    v1 = build_model("protot", "tiny", VOCAB, variant="compendium-v1")
    m1 = next(m for n, m in v1.named_modules() if n.endswith("layers.0.mixer"))
    with reinit_prototype(v1, layer=0, k=1, seed=3):
        n = float(m1.prototypes[1].norm())
        P = m1.prototypes.shape[1]
        assert 0.5 * P ** 0.5 < n < 1.5 * P ** 0.5                # N(0, 1): norm about sqrt(P)
