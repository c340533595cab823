"""Packed token streams are cached, rebuilt only on a source/tokenizer change; batches are stateless."""
import json
import time

import numpy as np

from protot.train import packing
from protot.train import tokenizer as tk


def test_stream_is_cached_and_keyed_by_tokenizer(tmp_path):
    cache = tmp_path / "cache"
    a = packing.token_stream("validation", cache=cache)
    files = sorted(cache.glob("*.npy"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    t = time.time()
    b = packing.token_stream("validation", cache=cache)
    assert time.time() - t < 1.0
    assert files[0].stat().st_mtime_ns == mtime  # reused, not rebuilt
    np.testing.assert_array_equal(a, b)
    meta = json.loads(sorted(cache.glob("*.json"))[0].read_text())
    assert meta["tokens"] == len(a) and meta["tokenizer_sha256"] == tk.tokenizer_hash()
    # documents end with the end-of-text token
    assert a[-1] == tk.eos_id() and (np.asarray(a) == tk.eos_id()).sum() > 100

    # A changed tokenizer (same vocabulary, different file bytes) gives a new cache key.
    other = tmp_path / "tok.json"
    other.write_text(tk.tokenizer_path().read_text() + " ")
    key1, _ = packing.source_key("validation")
    key2, _ = packing.source_key("validation", tokenizer_path=other)
    assert key1 != key2


def test_wikitext_stream_has_no_eos_and_matches_direct_encoding(tmp_path):
    w = packing.token_stream("wikitext2-test", cache=tmp_path)
    assert (np.asarray(w) == tk.eos_id()).sum() == 0
    from compendium import data

    head = data.load_wikitext2_test()[:2000]
    ids = tk.load_tokenizer().encode(head).ids
    np.testing.assert_array_equal(np.asarray(w[: len(ids) - 5]), ids[:-5])


def test_batch_schedule_is_a_pure_function_covering_each_epoch():
    s = packing.BatchSchedule(n_blocks=10, batch_size=4, seed=3)
    first = np.concatenate([s.block_ids(i) for i in range(5)])  # 20 samples = 2 epochs
    assert sorted(first[:10]) == list(range(10)) and sorted(first[10:]) == list(range(10))
    np.testing.assert_array_equal(s.block_ids(3), packing.BatchSchedule(10, 4, 3).block_ids(3))
    assert not np.array_equal(s.block_ids(0), packing.BatchSchedule(10, 4, 4).block_ids(0))
