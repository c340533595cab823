"""The project's BPE tokenizer: a byte-level BPE of 12288 tokens trained on the English training split.

Why not GPT-2's 50257-token BPE (also in data/tokenizers/)? On a CPU the output layer dominates a
small model: with hidden 256, GPT-2's vocabulary puts 12.9 M parameters in the embedding alone
(four times a 6-layer body) and makes fp16 checkpoints larger than 20 MB. A 12k byte-level BPE
trained on our own training split keeps the models small and the softmax cheap. 12288 is the
smallest multiple of 4096 at which every probe word is a single token (at 8192, " girl",
" husband", " boys", " daughter" are split; " queen" stays split even at 16384, so it is not probed).

The consequence: our token-level perplexities are per *our* token, not per GPT-2 token, so they
are not directly comparable with the paper's numbers. :mod:`protot.train.evaluate` therefore also
reports bits per byte, which does not depend on the tokenizer.

The words the interpretability notebooks probe (:data:`PROBE_WORDS`) must each be one token; the
training run checks it and ``tests/train/test_tokenizer.py`` asserts it on the committed file.

Rebuild (deterministic given the corpus): ``python -m protot.train.tokenizer``.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from compendium import atomic, data, paths

#: File name under data/tokenizers/ of the committed tokenizer.
TOKENIZER_FILE = "protot_bpe12k.json"
VOCAB_SIZE = 12288
EOS_TOKEN = "<|endoftext|>"

#: Words (with GPT-2-style leading space) that interpretability probes; each must be a single token.
PROBE_WORDS: tuple[str, ...] = (
    " women", " woman", " men", " man", " she", " he", " her", " his", " him",
    " female", " male", " girl", " boy", " mother", " father", " wife", " husband",
    " girls", " boys", " daughter", " son", " She", " He", " They", " they", " king",
    " Germany", " disease", " virus", " city", " country", " war", " water",
)


def tokenizer_path() -> Path:
    return paths.data_dir() / "tokenizers" / TOKENIZER_FILE


def train_tokenizer(out: str | Path | None = None, vocab_size: int = VOCAB_SIZE, lang: str = "en"):
    """Train the byte-level BPE on the ``train`` split of the corpus and save it atomically.

    Returns the `tokenizers.Tokenizer`. Fails if a probe word does not end up as a single token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    ds = data.load_corpus("train", lang)

    def batches(n: int = 1000):
        for i in range(0, len(ds), n):
            yield ds[i : i + n]["text"]

    tok.train_from_iterator(batches(), trainer=trainer, length=len(ds))
    missing = [w for w in PROBE_WORDS if len(tok.encode(w).ids) != 1]
    if missing:
        raise RuntimeError(f"probe words not single tokens with vocab {vocab_size}: {missing}")
    out = Path(out) if out is not None else tokenizer_path()
    atomic.write_text(out, tok.to_str(pretty=False))
    return tok


@lru_cache(maxsize=4)
def _load(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def load_tokenizer(path: str | Path | None = None):
    """The committed `tokenizers.Tokenizer` (clear error when the file is missing)."""
    path = Path(path) if path is not None else tokenizer_path()
    if not path.exists():
        raise FileNotFoundError(
            f"tokenizer {path} is missing; restore it from git or rebuild it with `python -m protot.train.tokenizer`"
        )
    return _load(str(path))


def load_hf_tokenizer(path: str | Path | None = None):
    """The same tokenizer as a `transformers.PreTrainedTokenizerFast` (for notebooks and generation)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=load_tokenizer(path), eos_token=EOS_TOKEN, bos_token=EOS_TOKEN, unk_token=EOS_TOKEN
    )


def tokenizer_hash(path: str | Path | None = None) -> str:
    """sha256 of the tokenizer file: part of every cache key and checkpoint identity."""
    path = Path(path) if path is not None else tokenizer_path()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def eos_id(tok=None) -> int:
    tok = tok or load_tokenizer()
    return tok.token_to_id(EOS_TOKEN)


if __name__ == "__main__":
    t = train_tokenizer()
    print(f"wrote {tokenizer_path()} (vocab {t.get_vocab_size()}, sha256 {tokenizer_hash()[:12]})")
