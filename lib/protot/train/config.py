"""Training configurations: one frozen dataclass, named profiles, each with its token budget.

| profile      | model                      | context | batch (seqs) | tokens      | meant for            |
|--------------|----------------------------|---------|--------------|-------------|----------------------|
| smoke        | tiny (2 layers, 128 hidden)| 128     | 8            | 0.2 M       | CPU, about a minute  |
| cpu-hour     | 4 layers, 256 hidden       | 256     | 8            | 2.0 M       | 1 CPU core, ~an hour |
| paper-small  | small (6 layers, 256)      | 256     | 128          | 250 M       | GPU (paper's small)  |
| paper-large  | large (12 layers, 512)     | 256     | 128          | 1 B         | GPU (paper's large)  |

The paper's small setting (6 layers, hidden 256, context 256, 250 M FineWeb-Edu tokens) is
confirmed; its batch size, learning rate and the large setting's context and token budget are not
in what we could read, so those values are our choices (marked below). Our offline corpus has
25 M training tokens, so the paper profiles repeat it (~10 and ~40 epochs); with FineWeb-Edu
streaming (online users) they would not.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

ARCHS = ("protot", "llama", "deltanet", "mamba", "hf-llama")
DATA_SOURCES = ("corpus", "fineweb-edu")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (and must match on resume).

    ``batch_size`` is the global number of sequences per optimiser step, split evenly over
    ``grad_accum`` micro-steps and the DDP processes, so a run's mathematics do not depend on how
    many processes run it. ``tokens`` is the budget: steps = tokens // (batch_size * context).
    """

    arch: str = "protot"
    size: str = "tiny"
    #: Extra keyword arguments for ``protot.models.build_model`` as sorted (name, value) pairs.
    model_overrides: tuple = ()
    context: int = 128
    batch_size: int = 8
    grad_accum: int = 1
    tokens: int = 204_800
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0
    lang: str = "en"
    #: "corpus" (the offline corpus in data/) or "fineweb-edu" (streamed from the Hub; online only).
    data: str = "corpus"
    eval_every: int = 100
    eval_blocks: int = 64
    ckpt_every: int = 100
    keep_checkpoints: int = 2
    #: Fields the checkpoint does not pin (changing them on resume is allowed).
    RESUMABLE_CHANGES = ("eval_every", "eval_blocks", "ckpt_every", "keep_checkpoints")

    def __post_init__(self):
        if self.data not in DATA_SOURCES:
            raise ValueError(f"unknown data source {self.data!r}; valid: {', '.join(DATA_SOURCES)}")
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; valid: {', '.join(ARCHS)}")
        if self.batch_size % self.grad_accum:
            raise ValueError("batch_size must be a multiple of grad_accum")
        if self.steps < 1:
            raise ValueError("the token budget is smaller than one optimiser step")
        object.__setattr__(self, "model_overrides", tuple(sorted(tuple(p) for p in self.model_overrides)))

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.context

    @property
    def steps(self) -> int:
        return self.tokens // self.tokens_per_step

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["model_overrides"] = {k: v for k, v in self.model_overrides}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["model_overrides"] = tuple(sorted(dict(d.get("model_overrides") or {}).items()))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def identity(self) -> dict:
        """The fields a resumed run must share with its checkpoint."""
        d = self.to_dict()
        for k in self.RESUMABLE_CHANGES:
            d.pop(k)
        if d["data"] == "corpus":  # added after the first checkpoints were written; default omitted
            d.pop("data")
        return json.loads(json.dumps(d))

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


PROFILES: dict[str, TrainConfig] = {
    "smoke": TrainConfig(size="tiny", context=128, batch_size=8, tokens=200 * 8 * 128,
                         lr=3e-3, warmup_steps=20, eval_every=100, eval_blocks=32, ckpt_every=100),
    # The committed CPU models: the largest that trained in about an hour on one shared core.
    # models/protot-cpu and models/llama-cpu were planned at 800 steps, re-planned to 600 at step
    # 150 (the shared machine was slower than measured), then extended to 1000 at step 600
    # (--resume --retarget-budget; each MANIFEST.json lists this budget_history).
    "cpu-hour": TrainConfig(size="small", model_overrides=(("num_hidden_layers", 4),),
                            context=256, batch_size=8, tokens=1000 * 8 * 256,
                            lr=2e-3, warmup_steps=50, eval_every=100, eval_blocks=64, ckpt_every=50),
    # Paper small: 6 layers / 256 hidden / context 256 / 250 M tokens (confirmed). Batch and lr: ours.
    "paper-small": TrainConfig(size="small", context=256, batch_size=128, tokens=250_000_000,
                               lr=1.5e-3, warmup_steps=300, eval_every=500, eval_blocks=256, ckpt_every=500),
    # Paper large: 12 layers / 512 hidden (confirmed). Context, batch, lr and the 1 B budget: ours.
    "paper-large": TrainConfig(size="large", context=256, batch_size=128, tokens=1_000_000_000,
                               lr=1e-3, warmup_steps=500, eval_every=1000, eval_blocks=256, ckpt_every=1000),
}


def profile(name: str, **changes) -> TrainConfig:
    """The named profile, optionally with fields replaced (e.g. ``arch="llama"``)."""
    if name not in PROFILES:
        raise ValueError(f"unknown training profile {name!r}; valid: {', '.join(PROFILES)}")
    return PROFILES[name].replace(**changes) if changes else PROFILES[name]


#: The paper's test perplexities in the large setting (12 layers, hidden 512). ProtoT's value is
#: confirmed by an aggregator; DeltaNet's and LLaMA's come from the brief only; Mamba's is unknown.
PAPER_LARGE_PPL: dict[str, float | None] = {"protot": 29.5, "deltanet": 31.5, "llama": 25.8, "mamba": None}
