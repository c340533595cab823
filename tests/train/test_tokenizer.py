"""The committed BPE: the probe words are single tokens; encoding round-trips."""
import pytest

from protot.train import tokenizer as tk

REQUIRED = (" women", " woman", " men", " man", " she", " he", " her", " his", " him", " female", " male")


def test_tokenizer_file_is_committed_with_expected_vocab():
    tok = tk.load_tokenizer()
    assert tok.get_vocab_size() == tk.VOCAB_SIZE
    assert tk.eos_id(tok) == 0


@pytest.mark.parametrize("word", sorted(set(REQUIRED) | set(tk.PROBE_WORDS)))
def test_probe_word_is_a_single_token(word):
    tok = tk.load_tokenizer()
    ids = tok.encode(word).ids
    assert len(ids) == 1, f"{word!r} splits into {tok.encode(word).tokens}"
    assert tok.decode(ids) == word


def test_roundtrip_and_hf_wrapper():
    text = "The women and men of New Zealand studied COVID-19 in 2021.\n\tUnicode: café, naïve — ok"
    tok = tk.load_tokenizer()
    assert tok.decode(tok.encode(text).ids) == text
    hf = tk.load_hf_tokenizer()
    assert hf.decode(hf(text)["input_ids"]) == text
    assert hf.convert_tokens_to_ids(tk.EOS_TOKEN) == 0
