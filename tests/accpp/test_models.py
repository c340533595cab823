"""Offline pretrained models (marked `models`; each test short) and the missing-model message."""
from __future__ import annotations

import pytest
import torch

from accpp import models


def test_missing_model_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPENDIUM_CACHE", str(tmp_path))
    # hide only the offline models' packages (hiding every package would also hide tokenizers
    # from transformers, which caches what it finds)
    hidden = {spec.package for spec in models.OFFLINE_MODELS.values()}
    real = models.importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a, **k: None if name in hidden else real(name, *a, **k))
    for name, spec in models.OFFLINE_MODELS.items():
        with pytest.raises(models.ModelNotInstalled, match=spec.install.replace("==", "==").replace(".", r"\.")):
            models.load_model(name)


def test_conversion_message_names_no_folder_of_this_machine(monkeypatch, tmp_path, caplog):
    """The one-time GGUF conversion is announced in a notebook's saved output: the cache folder is
    named relative to the variable that moved it, never by its absolute path."""
    import transformers

    monkeypatch.setenv("COMPENDIUM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "gguf_path", lambda name: tmp_path / "gguf" / "model.gguf")

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", stop)
    with caplog.at_level("WARNING", logger=models.__name__), pytest.raises(Stop):
        models._convert("smollm2-135m", models.cached_folder("smollm2-135m"))
    assert caplog.messages == ["converting smollm2-135m from GGUF once into $COMPENDIUM_CACHE/models/smollm2-135m"]


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(2)
    return models.load_model("smollm2-135m")


@pytest.mark.models
def test_smollm2_ioi_circuit(smollm2):
    from accpp import datasets, ioi
    from accpp.trace import Tracer

    model, tok = smollm2
    tracer = Tracer(model, tok, name="smollm2-135m")
    p = datasets.make_prompt(tok, 0, "BABA", "Mary", "John", "store", "drink")
    c = ioi.trace_ioi(tracer, p)
    assert c.logit_diff > 0 and c.n_firings >= 1 and c.graph.number_of_edges() > 0
    err = ioi.circuit_exactness(tracer, p, c, max_firings=3)
    assert err["query_side"] < 1e-8 and err["key_side"] < 1e-8
    assert err["softmax_vs_model"] < 1e-4  # float32 model vs float64 rebuild


@pytest.mark.models
def test_gemma3_decomposition_matches_model():
    from accpp.signals import Firing, FiringSolver, firing_exactness
    from accpp.trace import Tracer

    torch.set_num_threads(2)
    model, tok = models.load_model("gemma-3-270m")
    tracer = Tracer(model, tok, name="gemma-3-270m")
    assert tracer.arch.features["qk_norm"] and tracer.arch.features["sliding_window"]
    ids = tok("When Mary and John went to the store, John gave a drink to", return_tensors="pt").input_ids[0]
    dec = tracer.decompose(ids)
    L, t = tracer.arch.n_layers, dec.T - 1
    vecs, _ = dec.components(L, t)
    rel = float((vecs.sum(0) - dec.acts.resid[L, t]).norm() / dec.acts.resid[L, t].norm())
    assert rel < 1e-4  # float32 forward vs float64 sum of components
    solver = FiringSolver(dec, tracer.svd)
    for f in (Firing(5, 0, t, 2), Firing(12, 1, t, 2)):  # a global and a sliding-window layer
        err = firing_exactness(solver, f)
        assert err["query_side"] < 1e-8 and err["key_side"] < 1e-8 and err["softmax_vs_model"] < 1e-4
