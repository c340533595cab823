"""protot.golden.decay_arithmetic_perplexity: a split's perplexity of a ProtoT (authors variant) under the
exact decay and under the authors' float32 beta^t arithmetic, on the first validation blocks of the
real stream with a tiny random model. The two agree where beta^t stays far above 1e-12 over a block,
part once it does not (low decays planted), and the model's settings are left as they were."""

import math

import pytest
import torch

from protot.golden import decay_arithmetic_perplexity
from protot.models import build_model
from protot.train import tokenizer as tk

CONTEXT = 128


def _tiny(**kw):
    torch.manual_seed(0)
    return build_model("protot", "tiny", tk.load_tokenizer().get_vocab_size(), **kw).eval()


def test_the_two_arithmetics_agree_at_high_decays_and_part_at_low_ones():
    model = _tiny()
    with torch.no_grad():
        for m in model.mixers():
            m.decay_logit.fill_(math.log(0.95 / 0.05))          # beta = 0.95: 0.95^127 = 1.5e-3
            m.alpha.fill_(5.0)                                  # the mixer's share of the logits made large
    high = decay_arithmetic_perplexity(model, "validation", CONTEXT, max_blocks=2)
    assert high["exact"]["tokens"] == high["authors-float32"]["tokens"] == 2 * (CONTEXT - 1)
    assert abs(high["exact"]["loss"] - high["authors-float32"]["loss"]) < 1e-5
    with torch.no_grad():
        for m in model.mixers():
            m.decay_logit.fill_(0.0)                             # beta = 0.5: beta^s < 1e-12 past s = 40
    low = decay_arithmetic_perplexity(model, "validation", CONTEXT, max_blocks=2)
    assert abs(low["exact"]["loss"] - low["authors-float32"]["loss"]) > 5e-3   # 0.016 seen
    assert low["exact"]["loss"] != pytest.approx(high["exact"]["loss"])     # the planted decays do act


def test_the_model_is_left_as_it_was_and_other_models_are_refused():
    model = _tiny()
    model.config.use_cache = True
    decay_arithmetic_perplexity(model, "validation", CONTEXT, max_blocks=1)
    assert model.config.decay_arithmetic == "exact" and model.config.use_cache is True
    assert all(m.config.decay_arithmetic == "exact" for m in model.mixers())
    with pytest.raises(ValueError, match="authors variant"):
        decay_arithmetic_perplexity(_tiny(variant="compendium-v1"), "validation", CONTEXT, max_blocks=1)
