"""Checks that can fail: each condition changed on 2026-12-04 (papers/*/claims.yaml, history) fails
on a planted case, judged by compendium.judge with the claim as registered, from values that the
measuring lib code computes; and the conditions it replaced are shown passing where the claim is
false (they could not fail, or measured something else)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from compendium import claims, judge


def _verdict(key: str, values: dict) -> str:
    return judge.evaluate(claims.get_claim(key), values, "cpu")[0]


# --- accpp/ioi-template-clusters ------------------------------------------------------------------
def test_permanova_r2_is_above_zero_on_noise():
    """The removed condition (permanova_template_R2 > 0) passes on distances with no template
    structure at all: R2 is a ratio of sums of squares, above 0 whenever the centroids differ."""
    from accpp.clustering import permanova

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6))
    D = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    template = np.repeat(np.arange(5), 8)
    order = np.tile([0, 1], 20)
    table = permanova(D, {"template": template, "order": order}, n_perm=199, seed=0)
    assert table.loc["template", "R2"] > 0 and table.loc["template", "p"] > 0.05


def test_template_clusters_fail_where_the_p_interval_lies_above_the_threshold():
    claim = claims.get_claim("accpp/ioi-template-clusters")
    assert [c.quantity for c in claim.check.conditions] == ["permanova_template_p"]
    base = dict(n_perm=999, traced_fraction=1.0, permanova_template_R2=0.3)   # a large R2, no longer decisive
    assert _verdict(claim.key, {**base, "permanova_template_p": 0.3, "permanova_template_p_ci_low": 0.27,
                                "permanova_template_p_ci_high": 0.33}) == claims.DOES_NOT_HOLD
    assert _verdict(claim.key, {**base, "permanova_template_p": 0.001, "permanova_template_p_ci_low": 0.0,
                                "permanova_template_p_ci_high": 0.0037}) == claims.HOLDS


# --- accpp/ioi-circuit-roles -----------------------------------------------------------------------
def _role_sets(missing_per_circuit: list[int | None]) -> list[dict]:
    from accpp.roles import ROLES

    return [{r: [f"{i}.{j}"] for j, r in enumerate(ROLES) if j != miss} for i, miss in enumerate(missing_per_circuit)]


def test_circuit_roles_fail_where_no_circuit_holds_every_role():
    """Eight circuits, each missing a different role: the union holds all five (the replaced
    n_roles >= 5 passes) and every circuit beats its null, but no circuit contains the role
    classes, so the claim fails."""
    from accpp.ioi import measure_ioi_roles
    from accpp.roles import ROLES

    sets = _role_sets([i % len(ROLES) for i in range(8)])
    m = measure_ioi_roles(sets, [0.5] * 8, pd.DataFrame(), accuracy=0.95)
    v = m.values
    assert v["n_roles"] == 5 and v["all_roles_share"] == 0 and v["n_circuits_with_all_roles"] == 0
    assert v["size_matched_role_excess"] == pytest.approx(3.5)
    assert _verdict("accpp/ioi-circuit-roles", v) == claims.DOES_NOT_HOLD
    assert (v["all_roles_share_ci_low"], v["all_roles_share_ci_high"]) == pytest.approx((0.0, 0.3694), abs=1e-4)
    # every circuit complete: holds (8 of 8, Clopper-Pearson 0.631..1); 7 of 8 straddles 0.5
    full = measure_ioi_roles(_role_sets([None] * 8), [0.5] * 8, pd.DataFrame(), accuracy=0.95).values
    assert full["all_roles_share"] == 1 and _verdict("accpp/ioi-circuit-roles", full) == claims.HOLDS
    seven = measure_ioi_roles(_role_sets([None] * 7 + [0]), [0.5] * 8, pd.DataFrame(), accuracy=0.95).values
    assert seven["all_roles_share"] == 7 / 8 and _verdict("accpp/ioi-circuit-roles", seven) == claims.INCONCLUSIVE


# --- protot/disentanglement-coverage ---------------------------------------------------------------
def _disentangle_measure(d: dict, cov: dict):
    """protot.disentangle.measure on a planted table: kinds p, h, s and their nulls p0, h0, s0 with
    mean disentanglement ``d`` and matched-size coverage ``cov``; 40 scored units each, tightly
    spread around the kind's mean."""
    from protot import disentangle as D

    kinds = ["p", "h", "s", "p0", "h0", "s0"]
    table = pd.DataFrame({"kind": kinds, "units": [40] * 6, "scored": [40] * 6,
                          "disentanglement": [d[k] for k in kinds], "coverage_at_40": [cov[k] for k in kinds]})
    rng = np.random.default_rng(0)
    per_unit = pd.DataFrame({"kind": np.repeat(kinds, 40),
                             "disentanglement": np.concatenate([d[k] + rng.normal(0, 0.01, 40) for k in kinds])})
    return D.measure(table, prototypes="p", heads="h", sae="s", nulls={"p": "p0", "h": "h0", "s": "s0"},
                     sae_explained_variance=0.8, n_classes=150, per_unit=per_unit, seed=0)


def test_disentanglement_fails_where_the_prototypes_lead_only_by_their_encoding():
    """Prototypes score highest raw, but an untrained model scores almost as high (the encoding's
    doing), while the SAE features gain far more over their random dictionary: the replaced raw
    margins pass, the null-corrected ones fail."""
    v = _disentangle_measure(d=dict(p=0.6, h=0.1, s=0.4, p0=0.58, h0=0.05, s0=0.1),
                             cov=dict(p=0.7, h=0.1, s=0.5, p0=0.68, h0=0.0, s0=0.2)).values
    assert v["disentanglement_margin"] == pytest.approx(0.2) and v["coverage_margin"] == pytest.approx(0.2)
    assert v["disentanglement_excess_margin"] == pytest.approx(0.02 - 0.3)
    assert v["coverage_excess_margin"] == pytest.approx(0.02 - 0.3)
    assert v["disentanglement_excess_margin_ci_high"] < 0
    assert _verdict("protot/disentanglement-coverage", v) == claims.DOES_NOT_HOLD
    # the reverse: lower raw scores than the SAE's, more learned above the null: holds
    w = _disentangle_measure(d=dict(p=0.3, h=0.1, s=0.6, p0=0.05, h0=0.05, s0=0.55),
                             cov=dict(p=0.5, h=0.1, s=0.7, p0=0.1, h0=0.0, s0=0.68)).values
    assert w["disentanglement_margin"] < 0 and w["disentanglement_excess_margin"] == pytest.approx(0.25 - 0.05)
    assert _verdict("protot/disentanglement-coverage", w) == claims.HOLDS
    # coverage alone fails: the coverage condition decides too
    u = _disentangle_measure(d=dict(p=0.3, h=0.1, s=0.6, p0=0.05, h0=0.05, s0=0.55),
                             cov=dict(p=0.5, h=0.1, s=0.9, p0=0.45, h0=0.0, s0=0.2)).values
    assert u["coverage_excess_margin"] == pytest.approx(0.05 - 0.7)
    assert _verdict("protot/disentanglement-coverage", u) == claims.DOES_NOT_HOLD


# --- accpp/multilingual-component-reuse ------------------------------------------------------------
def test_component_reuse_fails_where_signals_are_no_more_language_specific():
    """The removed condition (reuse_gap > 0, true by construction) would pass here; the specificity
    gap, whose whole interval lies below 0, fails the claim."""
    claim = claims.get_claim("accpp/multilingual-component-reuse")
    assert [c.quantity for c in claim.check.conditions] == ["specificity_gap"]
    base = dict(min_language_accuracy=0.9, n_parallel_prompts=30, reuse_gap=0.33)
    assert _verdict(claim.key, {**base, "specificity_gap": -0.2, "specificity_gap_ci_low": -0.3,
                                "specificity_gap_ci_high": -0.1}) == claims.DOES_NOT_HOLD
    assert _verdict(claim.key, {**base, "specificity_gap": 0.2, "specificity_gap_ci_low": 0.1,
                                "specificity_gap_ci_high": 0.3}) == claims.HOLDS
