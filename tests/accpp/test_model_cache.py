"""The converted model caches (``.cache/models/<name>``): hashed at conversion, checked at every load.

A tiny Llama stands in for the GGUF (``models._from_gguf`` is replaced), so each test converts in
well under a second; what is checked is the record the conversion writes and what a load does when
the folder no longer matches it.
"""
from __future__ import annotations

import json
import logging

import pytest
import torch

from accpp import models

NAME = "smollm2-135m"


def _tiny():
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from compendium import paths

    tok = PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"),
                                  eos_token="<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), tok


@pytest.fixture
def conversions(monkeypatch, tmp_path):
    """The number of conversions so far (a list that grows by one per conversion), in a fresh cache."""
    monkeypatch.setenv("COMPENDIUM_CACHE", str(tmp_path / "cache"))
    done = []

    def fake(name):
        done.append(name)
        return _tiny()

    monkeypatch.setattr(models, "_from_gguf", fake)
    return done


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[5, 17, 301, 42]])).logits


def test_conversion_records_every_file_and_a_load_checks_it(conversions):
    model, _ = models.load_model(NAME)
    folder = models.cached_folder(NAME)
    record = json.loads((folder / models.MANIFEST).read_text())
    assert record["model"] == NAME and record["gguf"] == models.OFFLINE_MODELS[NAME].gguf_name
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != models.MANIFEST)
    assert sorted(record["files"]) == on_disk and {"config.json", "model.safetensors"} <= set(on_disk)
    assert models.cache_problems(NAME) == []
    models.load_model(NAME)  # a matching folder loads as it is
    assert conversions == [NAME]


@pytest.mark.parametrize("key", ["rms_norm_eps", "rope_theta", "tie_word_embeddings"])
def test_a_config_that_lost_a_field_is_converted_again(conversions, caplog, key):
    """Before the record, config.json without rms_norm_eps (or the rope parameters, or the tied
    embeddings) loaded a different model without a word."""
    first, _ = models.load_model(NAME)
    want = _logits(first)
    config = models.cached_folder(NAME) / "config.json"
    cfg = json.loads(config.read_text())
    cfg.pop(key, None)
    cfg.get("rope_parameters", {}).pop(key, None)
    config.write_text(json.dumps(cfg))
    assert [p.split(": ")[0] for p in models.cache_problems(NAME)] == [f"$COMPENDIUM_CACHE/models/{NAME}/config.json"]
    with caplog.at_level(logging.WARNING, logger=models.__name__):
        again, _ = models.load_model(NAME)
    assert conversions == [NAME, NAME]
    assert any("config.json" in m and "converting it again" in m for m in caplog.messages)
    assert torch.equal(_logits(again), want)
    assert models.cache_problems(NAME) == []


def test_a_truncated_safetensors_is_named_and_converted_again(conversions, caplog):
    models.load_model(NAME)
    weights = models.cached_folder(NAME) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    problems = models.cache_problems(NAME)
    assert len(problems) == 1 and "model.safetensors" in problems[0] and "cut short" in problems[0]
    with caplog.at_level(logging.WARNING, logger=models.__name__):
        models.load_model(NAME)
    assert conversions == [NAME, NAME] and any("model.safetensors" in m for m in caplog.messages)
    assert weights.stat().st_size == len(data)


def test_without_the_gguf_a_mismatch_is_refused_naming_the_file(conversions, monkeypatch):
    models.load_model(NAME)
    folder = models.cached_folder(NAME)
    config = folder / "config.json"
    text = config.read_text()
    edited = text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-01')  # same size, another model
    assert edited != text
    config.write_text(edited)

    def missing(name):
        raise models._missing(models.OFFLINE_MODELS[name])

    monkeypatch.setattr(models, "_from_gguf", missing)
    with pytest.raises(models.ModelCacheError, match=r"models/smollm2-135m/config\.json: its sha256 differs") as err:
        models.load_model(NAME)
    assert models.OFFLINE_MODELS[NAME].install in str(err.value)
    assert config.read_text() == edited  # refused, not half-replaced


def test_an_added_file_and_a_folder_without_record_are_converted_again(conversions):
    models.load_model(NAME)
    folder = models.cached_folder(NAME)
    (folder / "extra.safetensors").write_bytes(b"0")
    assert models.cache_problems(NAME) == [
        f"$COMPENDIUM_CACHE/models/{NAME}/extra.safetensors: not written by the conversion (added since)"]
    models.load_model(NAME)
    assert not (folder / "extra.safetensors").exists() and conversions == [NAME, NAME]
    (folder / models.MANIFEST).unlink()
    assert "missing" in models.cache_problems(NAME)[0]
    models.load_model(NAME)
    assert conversions == [NAME, NAME, NAME] and models.cache_problems(NAME) == []


def test_the_folder_other_readers_use_is_checked_too(conversions):
    """protot.labels reads the tokenizer and the embedding matrix from the folder itself."""
    folder = models.converted_folder(NAME)
    assert conversions == [NAME] and models.converted_folder(NAME) == folder and conversions == [NAME]
    (folder / "tokenizer.json").write_text("{}")
    assert models.converted_folder(NAME) == folder and conversions == [NAME, NAME]
    assert models.cache_problems(NAME) == []


def test_protot_labels_reads_a_checked_folder(conversions):
    """protot.labels.reference_embeddings reads the embedding matrix from the folder: a cut-short
    model.safetensors is converted again first (before: a SafetensorError naming no file)."""
    from protot import labels

    class Ours:  # a tokenizer of five words
        all_special_ids: list[int] = []
        words = [" the", " cat", " sat", " on", " mat"]

        def __len__(self):
            return len(self.words)

        def decode(self, ids):
            return self.words[ids[0]]

    models.load_model(NAME)
    weights = models.cached_folder(NAME) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    ref = labels.reference_embeddings(Ours(), name=NAME)
    assert conversions == [NAME, NAME] and models.cache_problems(NAME) == []
    assert ref.vectors.shape == (len(ref.ours), 16) and len(ref.ours) >= 3
