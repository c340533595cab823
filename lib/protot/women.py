"""The women claims of the ProtoT paper (§6: masking or reinitialising the "women" prototype L9 P7
lowers p("women") with <1% perplexity change) and the compendium's weaker causal-scan form, measured
with the tools of :mod:`protot.ablation`: :func:`measure_women` gives ``protot/women-prototype-ablation``,
``protot/women-ablation-ppl`` and ``protot/women-causal-scan`` as :class:`compendium.claims.Measurement`
objects; :func:`women_settings` reads their registered protocol; :func:`effect_class` names what a
selected prototype's effect looks like.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd
import torch

from protot.ablation import (
    COORDINATORS, FEMALE_PAIRS, GENDER_CHECK_WORDS, HUMAN_GROUPS, MALE_WORDS, STRATA, ContextSet, Edit, alive_controls,
    block_nll, coordination_contexts, edit_margins, edited, judge_edit, mask_scan, ppl_change_interval, stratify,
    target_probs, word_ids,
)
from protot.concepts import collect_gates, token_id, windows_at


def effect_class(labelled: bool, strata: pd.DataFrame) -> str:
    """"female" when ``labelled``; else "coordination" when the coordination stratum's interval lies
    above 0 and neither the topical nor the rest stratum's does; else "other"."""
    if labelled:
        return "female"
    above = {r.stratum: bool(np.isfinite(r.ci_low_pct) and r.ci_low_pct > 0) for r in strata.itertuples()}
    if above.get("coordination") and not above.get("topical") and not above.get("rest"):
        return "coordination"
    return "other"


_DESCRIPTIVE = frozenset({"model", "word", "selection", "aggregation"})


def women_settings(protocol: dict, *, seed: int) -> dict:
    """The keyword arguments of :func:`measure_women` from the women claims' registered protocol
    (``claims.protocol("protot/women-prototype-ablation", profile)``): every sample size and context
    length as registered; ``n_controls: all`` means every alive control; ``n_reinit: k`` gives the
    reinitialisation seeds ``seed .. seed + k - 1``. The descriptive entries (model, word, selection,
    aggregation) are read by the notebook. A setting :func:`measure_women` does not take is an error."""
    known = {f.name for f in fields(WomenSettings)}
    out = {}
    for key, value in protocol.items():
        if key in _DESCRIPTIVE:
            continue
        if key == "n_reinit":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"women protocol: n_reinit must be a positive whole number, got {value!r}")
            out["reinit_seeds"] = tuple(range(seed, seed + value))
        elif key == "n_controls" and value == "all":
            out["n_controls"] = None
        elif key in known and key not in ("word", "seed", "model_name"):
            out[key] = value
        else:
            raise ValueError(f"women protocol: unknown setting {key!r}; measure_women takes "
                             f"{', '.join(sorted(known - {'model', 'tokenizer', 'train_stream', 'val_stream'}))}")
    return out


@dataclass(frozen=True)
class WomenSettings:
    """Every setting of :func:`measure_women` (the registered protocol's, :func:`women_settings`), by step:
    the word and its word lists; 1. the label (training split); 2. the causal scan (training split);
    3. the validation contexts, strata, other words and controls; 4. perplexity; 5. power; the rest."""
    word: str = " women"
    pairs: tuple = FEMALE_PAIRS
    male_words: tuple = MALE_WORDS
    coordinators: tuple = COORDINATORS
    human_groups: tuple = HUMAN_GROUPS
    gender_check_words: tuple = GENDER_CHECK_WORDS
    # 1. label
    label_blocks: int = 48
    label_context: int = 256
    word_windows: int = 64
    word_context: int = 64
    min_ratio: float = 2.0
    min_top_share: float = 0.5
    top: int = 10
    min_count: int = 5
    floor: float = 0.1
    # 2. causal scan
    select_windows: int = 48
    select_context: int = 64
    # 3. judgement: contexts, strata, other words, controls
    context: int = 128
    max_contexts: int | None = None
    other_contexts: int = 64
    coordination_n: int = 64
    gender_contexts: int = 48
    n_controls: int | None = 8
    reinit_seeds: tuple = (0,)
    # 4. perplexity
    ppl_blocks: int = 128
    ppl_context: int = 256
    # 5. power
    effect_context: int = 128
    short: int = 8
    # shared
    n_boot: int = 2000
    seed: int = 0
    model_name: str = ""
    batch_size: int = 16

    def config(self) -> dict:
        """The measurement's recorded config (the keys and forms the results have always had)."""
        return {"model": self.model_name, "word": self.word, "pairs": [list(p) for p in self.pairs],
                "male_words": list(self.male_words), "coordinators": list(self.coordinators),
                "human_groups": list(self.human_groups), "gender_check_words": list(self.gender_check_words),
                "label_blocks": self.label_blocks, "label_context": self.label_context,
                "word_windows": self.word_windows, "word_context": self.word_context, "min_ratio": self.min_ratio,
                "min_top_share": self.min_top_share, "top": self.top, "min_count": self.min_count,
                "dead_floor": self.floor, "select_windows": self.select_windows,
                "select_context": self.select_context, "context": self.context, "max_contexts": self.max_contexts,
                "other_contexts": self.other_contexts, "coordination_contexts": self.coordination_n,
                "gender_contexts": self.gender_contexts, "n_controls": self.n_controls,
                "reinit_seeds": list(self.reinit_seeds), "ppl_blocks": self.ppl_blocks,
                "ppl_context": self.ppl_context, "effect_context": self.effect_context, "short": self.short,
                "n_boot": self.n_boot, "seed": self.seed}


@dataclass
class LabelStep:
    """Step 1's outputs: the gates of the label sample, the alive mask, the word gates, the label scores
    and the selection (:func:`protot.labels.select_by_label`)."""
    stats: object
    alive: np.ndarray
    gates: object
    scores: pd.DataFrame
    selection: object


def select_by_label(model, tokenizer, train_stream: np.ndarray, s: WomenSettings) -> LabelStep:
    """1. The prototype found by its label (training split): alive prototypes over ``label_blocks``
    random blocks; the word gates of every word of ``pairs``; the alive prototype whose write or read
    profile most singles out the female words, and whether its label earns the name."""
    from protot import labels as lb
    from protot.concepts import sample_blocks
    from protot.usage import alive_mask

    female = [a for a, _ in s.pairs]
    stats = collect_gates(model, sample_blocks(train_stream, s.label_blocks, s.label_context, seed=s.seed), batch_size=8)
    alive = alive_mask(stats, s.floor)
    gates = lb.word_gates(model, tokenizer, train_stream, [w for p in s.pairs for w in p], windows=s.word_windows,
                          context=s.word_context, seed=s.seed, batch_size=s.batch_size)
    scores = lb.label_scores(gates, s.pairs, alive)
    sel = lb.select_by_label(scores, stats, gates, female, top=s.top, min_count=s.min_count, min_ratio=s.min_ratio,
                             min_top_share=s.min_top_share)
    return LabelStep(stats, alive, gates, scores, sel)


def label_of(step: LabelStep, tokenizer, layer: int, k: int, s: WomenSettings) -> dict:
    """(gate, score, top_share, labelled, write tokens, read tokens, contexts, alive) of any prototype,
    by step 1's rule."""
    from protot import labels as lb

    female = [a for a, _ in s.pairs]
    scores, stats = step.scores, step.stats
    row = scores[(scores.layer == layer) & (scores.prototype == k)].iloc[0]   # its best gate
    share = lb.top_token_share(stats, step.gates, female, layer, k, row.gate, top=s.top, min_count=s.min_count)
    tt = {g: " | ".join(repr(t)[1:-1] for t in lb.top_tokens(stats, tokenizer, layer, k, gate=g, top=s.top,
                                                             min_count=s.min_count)["token"]) for g in ("write", "read")}
    ctxs = " || ".join(lb.top_contexts(stats, tokenizer, layer, k, top=3).context)
    return {"gate": row.gate, "score": float(row.score), "top_share": share,
            "labelled": bool(row.score >= math.log(s.min_ratio) and share >= s.min_top_share),
            "write_tokens": tt["write"], "read_tokens": tt["read"], "top_contexts": ctxs, "alive": bool(step.alive[layer, k])}


def causal_scan(model, train_stream: np.ndarray, tid: int, alive: np.ndarray, s: WomenSettings):
    """2. The causal scan (training split): every (layer, prototype) masked on ``select_windows`` contexts
    of ``select_context`` tokens before the word; the largest drop of mean p(word) wins. Returns
    (the contexts, the scan table with an ``alive`` column, the winner (layer, prototype))."""
    L, R = model.config.num_hidden_layers, model.config.num_prototypes
    sel_ctx = windows_at(train_stream, tid, s.select_context, where="before", max_windows=s.select_windows, seed=s.seed)
    if len(sel_ctx) < 8:
        raise ValueError(f"{s.word!r} has only {len(sel_ctx)} training contexts of {s.select_context} tokens; need >= 8")
    scan = mask_scan(model, sel_ctx, tid, [(l, k) for l in range(L) for k in range(R)], batch_size=s.batch_size)
    scan["alive"] = [bool(alive[l, k]) for l, k in zip(scan.layer, scan.prototype)]
    return sel_ctx, scan, (int(scan.layer.iloc[0]), int(scan.prototype.iloc[0]))


def judgement_contexts(model, tokenizer, train_stream: np.ndarray, val_stream: np.ndarray, tid: int,
                       s: WomenSettings):
    """3a. The validation contexts before every occurrence of the word (at most ``max_contexts``), their
    strata, and the other words' context sets (human groups and gender-free coordination on validation,
    ``gender_check_words`` on training), each with its intact p(target). Returns (main, strata, others,
    the names the specificity margin compares with)."""
    ids_of = lambda words: [token_id(tokenizer, w) for w in words]   # noqa: E731
    female = [a for a, _ in s.pairs]
    ctx = windows_at(val_stream, tid, s.context, where="before", max_windows=s.max_contexts, seed=s.seed)
    if len(ctx) < 10:
        raise ValueError(f"{s.word!r} has only {len(ctx)} validation contexts of {s.context} tokens; need >= 10")
    gender_ids = word_ids(tokenizer, female + list(s.male_words), capitalised=True)
    strata = stratify(ctx, ids_of(s.coordinators), gender_ids)
    main = ContextSet(s.word, ctx, tid, "validation")
    others = []
    for w in s.human_groups:
        c = windows_at(val_stream, token_id(tokenizer, w), s.context, where="before", max_windows=s.other_contexts,
                       seed=s.seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "validation"))
    cc, ct = coordination_contexts(val_stream, tokenizer, s.context, s.coordination_n,
                                   coordinator_ids=ids_of(s.coordinators),
                                   exclude_ids=gender_ids + word_ids(tokenizer, s.human_groups, capitalised=True),
                                   seed=s.seed)
    others.append(ContextSet("gender-free coordination", cc, ct, "validation"))
    for w in s.gender_check_words:
        c = windows_at(train_stream, token_id(tokenizer, w), s.context, where="before", max_windows=s.gender_contexts,
                       seed=s.seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "train"))
    for cs in [main, *others]:
        if len(cs.contexts) < 5:
            raise ValueError(f"{cs.name!r} has only {len(cs.contexts)} {cs.split} contexts of {s.context} tokens; "
                             "need >= 5")
        cs.p_intact = target_probs(model, cs.contexts, cs.target, s.batch_size)
    checked = [name for name in [o.name for o in others] if name not in s.gender_check_words]
    return main, strata, others, checked


def judge_selections(model, tokenizer, step: LabelStep, winner, main, strata, others, checked,
                     s: WomenSettings) -> dict:
    """3b. :func:`protot.ablation.judge_edit` of the label-selected prototype and of the scan's winner (one
    judgement when they are the same prototype), each with up to ``n_controls`` alive same-layer
    controls, its label, its margins (:func:`protot.ablation.edit_margins`) and its effect class."""
    judged = {}
    for key, (layer, k) in (("label", (step.selection.layer, step.selection.prototype)), ("scan", winner)):
        if (layer, k) in [v["at"] for v in judged.values()]:
            judged[key] = next(v for v in judged.values() if v["at"] == (layer, k))
            continue
        controls = alive_controls(step.alive, layer, k, s.n_controls, s.seed)
        j = judge_edit(model, main, strata, others, layer, k, controls=controls, reinit_seeds=s.reinit_seeds,
                       n_boot=s.n_boot, seed=s.seed, batch_size=s.batch_size)
        j.update(at=(layer, k), controls_at=controls, label=label_of(step, tokenizer, layer, k, s),
                 margins=edit_margins(j, checked, n_boot=s.n_boot, seed=s.seed))
        j["class"] = effect_class(j["label"]["labelled"], j["strata"])
        judged[key] = j
    return judged


def perplexity_of_edits(model, val_stream: np.ndarray, sel, controls_at, s: WomenSettings):
    """4. Perplexity on ``ppl_blocks`` random validation blocks of ``ppl_context`` tokens: intact, with the
    label-selected prototype masked or reinitialised, and with each of its controls masked
    (:func:`protot.ablation.ppl_change_interval`). Returns (the blocks, the table, the intact perplexity)."""
    from protot.concepts import sample_blocks

    blocks = sample_blocks(val_stream, s.ppl_blocks, s.ppl_context, seed=s.seed)
    nll0 = block_nll(model, blocks)
    ppl_rows = []
    edits = [Edit("mask", sel.layer, sel.prototype, name="selected: mask")]
    edits += [Edit("reinit", sel.layer, sel.prototype, seed=r, name=f"selected: reinit seed {r}") for r in s.reinit_seeds]
    edits += [Edit("mask", sel.layer, j, name=f"control L{sel.layer} P{j}") for j in controls_at]
    for e in edits:
        with edited(model, e):
            ch, lo, hi = ppl_change_interval(nll0, block_nll(model, blocks), s.ppl_context - 1, n_boot=s.n_boot,
                                             seed=s.seed)
        ppl_rows.append({"edit": e.label(), "layer": e.layer, "prototype": e.k, "ppl_change_pct": ch,
                         "ci_low_pct": lo, "ci_high_pct": hi})
    ppl_intact = float(math.exp(nll0.sum() / (len(nll0) * (s.ppl_context - 1))))
    return blocks, pd.DataFrame(ppl_rows), ppl_intact


def _values_of(j) -> dict:
    st = j["strata"].set_index("stratum")
    v = {"drop_pct": j["overall"]["drop_pct"], "ci_low_pct": j["overall"]["ci_low_pct"],
         "ci_high_pct": j["overall"]["ci_high_pct"], **j["margins"], "n_contexts": int(j["overall"]["contexts"])}
    for stratum in STRATA:
        v |= {f"{stratum}_drop_pct": float(st.loc[stratum, "drop_pct"]),
              f"{stratum}_ci_low_pct": float(st.loc[stratum, "ci_low_pct"]),
              f"{stratum}_ci_high_pct": float(st.loc[stratum, "ci_high_pct"]),
              f"{stratum}_contexts": int(st.loc[stratum, "contexts"])}
    return v


def _evidence_of(j) -> dict:
    return {"prototype": f"L{j['at'][0]} P{j['at'][1]}", "label": j["label"], "class": j["class"],
            "reinit_drop_pct": [r["drop_pct"] for r in j["reinit"]],
            "other_drops_pct": {r.word: r.drop_pct for r in j["others"].itertuples()},
            "control_drops_pct": {f"L{r.layer} P{r.prototype}": r.drop_pct for r in j["controls"].itertuples()},
            "p_intact": j["overall"]["p_intact"], "p_masked": j["overall"]["p_edited"]}


def _strata_table(judged: dict) -> pd.DataFrame:
    def one(key):
        j = judged[key]
        return j["strata"].assign(prototype=f"L{j['at'][0]} P{j['at'][1]}", selected_by=key)

    if judged["label"] is judged["scan"]:
        return one("label").assign(selected_by="label and scan")
    return pd.concat([one("label"), one("scan")], ignore_index=True)


@torch.no_grad()
def measure_women(model, tokenizer, train_stream: np.ndarray, val_stream: np.ndarray,
                  settings: WomenSettings | None = None, **overrides):
    """The women claims as :class:`compendium.claims.Measurement` objects:
    (``protot/women-prototype-ablation``, ``protot/women-ablation-ppl``, ``protot/women-causal-scan``).
    Every rule and number is the one registered in ``papers/protot/claims.yaml``; ``settings``
    (:class:`WomenSettings`, with ``overrides`` by field name) names them. The steps, in order:

    1. :func:`select_by_label` (training split); 2. :func:`causal_scan` (training split);
    3. :func:`judgement_contexts` and :func:`judge_selections` (validation: strata, specificity against
       human groups, gender-free coordination and ``gender_check_words``, alive same-layer controls);
    4. :func:`perplexity_of_edits` (validation blocks); 5. power:
       :func:`protot.context_use.target_context_effect` of the word.
    """
    from compendium import claims
    from protot import context_use as cu
    from protot.usage import dead_prototypes

    s = replace(settings or WomenSettings(), **overrides)
    tid = token_id(tokenizer, s.word)
    step = select_by_label(model, tokenizer, train_stream, s)                              # 1
    sel, scores, alive = step.selection, step.scores, step.alive
    sel_ctx, scan, winner = causal_scan(model, train_stream, tid, alive, s)                # 2
    main, strata, others, checked = judgement_contexts(model, tokenizer, train_stream, val_stream, tid, s)   # 3
    judged = judge_selections(model, tokenizer, step, winner, main, strata, others, checked, s)
    lab = judged["label"]
    blocks, ppl_df, ppl_intact = perplexity_of_edits(model, val_stream, sel, lab["controls_at"], s)           # 4
    eff_df, eff, eff_ci = cu.target_context_effect(model, val_stream, tokenizer, s.word, context=s.effect_context,  # 5
                                                   short=s.short, max_contexts=None, batch_size=s.batch_size,
                                                   n_boot=s.n_boot, seed=s.seed)

    strata_df = _strata_table(judged)
    config = s.config()
    power = {"context_effect_nats": eff}
    power_ev = {"context_effect_ci_low": eff_ci[0], "context_effect_ci_high": eff_ci[1],
                "context_effect_occurrences": len(eff_df), "validation_contexts": len(main.contexts),
                "strata_counts": {st: int((strata == st).sum()) for st in STRATA},
                "dead_prototypes": int((~alive).sum()), "alive_per_layer": [int(a.sum()) for a in alive]}
    ablation_m = claims.Measurement(
        claim="protot/women-prototype-ablation",
        values={**_values_of(lab), **power, "labelled_female": bool(sel.labelled)},
        evidence={**_evidence_of(lab), **power_ev, "selection_score": sel.score, "selection_gate": sel.gate,
                  "female_top_share": sel.top_share, "runner_up": f"L{int(scores[scores.alive].layer.iloc[1])} "
                  f"P{int(scores[scores.alive].prototype.iloc[1])} ({scores[scores.alive].gate.iloc[1]})"},
        tables={"women_label_scores": scores.head(20).copy(), "women_strata": strata_df,
                "women_specificity": lab["others"].assign(prototype=f"L{sel.layer} P{sel.prototype}"),
                "women_controls": lab["controls"], "dead_prototypes": dead_prototypes(step.stats, s.floor)},
        config=config)
    mask_ppl = ppl_df.iloc[0]
    ctrl_ppl = ppl_df[ppl_df.edit.str.startswith("control")]
    ppl_m = claims.Measurement(
        claim="protot/women-ablation-ppl",
        values={"ppl_change_pct": float(mask_ppl.ppl_change_pct), "ppl_ci_low_pct": float(mask_ppl.ci_low_pct),
                "ppl_ci_high_pct": float(mask_ppl.ci_high_pct), "ppl_blocks": int(len(blocks)),
                "target_vs_controls": lab["margins"]["control_margin"],
                "target_vs_controls_ci_low": lab["margins"]["control_margin_ci_low"],
                "target_vs_controls_ci_high": lab["margins"]["control_margin_ci_high"], "drop_pct": lab["overall"]["drop_pct"],
                "labelled_female": bool(sel.labelled), **power},
        evidence={"prototype": f"L{sel.layer} P{sel.prototype}", "ppl_intact": ppl_intact,
                  "reinit_ppl_change_pct": [float(x) for x in ppl_df[ppl_df.edit.str.contains("reinit")].ppl_change_pct],
                  "control_ppl_change_pct": {r.edit: r.ppl_change_pct for r in ctrl_ppl.itertuples()},
                  "controls_costlier": int((ctrl_ppl.ppl_change_pct >= mask_ppl.ppl_change_pct).sum()),
                  **power_ev},
        tables={"women_ppl": ppl_df}, config=config)
    sj = judged["scan"]
    scan_m = claims.Measurement(
        claim="protot/women-causal-scan",
        values={**_values_of(sj), **power},
        evidence={**_evidence_of(sj), **power_ev, "selected_train_drop_pct": float(scan.drop_pct.iloc[0]),
                  "runner_up": f"L{int(scan.layer.iloc[1])} P{int(scan.prototype.iloc[1])}",
                  "runner_up_train_drop_pct": float(scan.drop_pct.iloc[1]), "candidates_scanned": len(scan),
                  "selection_contexts": len(sel_ctx)},
        tables={"women_selection_scan": scan, "women_scan_specificity": sj["others"], "women_scan_controls": sj["controls"]},
        config=config)
    return ablation_m, ppl_m, scan_m


def specificity_table(label_m, scan_m) -> pd.DataFrame:
    """The drops of p(word) under each selection's mask on the specificity words, one frame: the label-
    selected prototype's (``women_specificity``) then the scan winner's (``women_scan_specificity``),
    with a ``selected_by`` column ("label", "scan")."""
    return pd.concat([label_m.tables["women_specificity"].assign(selected_by="label"),
                      scan_m.tables["women_scan_specificity"].assign(selected_by="scan")])
