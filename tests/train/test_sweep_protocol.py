"""The scaling notebook's registered protocol turns into model sizes and a training config."""
from __future__ import annotations

import pytest

from compendium import claims
from protot.train import config, sweep


def test_sizes_parse_with_whole_number_overrides():
    assert sweep.parse_size("tiny hidden_size=32 num_hidden_layers=1") == ("tiny", {"hidden_size": 32, "num_hidden_layers": 1})
    assert sweep.parse_size("large") == ("large", {})
    for bad in ("", "tiny hidden_size", "tiny hidden_size=3.5", "tiny =4"):
        with pytest.raises(ValueError):
            sweep.parse_size(bad)


def test_the_cpu_protocol_gives_the_grid_the_notebook_trained_before():
    cfg = sweep.grid_config(claims.protocol("protot/scaling-trend", "cpu"), seed=0)
    assert cfg == config.profile("smoke", context=64, batch_size=4, tokens=120 * 4 * 64, lr=1e-2, warmup_steps=10,
                                 eval_every=30, eval_blocks=32, ckpt_every=120, seed=0)
    smoke = sweep.grid_config(claims.protocol("protot/scaling-trend", "smoke"), seed=0)
    assert smoke.tokens < cfg.tokens and smoke.context == cfg.context
    with pytest.raises(ValueError, match="does not have"):
        sweep.grid_config({"train_profile": "smoke", "train_colour": 3}, seed=0)
    with pytest.raises(ValueError, match="no train_profile"):
        sweep.grid_config({}, seed=0)
