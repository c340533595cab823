"""protot.notes: each claim's note is the text the notebook composed inline before it moved here.

Each ``old_*`` below is the notebook's own expression as it stood (protot/05, 06, 08-11 at 246e9e8),
with the notebook's globals as arguments; the new function must give the same text on the same
stand-in measurement. A second case per note varies what the text branches on (empty lists, signs)."""
from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

from protot import ablation, figures, notes

matplotlib.use("Agg")


def M(values=None, evidence=None, tables=None):
    return SimpleNamespace(values=dict(values or {}), evidence=dict(evidence or {}), tables=dict(tables or {}))


# ---------------------------------------------------------------------------------------- protot/05
def old_concept(m, TOP, ref, dead, DEAD_FLOOR, NULL_SEEDS, best, probes, use, stats, lm):
    v, ev, fams = m.values, m.evidence, m.tables["concept_null_families"]
    return (
        f"Mean coherence of the top-{TOP} write tokens per alive prototype (mean pairwise cosine of {ref.name} input "
        f"embeddings, centred; {ev['reference_tokens']:,} of our token types are one {ref.name} token; {len(dead)} of "
        f"{ev['prototypes']} prototypes dead, share < {DEAD_FLOOR:g}/R): trained {v['coherence_trained']:.4f}; null families (seeds "
        f"{NULL_SEEDS}, gates as sharp): "
        + "; ".join(f"{r.family} {r.coherence:.4f} (margin {r.margin:+.4f}, 95% CI {r.ci_low:+.4f}..{r.ci_high:+.4f})"
                    for r in fams.itertuples())
        + f"; smallest margin {v['coherence_margin']:+.4f} (95% CI {v['coherence_margin_ci_low']:+.4f}.."
        f"{v['coherence_margin_ci_high']:+.4f}, the check, {v['alive_prototypes']} alive prototypes)"
        + f"; random sets of {TOP} token types {ev['chance_coherence_mean']:.4f}. Write-gate entropy gap of the nulls at most "
        f"{100 * v['null_entropy_gap']:.1f}% (read {100 * ev['read_entropy_gap_max']:.1f}%). Most coherent: "
        + "; ".join(f"L{int(r.layer)} P{int(r.prototype)} [{r.write_tokens}] {r.coherence:.2f}" for r in best.head(4).itertuples())
        + ". Probes: " + "; ".join(f"{r.probe!r}->L{r.layer} P{r.prototype} (x{r.selectivity:.1f})" for r in probes.itertuples())
        + ". Effective write prototypes per layer (exp entropy of the mean gates, of "
        + f"{stats.prototypes}): "
        + ", ".join(f"L{r.layer} {r.effective:.1f}" for r in use[(use.model == "trained") & (use.gate == "write")].itertuples())
        + f". Model: {lm.description}; the paper's layer/prototype indices do not exist here.")


def concept_case(n_best):
    fams = pd.DataFrame({"family": ["untrained", "prototypes redrawn"], "coherence": [0.0312, -0.0041],
                         "margin": [0.0123, 0.0476], "ci_low": [-0.0011, 0.0302], "ci_high": [0.0251, 0.0655]})
    m = M({"coherence_trained": 0.04352, "coherence_margin": 0.0123, "coherence_margin_ci_low": -0.0011,
           "coherence_margin_ci_high": 0.0251, "alive_prototypes": 151, "null_entropy_gap": 0.0321},
          {"reference_tokens": 10423, "prototypes": 192, "chance_coherence_mean": 0.00213, "read_entropy_gap_max": 0.071},
          {"concept_null_families": fams})
    best = pd.DataFrame({"layer": [3, 1, 5, 0, 2][:n_best], "prototype": [7, 30, 2, 11, 4][:n_best],
                         "write_tokens": ["a, b", "c", "d, e, f", "g", "h"][:n_best],
                         "coherence": [0.61, 0.55, 0.5, 0.41, 0.3][:n_best]})
    probes = pd.DataFrame({"probe": [" women", " Germany"], "layer": [2, 4], "prototype": [9, 1],
                           "selectivity": [12.34, 3.05]})
    use = pd.DataFrame({"model": ["trained", "trained", "trained", "null"], "gate": ["write", "read", "write", "write"],
                        "layer": [0, 0, 1, 0], "effective": [11.26, 9.0, 3.04, 20.0]})
    return m, best, probes, use


@pytest.mark.parametrize("n_best", [5, 0])
def test_concept_note_is_the_notebook_s_text(n_best):
    m, best, probes, use = concept_case(n_best)
    dead = pd.DataFrame({"layer": [0] * 41})
    old = old_concept(m, 10, SimpleNamespace(name="gemma-3-270m"), dead, 0.1, [1, 2, 3], best, probes, use,
                      SimpleNamespace(prototypes=32), SimpleNamespace(description="protot-authors-small"))
    new = notes.concept_prototypes(m, top=10, reference="gemma-3-270m", dead=len(dead), dead_floor=0.1,
                                   null_seeds=[1, 2, 3], best=best, probes=probes, use=use, prototypes=32,
                                   model="protot-authors-small")
    assert new == old
    assert ("L3 P7 [a, b] 0.61" in new) == (n_best > 0)
    assert ("L0 P11" in new) == (n_best >= 4) and ("L2 P4" not in new)   # the four most coherent only


# ---------------------------------------------------------------------------------------- protot/06
def old_women(label_m, ppl_m, scan_m, lm):
    ev, v = label_m.evidence, label_m.values
    sev, sv = scan_m.evidence, scan_m.values

    def strata_text(m):
        return "; ".join(f"{s} {m.values[f'{s}_drop_pct']:.2f}% [{m.values[f'{s}_ci_low_pct']:.2f}, "
                         f"{m.values[f'{s}_ci_high_pct']:.2f}] (n={m.values[f'{s}_contexts']})" for s in ablation.STRATA)

    scale = f"Model: {lm.description}; the paper's L9 P7 does not exist in it."
    label = (
        f"Selected by label on the training split: {ev['prototype']} ({ev['selection_gate']} gate, score {ev['selection_score']:.3f}, "
        f"female words among its top-10 tokens {100 * ev['female_top_share']:.0f}%; top write tokens [{ev['label']['write_tokens']}]); "
        f"labelled female: {v['labelled_female']}. On {ev['validation_contexts']} validation contexts its mask lowers mean p(women) "
        f"by {v['drop_pct']:.2f}% (95% CI {v['ci_low_pct']:.2f}..{v['ci_high_pct']:.2f}); per stratum: {strata_text(label_m)}. "
        "Other words: " + ", ".join(f"{w!r} {d:+.2f}%" for w, d in ev["other_drops_pct"].items())
        + f"; largest alive same-layer control drop {max(ev['control_drops_pct'].values(), default=float('nan')):.2f}%. "
        f"Specificity margin {v['specificity_margin']:+.2f} points (95% CI {v['specificity_margin_ci_low']:+.2f}.."
        f"{v['specificity_margin_ci_high']:+.2f}), control margin {v['control_margin']:+.2f} ({v['control_margin_ci_low']:+.2f}.."
        f"{v['control_margin_ci_high']:+.2f}). "
        f"Context effect on ' women' {v['context_effect_nats']:.3f} nats. " + scale)
    ppl = (
        f"Perplexity on {ppl_m.values['ppl_blocks']} random validation blocks: {ppl_m.evidence['ppl_intact']:.2f} intact, "
        f"{ppl_m.values['ppl_change_pct']:+.3f}% with {ppl_m.evidence['prototype']} masked (95% CI "
        f"{ppl_m.values['ppl_ci_low_pct']:+.3f}..{ppl_m.values['ppl_ci_high_pct']:+.3f}); alive same-layer controls: "
        + ", ".join(f"{e.replace('control ', '')} {c:+.3f}%" for e, c in ppl_m.evidence["control_ppl_change_pct"].items())
        + f"; target_vs_controls {ppl_m.values['target_vs_controls']:.2f} points (95% CI "
        f"{ppl_m.values['target_vs_controls_ci_low']:.2f}..{ppl_m.values['target_vs_controls_ci_high']:.2f}). " + scale)
    scan = (
        f"Causal scan winner {sev['prototype']} ({sev['candidates_scanned']} prototypes, {sev['selection_contexts']} training "
        f"contexts; training drop {sev['selected_train_drop_pct']:.2f}%), class {sev['class']!r} (top write tokens "
        f"[{sev['label']['write_tokens']}]). Validation drop {sv['drop_pct']:.2f}% (95% CI {sv['ci_low_pct']:.2f}.."
        f"{sv['ci_high_pct']:.2f}); per stratum: {strata_text(scan_m)}. Other words: "
        + ", ".join(f"{w!r} {d:+.2f}%" for w, d in sev["other_drops_pct"].items())
        + f". Specificity margin {sv['specificity_margin']:+.2f} points (95% CI {sv['specificity_margin_ci_low']:+.2f}.."
        f"{sv['specificity_margin_ci_high']:+.2f}), control margin {sv['control_margin']:+.2f} ({sv['control_margin_ci_low']:+.2f}.."
        f"{sv['control_margin_ci_high']:+.2f}). " + scale)
    return label, ppl, scan


def women_case(controls):
    strata = {}
    for i, s in enumerate(ablation.STRATA):
        strata.update({f"{s}_drop_pct": 3.1 - i, f"{s}_ci_low_pct": -0.4 + i, f"{s}_ci_high_pct": 6.25 + i,
                       f"{s}_contexts": 40 + i})
    margins = {"drop_pct": 7.123, "ci_low_pct": 2.5, "ci_high_pct": 11.0, "specificity_margin": -1.234,
               "specificity_margin_ci_low": -3.1, "specificity_margin_ci_high": 0.5, "control_margin": 4.0,
               "control_margin_ci_low": 1.25, "control_margin_ci_high": 6.75}
    label = M({**strata, **margins, "labelled_female": True, "context_effect_nats": 0.8123},
              {"prototype": "L3 P7", "selection_gate": "write", "selection_score": 0.4567, "female_top_share": 0.3,
               "label": {"write_tokens": "women, she"}, "validation_contexts": 120,
               "other_drops_pct": {" men": 1.5, " people": -0.25},
               "control_drops_pct": {f"control L3 P{k}": 0.5 * k for k in range(controls)}})
    ppl = M({"ppl_blocks": 128, "ppl_change_pct": 0.1234, "ppl_ci_low_pct": -0.05, "ppl_ci_high_pct": 0.3,
             "target_vs_controls": 0.42, "target_vs_controls_ci_low": -0.1, "target_vs_controls_ci_high": 0.9},
            {"ppl_intact": 41.234, "prototype": "L3 P7",
             "control_ppl_change_pct": {f"control L3 P{k}": 0.01 * k for k in range(controls)}})
    scan = M({**strata, **margins},
             {"prototype": "L4 P2", "candidates_scanned": 192, "selection_contexts": 64, "selected_train_drop_pct": 9.5,
              "class": "female", "label": {"write_tokens": "her"}, "other_drops_pct": {}})
    return label, ppl, scan


@pytest.mark.parametrize("controls", [3, 0])
def test_women_notes_are_the_notebook_s_text(controls):
    label, ppl, scan = women_case(controls)
    lm = SimpleNamespace(description="protot-authors-small (6 x 256)")
    old = old_women(label, ppl, scan, lm)
    new = (notes.women_label(label, model=lm.description), notes.women_ppl(ppl, model=lm.description),
           notes.women_scan(scan, model=lm.description))
    assert new == old
    assert ("control drop nan%" in new[0]) == (controls == 0)       # max over no controls
    assert all(f"{s} " in new[0] for s in ablation.STRATA)


# ---------------------------------------------------------------------------------------- protot/08
def old_circuit(meas, LAYER, K, scan, lm):
    v, ev = meas.values, meas.evidence
    return (
        f"Selected L{LAYER} P{K} (notebook 06's rule; mask drop {scan.drop_pct.iloc[0]:.2f}% on training contexts). "
        f"Over {v['n_occurrences']} validation occurrences of ' women' the own embedding carries {v['embed_share']:.3f} of the "
        f"positive attribution of the centred write logit (mean centred logit {ev['mean_centred_logit_word']:.3f}); at "
        f"{ev['n_null_positions']} null positions (other tokens, write gate in the top 5%) {ev['embed_share_null']:.3f}; "
        f"difference {v['embed_share_margin']:+.3f} (95% CI {v['embed_share_margin_ci_low']:.3f}..{v['embed_share_margin_ci_high']:.3f}); "
        f"share 95% CI {v['embed_share_ci_low']:.3f}..{v['embed_share_ci_high']:.3f}. Write selectivity "
        f"{v['write_selectivity']:.2f}; decomposition error {v['decomposition_error']:.1e}. By kind at the word: "
        + ", ".join(f"{k} {x:.3f}" for k, x in ev["share_by_kind"]["word"].items())
        + f". Untrained ProtoT of the same config, same (layer, prototype): embedding share {ev['untrained']['embed_share']:.3f}, "
        f"write selectivity {ev['untrained']['write_selectivity']:.2f}. Model: {lm.description}.")


def test_write_circuit_note_is_the_notebook_s_text():
    meas = M({"n_occurrences": 37, "embed_share": 0.61234, "embed_share_margin": -0.0456,
              "embed_share_margin_ci_low": -0.1, "embed_share_margin_ci_high": 0.02, "embed_share_ci_low": 0.5,
              "embed_share_ci_high": 0.7, "write_selectivity": 8.456, "decomposition_error": 3.2e-13},
             {"mean_centred_logit_word": 2.345, "n_null_positions": 400, "embed_share_null": 0.65,
              "share_by_kind": {"word": {"embedding": 0.6, "mlp": 0.25, "channels": 0.15}},
              "untrained": {"embed_share": 0.9, "write_selectivity": 1.02}})
    scan = pd.DataFrame({"drop_pct": [12.3456, 1.0]})
    lm = SimpleNamespace(description="protot-authors-small")
    assert notes.women_write_circuit(meas, layer=3, prototype=7, train_drop_pct=float(scan.drop_pct.iloc[0]),
                                     model=lm.description) == old_circuit(meas, 3, 7, scan, lm)


# ---------------------------------------------------------------------------------------- protot/09-11
def old_disentangle(m, classes, match, THRESHOLD, SAE_CONFIG, ev):
    v = m.values
    return (
        f"Disentanglement (mean over units of 1 - normalised entropy of the class profile over {classes.n} frequent "
        f"token types): prototypes {v['d_prototypes']:.3f}, heads {v['d_heads']:.3f}, SAE features {v['d_sae']:.3f}; "
        f"coverage at {match} units (classes with a unit >= {THRESHOLD:g}x selective): {v['coverage_prototypes']:.3f}, "
        f"{v['coverage_heads']:.3f}, {v['coverage_sae']:.3f}. Gaps to the nulls: "
        + ", ".join(f"{k} {g:+.3f}" for k, g in m.evidence["null_gaps"].items())
        + f". SAE: {SAE_CONFIG.n_features} features, k={SAE_CONFIG.k}, after block {SAE_CONFIG.layer}, explained "
        f"variance {ev:.3f}. Our definitions, not the paper's; small CPU models.")


def test_disentanglement_note_is_the_notebook_s_text():
    m = M({"d_prototypes": 0.4321, "d_heads": 0.2, "d_sae": 0.55, "coverage_prototypes": 0.31, "coverage_heads": 0.1,
           "coverage_sae": 0.6}, {"null_gaps": {"ProtoT prototypes": 0.12, "SAE features": -0.03}})
    cfg = SimpleNamespace(n_features=512, k=16, layer=2)
    assert notes.disentanglement_coverage(m, n_classes=150, match=48, threshold=4.0, sae_features=512, sae_k=16,
                                          sae_layer=2, explained_variance=0.8123) == \
        old_disentangle(m, SimpleNamespace(n=150), 48, 4.0, cfg, 0.8123)


def old_generation(v, PREFIX, CONTINUATION, PROTOCOL, bias, missing, per_judgement):
    return (
        f"{v['n_prompts']} prompts ({PREFIX} + {CONTINUATION} tokens of validation text), judge {PROTOCOL['judge']} "
        f"(A/B log-odds, both orders): order-consistent in {v['judge_order_consistency']:.1%} of pairs, the human "
        f"continuation's mean score {v['human_preference']:.3f}, answer A in {bias['share_first']:.1%} of judgements. "
        f"Elo gap ProtoT - LLaMA {v['elo_gap_llama']:+.1f} (95% interval {v['elo_gap_llama_ci_low']:+.1f} to "
        f"{v['elo_gap_llama_ci_high']:+.1f}); not compared: {', '.join(missing) or 'none'}. "
        f"{per_judgement:.2f} CPU s per judgement.")


@pytest.mark.parametrize("missing", [[], ["mamba", "deltanet"]])
def test_generation_note_is_the_notebook_s_text(missing):
    m = M({"n_prompts": 200, "judge_order_consistency": 0.7345, "human_preference": 0.8123, "elo_gap_llama": -12.34,
           "elo_gap_llama_ci_low": -40.0, "elo_gap_llama_ci_high": 15.5})
    new = notes.generation_elo(m, prefix=64, continuation=48, judge="SmolLM2-135M", share_first=0.5512,
                               not_compared=missing, seconds_per_judgement=0.1234)
    assert new == old_generation(m.values, 64, 48, {"judge": "SmolLM2-135M"}, {"share_first": 0.5512}, missing, 0.1234)
    assert ("not compared: none" in new) == (not missing)


def old_cola(v, PROTOCOL, floors_bow_mcc, chosen):
    return (f"CoLA validation ({v['n_dev']} sentences), mean of {len(PROTOCOL['seeds'])} seed(s) x "
            f"{PROTOCOL['epochs']} epoch(s): ProtoT {v['protot_cola']:.1f} [{v['protot_cola_ci_low']:.1f}, "
            f"{v['protot_cola_ci_high']:.1f}], LLaMA {v['llama_cola']:.1f} [{v['llama_cola_ci_low']:.1f}, "
            f"{v['llama_cola_ci_high']:.1f}], gap {v['cola_gap_to_llama']:+.1f} [{v['cola_gap_to_llama_ci_low']:+.1f}, "
            f"{v['cola_gap_to_llama_ci_high']:+.1f}]; bag of words {floors_bow_mcc:.1f}; "
            f"learning rates {chosen}.")


COLA = {"n_dev": 1043, "protot_cola": 12.34, "protot_cola_ci_low": 8.0, "protot_cola_ci_high": 16.5, "llama_cola": 15.0,
        "llama_cola_ci_low": 11.1, "llama_cola_ci_high": 19.0, "cola_gap_to_llama": -2.66,
        "cola_gap_to_llama_ci_low": -7.5, "cola_gap_to_llama_ci_high": 2.25}


def test_cola_note_is_the_notebook_s_text():
    chosen = {"protot-authors-small": 1e-4, "llama-authors-small": 3e-5}
    new = notes.glue_cola(M(COLA), n_seeds=3, epochs=2, bow_mcc=9.87, learning_rates=chosen)
    assert new == old_cola(COLA, {"seeds": [0, 1, 2], "epochs": 2}, 9.87, chosen)


# ---------------------------------------------------------------------------------------- figures
def test_the_claim_figures_draw_what_they_are_given():
    fig = figures.glue_cola_figure(COLA, {"p": [10.0, 12.0, 15.0], "l": [14.0, 15.0, 16.0]},
                                   {"majority class": 0.0, "bag of words": 9.87}, protot="p", llama="l",
                                   paper_value=25.0, threshold=-5.0, n_dev=1043, profile="cpu")
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["ProtoT", "LLaMA"]
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["threshold: -5"]
    vlines = [float(line.get_xdata()[0]) for line in left.lines if list(line.get_ydata()) == [0, 1]]  # axvline
    assert sorted(vlines) == [0.0, 9.87, 25.0]                    # the two floors and the paper's value
    strata = pd.DataFrame({"selected_by": ["label"] * 3 + ["scan"] * 3, "prototype": ["L3 P7"] * 3 + ["L4 P2"] * 3,
                           "stratum": list(ablation.STRATA) * 2, "contexts": [40, 41, 42] * 2,
                           "drop_pct": [5.0, 1.0, 0.5, 4.0, 2.0, 0.1], "ci_low_pct": [1.0, -1.0, -1.0, 0.0, 0.0, -2.0],
                           "ci_high_pct": [9.0, 3.0, 2.0, 8.0, 4.0, 2.0]})
    spec = pd.DataFrame({"selected_by": ["label", "label", "scan", "scan"], "word": [" men", "gender-free coordination"] * 2,
                         "drop_pct": [1.0, 0.5, 2.0, -0.5], "ci_low_pct": [0.0, -1.0, 1.0, -1.0],
                         "ci_high_pct": [2.0, 1.0, 3.0, 0.0]})
    ppl = pd.DataFrame({"edit": ["mask L3 P7", "control L3 P1"], "ppl_change_pct": [0.1, -0.05],
                        "ci_low_pct": [0.0, -0.1], "ci_high_pct": [0.2, 0.0]})
    fig = figures.women_ablation_figure(strata, spec, ppl, paper_drop=40.0, paper_ppl=1.0, ppl_blocks=128)
    a, b, c = fig.axes
    assert len(a.patches) == 6 and len(b.patches) == 4            # a bar per (selection, stratum), per (selection, word)
    assert [t.get_text() for t in b.get_xticklabels()] == [" men", "coord.\npairs"]
    assert [t.get_text() for t in c.get_yticklabels()] == ["mask L3 P7", "control L3 P1"]
    assert c.get_title() == "Perplexity (128 random blocks)"
