"""protot.perf.flops: the FLOP convention of the training-utilisation benchmark, checked by hand."""
import pytest

from protot.perf.flops import mixer_flops_per_token, parameter_count, training_flops_per_token
from protot.models import build_model


def test_tied_embedding_counted_once():
    m = build_model("llama", "tiny", 97, max_position_embeddings=16)
    assert m.lm_head.weight is m.embed_tokens.weight
    assert parameter_count(m) == sum(p.numel() for p in m.parameters())   # parameters() dedups ties
    assert parameter_count(m) == sum(p.numel() for n, p in m.named_parameters() if n != "lm_head.weight")


def test_llama_and_protot_terms_by_hand():
    llama = build_model("llama", "small", 12288, max_position_embeddings=256)
    L, d = llama.config.num_hidden_layers, llama.config.hidden_size
    assert mixer_flops_per_token(llama.config, 256) == L * 2 * d * 257
    proto = build_model("protot", "small", 12288, max_position_embeddings=256, variant="compendium-v1", shared_keys=True,
                        intermediate_size=792)
    c = proto.config
    C, R, Dv = c.chunk_size, c.num_prototypes, c.value_width
    assert (C, R, Dv) == (32, 32, 128)
    assert mixer_flops_per_token(c, 256) == c.num_hidden_layers * (2 * 32 * (32 + 128) + 4 * 32 * 128)
    assert mixer_flops_per_token(c, 8) == c.num_hidden_layers * (2 * 8 * (32 + 128) + 4 * 32 * 128)
    n = parameter_count(proto)
    assert training_flops_per_token(proto, 256) == 6 * n + 3 * mixer_flops_per_token(c, 256)
    # the cpu-small ProtoT (7.64 M parameters): ~45.8 MFLOP per token from its weights
    assert 45e6 < 6 * n < 46.5e6


def test_refuses_unknown_family_and_bad_context():
    m = build_model("mamba", "tiny", 97, max_position_embeddings=16)
    with pytest.raises(ValueError, match="no mixer FLOP count"):
        training_flops_per_token(m, 16)
    with pytest.raises(ValueError, match="context"):
        mixer_flops_per_token(build_model("llama", "tiny", 97, max_position_embeddings=16).config, 0)
