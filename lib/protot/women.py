"""The women claims of the ProtoT paper (§6: masking or reinitialising the "women" prototype L9 P7
lowers p("women") with <1% perplexity change) and the compendium's weaker causal-scan form, measured
with the tools of :mod:`protot.ablation`: :func:`measure_women` gives ``protot/women-prototype-ablation``,
``protot/women-ablation-ppl`` and ``protot/women-causal-scan`` as :class:`compendium.claims.Measurement`
objects; :func:`women_settings` reads their registered protocol; :func:`effect_class` names what a
selected prototype's effect looks like.
"""
from __future__ import annotations

import math

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
    import inspect

    known = set(inspect.signature(measure_women).parameters)
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


@torch.no_grad()
def measure_women(model, tokenizer, train_stream: np.ndarray, val_stream: np.ndarray, *,
                  word: str = " women", pairs=FEMALE_PAIRS, male_words=MALE_WORDS, coordinators=COORDINATORS,
                  human_groups=HUMAN_GROUPS, gender_check_words=GENDER_CHECK_WORDS,
                  label_blocks: int = 48, label_context: int = 256, word_windows: int = 64, word_context: int = 64,
                  min_ratio: float = 2.0, min_top_share: float = 0.5, top: int = 10, min_count: int = 5,
                  floor: float = 0.1, select_windows: int = 48, select_context: int = 64,
                  context: int = 128, max_contexts: int | None = None, other_contexts: int = 64,
                  coordination_n: int = 64, gender_contexts: int = 48, n_controls: int | None = 8,
                  reinit_seeds=(0,), ppl_blocks: int = 128, ppl_context: int = 256, effect_context: int = 128,
                  short: int = 8, n_boot: int = 2000, seed: int = 0, model_name: str = "", batch_size: int = 16):
    """The women claims as :class:`compendium.claims.Measurement` objects:
    (``protot/women-prototype-ablation``, ``protot/women-ablation-ppl``, ``protot/women-causal-scan``).
    Every rule and number is the one registered in ``papers/protot/claims.yaml``; the arguments
    name them.

    1. Label (training split): alive prototypes (:func:`protot.usage.alive_mask` over
       ``label_blocks`` random blocks, ``floor``); :func:`protot.labels.word_gates` of every word
       of ``pairs`` (``word_windows`` windows of ``word_context`` tokens); the alive prototype whose
       write or read profile most singles out the female words (:func:`protot.labels.label_scores`,
       :func:`protot.labels.select_by_label`), and whether its label earns the name.
    2. Causal scan (training split): every (layer, prototype) masked on ``select_windows`` contexts
       of ``select_context`` tokens before ``word``; the largest drop of mean p(word) wins.
    3. Judgement (validation): the ``context`` tokens before every occurrence of ``word`` (at most
       ``max_contexts``), stratified (:func:`protot.ablation.stratify`: ``coordinators``; topical = a female or
       male word, or its capitalised form, in the window); :func:`protot.ablation.judge_edit` for each
       selected prototype, against ``human_groups`` and gender-free coordination contexts (validation)
       and ``gender_check_words`` (training: too rare in validation), with up to ``n_controls`` alive
       same-layer controls; :func:`protot.ablation.edit_margins`: its specificity margin (against the
       human groups and the coordination contexts) and control margin, with intervals over contexts.
    4. Perplexity (validation): ``ppl_blocks`` random blocks of ``ppl_context`` tokens, intact, with
       the label-selected prototype masked or reinitialised, and with each of its controls masked;
       :func:`protot.ablation.ppl_change_interval`.
    5. Power: :func:`protot.context_use.target_context_effect` of ``word``.
    """
    from compendium import claims
    from protot import context_use as cu
    from protot import labels as lb
    from protot.concepts import sample_blocks
    from protot.usage import alive_mask, dead_prototypes

    tid = token_id(tokenizer, word)
    L, R = model.config.num_hidden_layers, model.config.num_prototypes
    female = [a for a, _ in pairs]
    ids_of = lambda words: [token_id(tokenizer, w) for w in words]   # noqa: E731

    # 1. the prototype found by its label (training split)
    label_stats = collect_gates(model, sample_blocks(train_stream, label_blocks, label_context, seed=seed), batch_size=8)
    alive = alive_mask(label_stats, floor)
    gates = lb.word_gates(model, tokenizer, train_stream, [w for p in pairs for w in p], windows=word_windows,
                          context=word_context, seed=seed, batch_size=batch_size)
    scores = lb.label_scores(gates, pairs, alive)
    sel = lb.select_by_label(scores, label_stats, gates, female, top=top, min_count=min_count,
                             min_ratio=min_ratio, min_top_share=min_top_share)

    def label_of(layer, k):
        """(gate, score, top_share, labelled, write tokens, read tokens) of any prototype, by the same rule."""
        row = scores[(scores.layer == layer) & (scores.prototype == k)].iloc[0]   # its best gate
        share = lb.top_token_share(label_stats, gates, female, layer, k, row.gate, top=top, min_count=min_count)
        tt = {g: " | ".join(repr(t)[1:-1] for t in lb.top_tokens(label_stats, tokenizer, layer, k, gate=g, top=top,
                                                                 min_count=min_count)["token"]) for g in ("write", "read")}
        ctxs = " || ".join(lb.top_contexts(label_stats, tokenizer, layer, k, top=3).context)
        return {"gate": row.gate, "score": float(row.score), "top_share": share,
                "labelled": bool(row.score >= math.log(min_ratio) and share >= min_top_share),
                "write_tokens": tt["write"], "read_tokens": tt["read"], "top_contexts": ctxs, "alive": bool(alive[layer, k])}

    # 2. the causal scan (training split)
    sel_ctx = windows_at(train_stream, tid, select_context, where="before", max_windows=select_windows, seed=seed)
    if len(sel_ctx) < 8:
        raise ValueError(f"{word!r} has only {len(sel_ctx)} training contexts of {select_context} tokens; need >= 8")
    scan = mask_scan(model, sel_ctx, tid, [(l, k) for l in range(L) for k in range(R)], batch_size=batch_size)
    scan["alive"] = [bool(alive[l, k]) for l, k in zip(scan.layer, scan.prototype)]
    win = (int(scan.layer.iloc[0]), int(scan.prototype.iloc[0]))

    # 3. validation contexts, strata and the other words
    ctx = windows_at(val_stream, tid, context, where="before", max_windows=max_contexts, seed=seed)
    if len(ctx) < 10:
        raise ValueError(f"{word!r} has only {len(ctx)} validation contexts of {context} tokens; need >= 10")
    gender_ids = word_ids(tokenizer, female + list(male_words), capitalised=True)
    strata = stratify(ctx, ids_of(coordinators), gender_ids)
    main = ContextSet(word, ctx, tid, "validation")
    others = []
    for w in human_groups:
        c = windows_at(val_stream, token_id(tokenizer, w), context, where="before", max_windows=other_contexts, seed=seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "validation"))
    cc, ct = coordination_contexts(val_stream, tokenizer, context, coordination_n, coordinator_ids=ids_of(coordinators),
                                   exclude_ids=gender_ids + word_ids(tokenizer, human_groups, capitalised=True), seed=seed)
    others.append(ContextSet("gender-free coordination", cc, ct, "validation"))
    for w in gender_check_words:
        c = windows_at(train_stream, token_id(tokenizer, w), context, where="before", max_windows=gender_contexts, seed=seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "train"))
    for s in [main, *others]:
        if len(s.contexts) < 5:
            raise ValueError(f"{s.name!r} has only {len(s.contexts)} {s.split} contexts of {context} tokens; need >= 5")
        s.p_intact = target_probs(model, s.contexts, s.target, batch_size)
    checked = [word for word in [o.name for o in others] if word not in gender_check_words]

    judged = {}
    for key, (layer, k) in (("label", (sel.layer, sel.prototype)), ("scan", win)):
        if (layer, k) in [v["at"] for v in judged.values()]:
            judged[key] = next(v for v in judged.values() if v["at"] == (layer, k))
            continue
        controls = alive_controls(alive, layer, k, n_controls, seed)
        j = judge_edit(model, main, strata, others, layer, k, controls=controls, reinit_seeds=reinit_seeds,
                       n_boot=n_boot, seed=seed, batch_size=batch_size)
        j.update(at=(layer, k), controls_at=controls, label=label_of(layer, k),
                 margins=edit_margins(j, checked, n_boot=n_boot, seed=seed))
        j["class"] = effect_class(j["label"]["labelled"], j["strata"])
        judged[key] = j

    # 4. perplexity on random validation blocks: the label-selected prototype and its controls
    blocks = sample_blocks(val_stream, ppl_blocks, ppl_context, seed=seed)
    nll0 = block_nll(model, blocks)
    lab = judged["label"]
    ppl_rows = []
    edits = [Edit("mask", sel.layer, sel.prototype, name="selected: mask")]
    edits += [Edit("reinit", sel.layer, sel.prototype, seed=s, name=f"selected: reinit seed {s}") for s in reinit_seeds]
    edits += [Edit("mask", sel.layer, j, name=f"control L{sel.layer} P{j}") for j in lab["controls_at"]]
    for e in edits:
        with edited(model, e):
            ch, lo, hi = ppl_change_interval(nll0, block_nll(model, blocks), ppl_context - 1, n_boot=n_boot, seed=seed)
        ppl_rows.append({"edit": e.label(), "layer": e.layer, "prototype": e.k, "ppl_change_pct": ch,
                         "ci_low_pct": lo, "ci_high_pct": hi})
    ppl_df = pd.DataFrame(ppl_rows)
    ppl_intact = float(math.exp(nll0.sum() / (len(nll0) * (ppl_context - 1))))

    # 5. power
    eff_df, eff, eff_ci = cu.target_context_effect(model, val_stream, tokenizer, word, context=effect_context,
                                                   short=short, max_contexts=None, batch_size=batch_size,
                                                   n_boot=n_boot, seed=seed)

    def strata_table(key):
        j = judged[key]
        return j["strata"].assign(prototype=f"L{j['at'][0]} P{j['at'][1]}", selected_by=key)

    strata_df = pd.concat([strata_table("label"), strata_table("scan")], ignore_index=True)
    if judged["label"] is judged["scan"]:
        strata_df = strata_table("label").assign(selected_by="label and scan")
    config = {"model": model_name, "word": word, "pairs": [list(p) for p in pairs], "male_words": list(male_words),
              "coordinators": list(coordinators), "human_groups": list(human_groups),
              "gender_check_words": list(gender_check_words), "label_blocks": label_blocks,
              "label_context": label_context, "word_windows": word_windows, "word_context": word_context,
              "min_ratio": min_ratio, "min_top_share": min_top_share, "top": top, "min_count": min_count,
              "dead_floor": floor, "select_windows": select_windows, "select_context": select_context,
              "context": context, "max_contexts": max_contexts, "other_contexts": other_contexts,
              "coordination_contexts": coordination_n, "gender_contexts": gender_contexts, "n_controls": n_controls,
              "reinit_seeds": list(reinit_seeds), "ppl_blocks": ppl_blocks, "ppl_context": ppl_context,
              "effect_context": effect_context, "short": short, "n_boot": n_boot, "seed": seed}
    power = {"context_effect_nats": eff}
    power_ev = {"context_effect_ci_low": eff_ci[0], "context_effect_ci_high": eff_ci[1],
                "context_effect_occurrences": len(eff_df), "validation_contexts": len(ctx),
                "strata_counts": {s: int((strata == s).sum()) for s in STRATA},
                "dead_prototypes": int((~alive).sum()), "alive_per_layer": [int(a.sum()) for a in alive]}

    def values_of(j):
        st = j["strata"].set_index("stratum")
        v = {"drop_pct": j["overall"]["drop_pct"], "ci_low_pct": j["overall"]["ci_low_pct"],
             "ci_high_pct": j["overall"]["ci_high_pct"], **j["margins"], "n_contexts": int(j["overall"]["contexts"])}
        for s in STRATA:
            v |= {f"{s}_drop_pct": float(st.loc[s, "drop_pct"]), f"{s}_ci_low_pct": float(st.loc[s, "ci_low_pct"]),
                  f"{s}_ci_high_pct": float(st.loc[s, "ci_high_pct"]), f"{s}_contexts": int(st.loc[s, "contexts"])}
        return v

    def evidence_of(j):
        return {"prototype": f"L{j['at'][0]} P{j['at'][1]}", "label": j["label"], "class": j["class"],
                "reinit_drop_pct": [r["drop_pct"] for r in j["reinit"]],
                "other_drops_pct": {r.word: r.drop_pct for r in j["others"].itertuples()},
                "control_drops_pct": {f"L{r.layer} P{r.prototype}": r.drop_pct for r in j["controls"].itertuples()},
                "p_intact": j["overall"]["p_intact"], "p_masked": j["overall"]["p_edited"]}

    scores_top = scores.head(20).copy()
    ablation_m = claims.Measurement(
        claim="protot/women-prototype-ablation",
        values={**values_of(lab), **power, "labelled_female": bool(sel.labelled)},
        evidence={**evidence_of(lab), **power_ev, "selection_score": sel.score, "selection_gate": sel.gate,
                  "female_top_share": sel.top_share, "runner_up": f"L{int(scores[scores.alive].layer.iloc[1])} "
                  f"P{int(scores[scores.alive].prototype.iloc[1])} ({scores[scores.alive].gate.iloc[1]})"},
        tables={"women_label_scores": scores_top, "women_strata": strata_df,
                "women_specificity": lab["others"].assign(prototype=f"L{sel.layer} P{sel.prototype}"),
                "women_controls": lab["controls"], "dead_prototypes": dead_prototypes(label_stats, floor)},
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
        values={**values_of(sj), **power},
        evidence={**evidence_of(sj), **power_ev, "selected_train_drop_pct": float(scan.drop_pct.iloc[0]),
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
