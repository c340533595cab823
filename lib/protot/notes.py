"""The claim notes of the ProtoT notebooks 05, 06 and 08-11: one line of text per measurement, built
from its values and evidence (``m.values``, ``m.evidence``, ``m.tables``) and the few settings the
notebook passes. The notebook cell sets ``m.note = notes.<claim>(m, ...)`` before ``claims.conclude``.

- :func:`concept_prototypes` (protot/05, claim ``concept-prototypes``)
- :func:`women_label`, :func:`women_ppl`, :func:`women_scan` (protot/06, claims
  ``women-prototype-ablation``, ``women-ablation-ppl``, ``women-causal-scan``)
- :func:`women_write_circuit` (protot/08, claim ``women-write-circuit``)
- :func:`disentanglement_coverage` (protot/09, claim ``disentanglement-coverage``)
- :func:`generation_elo` (protot/10, claim ``generation-elo``)
- :func:`glue_cola` (protot/11, claim ``glue-cola``)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from protot.ablation import STRATA

__all__ = ["concept_prototypes", "strata_text", "women_label", "women_ppl", "women_scan", "women_write_circuit",
           "disentanglement_coverage", "generation_elo", "glue_cola"]

def concept_prototypes(m, *, top: int, reference: str, dead: int, dead_floor: float, null_seeds: Sequence[int],
                       best, probes, use, prototypes: int, model: str) -> str:
    """``m``: labels.measure_concepts' measurement (its table ``concept_null_families``); ``best``: the most
    coherent alive prototypes (rows layer, prototype, write_tokens, coherence); ``probes``: the probe table
    (probe, layer, prototype, selectivity); ``use``: usage.prototype_usage rows with model and gate."""
    v, ev, fams = m.values, m.evidence, m.tables["concept_null_families"]
    return (
        f"Mean coherence of the top-{top} write tokens per alive prototype (mean pairwise cosine of {reference} input "
        f"embeddings, centred; {ev['reference_tokens']:,} of our token types are one {reference} token; {dead} of "
        f"{ev['prototypes']} prototypes dead, share < {dead_floor:g}/R): trained {v['coherence_trained']:.4f}; null "
        f"families (seeds {list(null_seeds)}, gates as sharp): "
        + "; ".join(f"{r.family} {r.coherence:.4f} (margin {r.margin:+.4f}, 95% CI {r.ci_low:+.4f}..{r.ci_high:+.4f})"
                    for r in fams.itertuples())
        + f"; smallest margin {v['coherence_margin']:+.4f} (95% CI {v['coherence_margin_ci_low']:+.4f}.."
        f"{v['coherence_margin_ci_high']:+.4f}, the check, {v['alive_prototypes']} alive prototypes)"
        + f"; random sets of {top} token types {ev['chance_coherence_mean']:.4f}. Write-gate entropy gap of the nulls "
        f"at most {100 * v['null_entropy_gap']:.1f}% (read {100 * ev['read_entropy_gap_max']:.1f}%). Most coherent: "
        + "; ".join(f"L{int(r.layer)} P{int(r.prototype)} [{r.write_tokens}] {r.coherence:.2f}"
                    for r in best.head(4).itertuples())
        + ". Probes: " + "; ".join(f"{r.probe!r}->L{r.layer} P{r.prototype} (x{r.selectivity:.1f})"
                                   for r in probes.itertuples())
        + ". Effective write prototypes per layer (exp entropy of the mean gates, of "
        + f"{prototypes}): "
        + ", ".join(f"L{r.layer} {r.effective:.1f}"
                    for r in use[(use.model == "trained") & (use.gate == "write")].itertuples())
        + f". Model: {model}; the paper's layer/prototype indices do not exist here.")


def strata_text(m, strata: Sequence[str] = STRATA) -> str:
    """The drop per stratum (protot.ablation.STRATA) with its interval and count: "topical 1.23% [0.10, 2.30] (n=40); ..."."""
    return "; ".join(f"{s} {m.values[f'{s}_drop_pct']:.2f}% [{m.values[f'{s}_ci_low_pct']:.2f}, "
                     f"{m.values[f'{s}_ci_high_pct']:.2f}] (n={m.values[f'{s}_contexts']})" for s in strata)


def _scale(model: str) -> str:
    return f"Model: {model}; the paper's L9 P7 does not exist in it."


def women_label(m, *, model: str) -> str:
    """The label-selected prototype's note (claim women-prototype-ablation)."""
    v, ev = m.values, m.evidence
    return (
        f"Selected by label on the training split: {ev['prototype']} ({ev['selection_gate']} gate, score "
        f"{ev['selection_score']:.3f}, female words among its top-10 tokens {100 * ev['female_top_share']:.0f}%; top "
        f"write tokens [{ev['label']['write_tokens']}]); labelled female: {v['labelled_female']}. On "
        f"{ev['validation_contexts']} validation contexts its mask lowers mean p(women) by {v['drop_pct']:.2f}% (95% CI "
        f"{v['ci_low_pct']:.2f}..{v['ci_high_pct']:.2f}); per stratum: {strata_text(m)}. "
        "Other words: " + ", ".join(f"{w!r} {d:+.2f}%" for w, d in ev["other_drops_pct"].items())
        + f"; largest alive same-layer control drop {max(ev['control_drops_pct'].values(), default=float('nan')):.2f}%. "
        f"Specificity margin {v['specificity_margin']:+.2f} points (95% CI {v['specificity_margin_ci_low']:+.2f}.."
        f"{v['specificity_margin_ci_high']:+.2f}), control margin {v['control_margin']:+.2f} "
        f"({v['control_margin_ci_low']:+.2f}..{v['control_margin_ci_high']:+.2f}). "
        f"Context effect on ' women' {v['context_effect_nats']:.3f} nats. " + _scale(model))


def women_ppl(m, *, model: str) -> str:
    """The perplexity note of the label-selected prototype's edits (claim women-ablation-ppl)."""
    v, ev = m.values, m.evidence
    return (
        f"Perplexity on {v['ppl_blocks']} random validation blocks: {ev['ppl_intact']:.2f} intact, "
        f"{v['ppl_change_pct']:+.3f}% with {ev['prototype']} masked (95% CI "
        f"{v['ppl_ci_low_pct']:+.3f}..{v['ppl_ci_high_pct']:+.3f}); alive same-layer controls: "
        + ", ".join(f"{e.replace('control ', '')} {c:+.3f}%" for e, c in ev["control_ppl_change_pct"].items())
        + f"; target_vs_controls {v['target_vs_controls']:.2f} points (95% CI "
        f"{v['target_vs_controls_ci_low']:.2f}..{v['target_vs_controls_ci_high']:.2f}). " + _scale(model))


def women_scan(m, *, model: str) -> str:
    """The causal scan winner's note (claim women-causal-scan)."""
    v, ev = m.values, m.evidence
    return (
        f"Causal scan winner {ev['prototype']} ({ev['candidates_scanned']} prototypes, {ev['selection_contexts']} "
        f"training contexts; training drop {ev['selected_train_drop_pct']:.2f}%), class {ev['class']!r} (top write "
        f"tokens [{ev['label']['write_tokens']}]). Validation drop {v['drop_pct']:.2f}% (95% CI {v['ci_low_pct']:.2f}.."
        f"{v['ci_high_pct']:.2f}); per stratum: {strata_text(m)}. Other words: "
        + ", ".join(f"{w!r} {d:+.2f}%" for w, d in ev["other_drops_pct"].items())
        + f". Specificity margin {v['specificity_margin']:+.2f} points (95% CI {v['specificity_margin_ci_low']:+.2f}.."
        f"{v['specificity_margin_ci_high']:+.2f}), control margin {v['control_margin']:+.2f} "
        f"({v['control_margin_ci_low']:+.2f}..{v['control_margin_ci_high']:+.2f}). " + _scale(model))


def women_write_circuit(m, *, layer: int, prototype: int, train_drop_pct: float, model: str) -> str:
    """circuits.measure_write_circuit's note, with the untrained reference in ``m.evidence['untrained']``."""
    v, ev = m.values, m.evidence
    return (
        f"Selected L{layer} P{prototype} (notebook 06's rule; mask drop {train_drop_pct:.2f}% on training contexts). "
        f"Over {v['n_occurrences']} validation occurrences of ' women' the own embedding carries {v['embed_share']:.3f} "
        f"of the positive attribution of the centred write logit (mean centred logit "
        f"{ev['mean_centred_logit_word']:.3f}); at {ev['n_null_positions']} null positions (other tokens, write gate in "
        f"the top 5%) {ev['embed_share_null']:.3f}; difference {v['embed_share_margin']:+.3f} (95% CI "
        f"{v['embed_share_margin_ci_low']:.3f}..{v['embed_share_margin_ci_high']:.3f}); share 95% CI "
        f"{v['embed_share_ci_low']:.3f}..{v['embed_share_ci_high']:.3f}. Write selectivity "
        f"{v['write_selectivity']:.2f}; decomposition error {v['decomposition_error']:.1e}. By kind at the word: "
        + ", ".join(f"{k} {x:.3f}" for k, x in ev["share_by_kind"]["word"].items())
        + f". Untrained ProtoT of the same config, same (layer, prototype): embedding share "
        f"{ev['untrained']['embed_share']:.3f}, write selectivity {ev['untrained']['write_selectivity']:.2f}. "
        f"Model: {model}.")


def disentanglement_coverage(m, *, n_classes: int, match: int, threshold: float, sae_features: int, sae_k: int,
                             sae_layer: int, explained_variance: float) -> str:
    """disentangle.measure's note."""
    v = m.values
    return (
        f"Disentanglement (mean over units of 1 - normalised entropy of the class profile over {n_classes} frequent "
        f"token types): prototypes {v['d_prototypes']:.3f}, heads {v['d_heads']:.3f}, SAE features {v['d_sae']:.3f}; "
        f"coverage at {match} units (classes with a unit >= {threshold:g}x selective): {v['coverage_prototypes']:.3f}, "
        f"{v['coverage_heads']:.3f}, {v['coverage_sae']:.3f}. Gaps to the nulls: "
        + ", ".join(f"{k} {g:+.3f}" for k, g in m.evidence["null_gaps"].items())
        + f". SAE: {sae_features} features, k={sae_k}, after block {sae_layer}, explained "
        f"variance {explained_variance:.3f}. Our definitions, not the paper's; small CPU models.")


def generation_elo(m, *, prefix: int, continuation: int, judge: str, share_first: float, not_compared: Sequence[str],
                   seconds_per_judgement: float) -> str:
    """preference.measure's note."""
    v = m.values
    return (
        f"{v['n_prompts']} prompts ({prefix} + {continuation} tokens of validation text), judge {judge} "
        f"(A/B log-odds, both orders): order-consistent in {v['judge_order_consistency']:.1%} of pairs, the human "
        f"continuation's mean score {v['human_preference']:.3f}, answer A in {share_first:.1%} of judgements. "
        f"Elo gap ProtoT - LLaMA {v['elo_gap_llama']:+.1f} (95% interval {v['elo_gap_llama_ci_low']:+.1f} to "
        f"{v['elo_gap_llama_ci_high']:+.1f}); not compared: {', '.join(not_compared) or 'none'}. "
        f"{seconds_per_judgement:.2f} CPU s per judgement.")


def glue_cola(m, *, n_seeds: int, epochs: int, bow_mcc: float, learning_rates: Mapping) -> str:
    """cola.measure's note."""
    v = m.values
    return (f"CoLA validation ({v['n_dev']} sentences), mean of {n_seeds} seed(s) x "
            f"{epochs} epoch(s): ProtoT {v['protot_cola']:.1f} [{v['protot_cola_ci_low']:.1f}, "
            f"{v['protot_cola_ci_high']:.1f}], LLaMA {v['llama_cola']:.1f} [{v['llama_cola_ci_low']:.1f}, "
            f"{v['llama_cola_ci_high']:.1f}], gap {v['cola_gap_to_llama']:+.1f} [{v['cola_gap_to_llama_ci_low']:+.1f}, "
            f"{v['cola_gap_to_llama_ci_high']:+.1f}]; bag of words {bow_mcc:.1f}; "
            f"learning rates {learning_rates}.")
