"""Tiny randomly initialised models of every supported family (built from configs, no download).

Weights are re-drawn larger than Hugging Face's init (std 0.02 gives near-uniform attention),
norm gains and biases are perturbed, and everything is float64 so that exactness tests can use
~1e-8 relative tolerances.
"""
from __future__ import annotations

import torch

__all__ = ["FAMILIES", "tiny_model"]

FAMILIES = ("llama", "gemma3_text", "gemma2", "gpt2", "gpt_neox")


def _config(family: str):
    import transformers as tf

    common = dict(vocab_size=61, attn_implementation="eager")
    if family == "llama":
        return tf.LlamaConfig(hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=64, **common)
    if family == "gemma3_text":
        return tf.Gemma3TextConfig(hidden_size=40, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=1, head_dim=12, sliding_window=5, query_pre_attn_scalar=12,
                                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                   max_position_embeddings=64, **common)
    if family == "gemma2":
        return tf.Gemma2Config(hidden_size=40, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=12, sliding_window=5, query_pre_attn_scalar=12,
                               attn_logit_softcapping=3.0, final_logit_softcapping=30.0,
                               layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                               max_position_embeddings=64, **common)
    if family == "gpt2":
        return tf.GPT2Config(n_embd=48, n_layer=3, n_head=4, n_positions=64, **common)
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                rotary_pct=0.25, max_position_embeddings=64, use_parallel_residual=True,
                                **common)
    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")


def tiny_model(family: str, seed: int = 0):
    """A float64, eval-mode, randomly initialised causal LM of ``family`` (3 layers)."""
    import transformers as tf

    cfg = _config(family)
    if family == "gpt_neox":
        rp = dict(getattr(cfg, "rope_parameters", None) or {})
        rp["partial_rotary_factor"] = 0.25
        cfg.rope_parameters = rp
    gen = torch.Generator().manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(cfg).to(torch.float64).eval()
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * (1.5 / p.shape[-1] ** 0.5))
            elif "norm" in name or "ln" in name:
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    model.config._attn_implementation = "eager"
    return model


def random_prompt(n: int = 11, vocab: int = 61, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=gen)


def _eager_f64(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Eager attention with the softmax in the inputs' dtype (HF's upcasts only to float32)."""
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scaling = module.head_dim ** -0.5 if scaling is None else scaling
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        w = softcap * torch.tanh(w / softcap)
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _rms_f64(self, x):
    w = self.weight
    eps = getattr(self, "eps", None) or self.variance_epsilon
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1.0 + w) if type(self).__name__.startswith("Gemma") else w * y


class float64_exact:
    """Context manager: make Hugging Face's RMSNorm and eager attention keep float64.

    HF computes RMSNorm and the eager softmax in float32 even for float64 models (same math,
    less precision), which would cap exactness tests at ~1e-7. Inside this context they run
    in the input dtype; float32 models behave exactly as before.
    """

    _targets = (("llama", "LlamaRMSNorm"), ("gemma2", "Gemma2RMSNorm"), ("gemma3", "Gemma3RMSNorm"),
                ("gpt_neox", None))

    def __enter__(self):
        import importlib

        self._saved = []
        for mod_name, norm in self._targets:
            mod = importlib.import_module(f"transformers.models.{mod_name}.modeling_{mod_name}")
            self._saved.append((mod, "eager_attention_forward", mod.eager_attention_forward))
            mod.eager_attention_forward = _eager_f64
            if norm is not None:
                cls = getattr(mod, norm)
                self._saved.append((cls, "forward", cls.forward))
                cls.forward = _rms_f64
        return self

    def __exit__(self, *exc):
        for obj, name, value in reversed(self._saved):
            setattr(obj, name, value)
        return False
