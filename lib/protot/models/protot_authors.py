"""The authors' prototype mixer (``ProtoTConfig(variant="authors")``, the default ProtoT).

The maths is in ``protot.mixer_authors``; this module holds the parameters and the per-layer
choices of their language model (public code, commit 4262fc2; tests/protot/golden/README.md):

- layers below ``shared_routing_layers`` (their LM: layer 0) read with the write routing, and their
  write temperature starts at ``shared_routing_temperature`` (3.0); the other layers read through
  their own C x C projection W_r against the same prototypes, temperature starting at 1.0;
- the value convolution (kernel ``value_conv_size`` = 5) acts in the first ``value_conv_layers`` (2);
- every decay starts at ``decay_init`` (beta = 0.9), alpha at ``alpha_init`` (1.0); prototypes
  N(0, 1/C) with unit rows; W_r, W_v, U and the convolution take PyTorch's default initialisation.

Parameters (H heads, r = R / H hubs a head, V = max(8, value_width // H)) and the name each has in
the authors' module (the map the golden test loads through, ``AUTHORS_NAME_MAP``):

| ours                        | shape        | theirs (head h)          |
|-----------------------------|--------------|--------------------------|
| prototypes[h r:(h+1) r]     | (R, C)       | P_tables.h (r, C)        |
| read_proj[h]                | (H, C, C)    | pre_r.h.weight           |
| value_proj[h]               | (H, V, C)    | V.h.weight               |
| out_proj[h]                 | (H, C, V)    | U.h.weight               |
| decay_logit                 | (H, r)       | logit_beta               |
| write_tau[h], read_tau[h]   | (H,)         | tau.h, tau_read.h        |
| alpha[h]                    | (H,)         | alpha.h                  |
| value_conv                  | (V, 5)       | local_dw.dw.weight (V, 1, 5) |

Their module also holds parameters it never uses: a read projection and read temperature in the
shared-routing layer, and a value convolution in layers that do not convolve. We leave those out,
so our parameter count is theirs minus those (``unused_authors_parameters`` counts them).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from protot.mixer import clear_interventions
from protot.mixer_authors import authors_float32_read, causal_value_conv, exact_read, routing

__all__ = ["AuthorsProtoMixer", "AUTHORS_NAME_MAP", "load_authors_state", "unused_authors_parameters"]


class AuthorsProtoMixer(nn.Module):
    """One layer's mixer. Interventions as ``ProtoMixer``: ``mask_write`` / ``mask_read`` (hub indices,
    0..R-1, removed from their head's softmax), ``clamp_write`` / ``clamp_read`` ({k: value})."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        C, R, H = config.hidden_size, config.num_prototypes, config.num_heads
        if R % H:
            raise ValueError(f"invalid config field `num_heads`: num_prototypes ({R}) must divide by num_heads ({H})")
        self.num_heads, self.hubs = H, R // H
        self.value_heads_width = max(8, config.value_width // H)
        V = self.value_heads_width
        self.shared_routing = layer_idx < config.shared_routing_layers
        self.prototypes = nn.Parameter(torch.empty(R, C))                 # p_k, head h owns rows h r .. (h+1) r - 1
        self.read_proj = None if self.shared_routing else nn.Parameter(torch.empty(H, C, C))   # W_r per head
        self.value_proj = nn.Parameter(torch.empty(H, V, C))              # W_v per head
        self.out_proj = nn.Parameter(torch.empty(H, C, V))                # U per head
        self.decay_logit = nn.Parameter(torch.empty(H, self.hubs))        # theta: beta = sigmoid(theta)
        self.write_tau = nn.Parameter(torch.empty(H))
        self.read_tau = None if self.shared_routing else nn.Parameter(torch.empty(H))
        self.alpha = nn.Parameter(torch.empty(H))
        self.value_conv = (nn.Parameter(torch.empty(V, config.value_conv_size))
                           if layer_idx < config.value_conv_layers else None)
        # not decayed by the optimiser (their recipe: no weight decay on prototypes and decays)
        self.prototypes._no_weight_decay = True
        self.decay_logit._no_weight_decay = True
        clear_interventions(self)
        self.reset_mixer_parameters()

    @torch.no_grad()
    def reset_mixer_parameters(self):
        cfg = self.config
        C = cfg.hidden_size
        nn.init.normal_(self.prototypes, std=C ** -0.5)
        self.prototypes.div_(self.prototypes.norm(dim=1, keepdim=True).clamp_min(1e-6))
        # PyTorch's default for a Linear / Conv1d: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) per head
        for w in (self.read_proj, self.value_proj, self.out_proj, self.value_conv):
            if w is not None:
                bound = 1.0 / math.sqrt(w.shape[-1])
                nn.init.uniform_(w, -bound, bound)
        b = cfg.decay_init
        self.decay_logit.fill_(math.log(b) - math.log(1.0 - b))
        self.write_tau.fill_(cfg.shared_routing_temperature if self.shared_routing else cfg.write_temperature)
        if self.read_tau is not None:
            self.read_tau.fill_(cfg.read_temperature)
        self.alpha.fill_(cfg.alpha_init)

    # -- parametrisation ---------------------------------------------------------------------------
    def log_decay(self) -> torch.Tensor:
        """(H, r) log beta < 0."""
        return torch.nn.functional.logsigmoid(self.decay_logit)

    def half_lives(self) -> torch.Tensor:
        """(R,) half-life of each hub in tokens (ln 0.5 / ln beta)."""
        return (math.log(0.5) / self.log_decay()).reshape(-1)

    def _head_sets(self, which: set | dict, h: int):
        r = self.hubs
        if isinstance(which, dict):
            return {k - h * r: v for k, v in which.items() if h * r <= k < (h + 1) * r}
        return {k - h * r for k in which if h * r <= k < (h + 1) * r}

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, C) -> write routing Pi, read routing R: (B, T, H, r) each."""
        H, r = self.num_heads, self.hubs
        P = self.prototypes.view(H, r, -1)
        Pi, Rd = [], []
        for h in range(H):
            Pi.append(routing(x, P[h], self.write_tau[h], self._head_sets(self.mask_write, h),
                              self._head_sets(self.clamp_write, h)))
            if self.shared_routing:
                if self.mask_read or self.clamp_read:
                    Rd.append(routing(x, P[h], self.write_tau[h], self._head_sets(self.mask_read, h),
                                      self._head_sets(self.clamp_read, h)))
                else:
                    Rd.append(Pi[-1])
            else:
                Rd.append(routing(x @ self.read_proj[h].t(), P[h], self.read_tau[h],
                                  self._head_sets(self.mask_read, h), self._head_sets(self.clamp_read, h)))
        return torch.stack(Pi, dim=2), torch.stack(Rd, dim=2)

    # -- forward -----------------------------------------------------------------------------------
    def forward(self, x, layer_cache=None, output_gates: bool = False):
        """x: (B, T, C) (already RMS-normed) -> y: (B, T, C), aux (dict of gates/states or None)."""
        cfg = self.config
        B, T, C = x.shape
        H, r = self.num_heads, self.hubs
        Pi, Rd = self.gates(x)                                          # (B, T, H, r) each
        v = torch.einsum("btc,hvc->bthv", x, self.value_proj)           # (B, T, H, V)
        cache = layer_cache if layer_cache is not None else {}
        if self.value_conv is not None:
            conv, tail = causal_value_conv(v, self.value_conv, cache.get("value_conv"))
            v = 0.5 * v + 0.5 * conv
            if layer_cache is not None:
                layer_cache["value_conv"] = tail.detach()
        log_beta = self.log_decay().to(x.dtype)                         # (H, r)
        if cfg.decay_arithmetic == "authors-float32":
            if layer_cache is not None:
                raise NotImplementedError("decay_arithmetic='authors-float32' computes whole sequences only "
                                          "(beta^t uses absolute positions): use_cache=False, or 'exact'")
            o, state = authors_float32_read(Pi, Rd, v, log_beta, floor=cfg.mass_floor), None
        else:
            o, state = exact_read(Pi, Rd, v, log_beta, floor=cfg.mass_floor, state=cache.get("read"),
                                  form=cfg.mixer_form, backend=cfg.mixer_backend, chunk_size=cfg.chunk_size)
            if layer_cache is not None:
                layer_cache["read"] = state
        y = torch.einsum("bthv,hcv,h->btc", o, self.out_proj, self.alpha) / math.sqrt(H)   # (B, T, C)
        aux = None
        if output_gates:
            aux = {"write_gate": Pi.reshape(B, T, H * r), "read_gate": Rd.reshape(B, T, H * r),
                   "half_life": self.half_lives().detach(), "alpha": self.alpha.detach(),
                   "heads": H}
            if state is not None:   # S and n with the last token folded in: what the next token reads
                beta = log_beta.exp()
                k_last = state["pending_k"][:, 0]                       # (B, H, r)
                S = beta[..., None] * state["S"] + k_last[..., None] * state["pending_v"][:, 0, :, None, :]
                n = beta * state["n"] + k_last
                aux.update(state=S.reshape(B, H * r, -1), normaliser=n.reshape(B, H * r),
                           channel=(S / n.clamp_min(cfg.mass_floor)[..., None]).reshape(B, H * r, -1))
        return y, aux


#: our parameter name -> their name (``{h}``: the head; each head's slice of ours takes that head's
#: tensor of theirs); see the module docstring.
AUTHORS_NAME_MAP = {   # in the order load_authors_state takes them
    "prototypes": "P_tables.{h}", "value_proj": "V.{h}.weight", "out_proj": "U.{h}.weight",
    "write_tau": "tau.{h}", "alpha": "alpha.{h}", "read_proj": "pre_r.{h}.weight", "read_tau": "tau_read.{h}",
    "decay_logit": "logit_beta", "value_conv": "local_dw.dw.weight",
}


@torch.no_grad()
def load_authors_state(mixer: AuthorsProtoMixer, state: dict) -> list[str]:
    """Copy a state dict of the authors' mixer module (names as in their ``state_dict()``) into
    ``mixer`` through ``AUTHORS_NAME_MAP``. Returns the names of theirs that were not used (the
    parameters their module holds but this layer does not compute with). Raises KeyError naming a
    parameter of ours that the state does not provide, ValueError on a shape mismatch."""
    H, r = mixer.num_heads, mixer.hubs
    used = set()

    def take(name):
        if name not in state:
            raise KeyError(f"the authors' state has no {name!r} (needed by this layer)")
        used.add(name)
        return torch.as_tensor(state[name])

    def put(dst: torch.Tensor, src: torch.Tensor, what: str):
        if tuple(dst.shape) != tuple(src.shape):
            raise ValueError(f"{what}: shape {tuple(src.shape)} does not fit {tuple(dst.shape)}")
        dst.copy_(src.to(dst.dtype))

    def head_slice(ours: str, h: int) -> torch.Tensor:
        p = getattr(mixer, ours)
        return p[h * r:(h + 1) * r] if ours == "prototypes" else p[h]   # head h owns r rows of the prototypes

    per_head = [ours for ours, theirs in AUTHORS_NAME_MAP.items() if "{h}" in theirs]
    whole = [ours for ours in AUTHORS_NAME_MAP if ours not in per_head]   # decay_logit, value_conv
    for h in range(H):
        for ours in per_head:
            if getattr(mixer, ours) is not None:      # read_proj, read_tau: absent in shared-routing layers
                theirs = AUTHORS_NAME_MAP[ours].format(h=h)
                put(head_slice(ours, h), take(theirs), theirs)
    for ours in whole:                               # the whole tensor: no per-head name
        theirs = AUTHORS_NAME_MAP[ours]
        if getattr(mixer, ours) is not None:         # value_conv: only in the convolving layers
            src = take(theirs)
            put(getattr(mixer, ours), src[:, 0, :] if ours == "value_conv" else src, theirs)   # (V, 1, 5) -> (V, 5)
    return sorted(set(state) - used)


def unused_authors_parameters(config) -> int:
    """Parameters the authors' model holds but never computes with, at ``config`` (ours omits them):
    the read projection and read temperature of each shared-routing layer, and the value
    convolution of each layer without one."""
    C, H, L = config.hidden_size, config.num_heads, config.num_hidden_layers
    V = max(8, config.value_width // H)
    shared = min(config.shared_routing_layers, L)
    no_conv = L - min(config.value_conv_layers, L)
    return shared * H * (C * C + 1) + no_conv * V * config.value_conv_size
