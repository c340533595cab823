"""Multilingual IOI (en, es, fr, pt): prompts, circuit component/signal sets, language distances.

The templates, places, objects and the choice of names are OURS, written for this compendium
(``data/names/ioi_multilingual_templates.json``): the ACC++ authors' multilingual templates and
names are not public. English templates are six of the IOI BABA templates (indices in
``en_template_indices``); the Spanish, French and Portuguese ones are our translations of them,
index for index, and places/objects are parallel lists too, so a prompt built from the same
(template, order, names, place, object) differs between languages only by the language.
ABBA mirrors come from the same rule as :mod:`accpp.datasets`. Names: per-language Faker lists
(``first_names.json``) or the ``shared_names`` list (the same spelling in all four languages),
always filtered to names that are ONE token (with the leading space) for the tokenizer in use;
an explicit multi-token name raises :class:`accpp.datasets.MultiTokenName`.

Circuit sets (position-free, since token positions differ between languages):
- components: ``A{l}.{h}`` for every head firing node and ``M{l}`` for every MLP node;
- edges: (sender, receiver head, side) for every signal edge;
- signals: (sender, receiver head, side, k) for every singular index k the edge keeps.
Senders are ``A{l}.{h}``, ``M{l}``, ``E`` (embedding), ``B{l}`` (bias), ``O{l}.{h}`` (offset).
"""
from __future__ import annotations

import json
import random
from functools import lru_cache

import numpy as np
import pandas as pd

from accpp.datasets import IOIPrompt, load_names, make_prompt, single_token_names

__all__ = ["LANGUAGES", "load", "language_names", "shared_names", "ml_prompt", "language_set", "parallel_sets",
           "component_set", "edge_set", "signal_set", "jaccard", "language_distances", "mean_offdiag",
           "closest_pair", "closest_pair_stable", "average_linkage", "draw_dendrogram", "null_sets", "chance_jaccard",
           "adjusted_jaccard", "reuse_vs_null", "specificity_gap", "closest_pair_bootstrap",
           "measure_component_reuse", "measure_es_pt_closest"]

LANGUAGES = ("en", "es", "fr", "pt")


@lru_cache(maxsize=1)
def _load_text() -> str:
    from compendium import paths

    return (paths.data_dir() / "names" / "ioi_multilingual_templates.json").read_text(encoding="utf-8")


def load() -> dict:
    """The multilingual template data (a fresh copy)."""
    return json.loads(_load_text())


def _lang(lang: str) -> dict:
    data = load()["languages"]
    if lang not in data:
        raise ValueError(f"unknown language {lang!r}; known: {sorted(data)}")
    return data[lang]


def language_names(tokenizer, lang: str) -> list[str]:
    """The language's names that are single tokens for ``tokenizer`` (deduplicated, list order)."""
    spec = _lang(lang)
    names = [n for src in spec["name_sources"] for n in load_names(src)]
    names = [n for n in dict.fromkeys(names) if not any(n.startswith(p) for p in spec["exclude_name_prefixes"])]
    return single_token_names(tokenizer, names)


def shared_names(tokenizer) -> list[str]:
    """Names spelled the same in all four languages, single tokens for ``tokenizer``."""
    excl = tuple(p for lang in LANGUAGES for p in _lang(lang)["exclude_name_prefixes"])
    return single_token_names(tokenizer, [n for n in load()["shared_names"] if not n.startswith(excl)])


def ml_prompt(tokenizer, lang: str, template: int, order: str, io: str, s: str, place: int, obj: int) -> IOIPrompt:
    """One IOI prompt in ``lang``; ``place`` and ``obj`` are indices into the parallel lists."""
    spec = _lang(lang)
    return make_prompt(tokenizer, template, order, io, s, spec["places"][place], spec["objects"][obj],
                       templates={"ioi_baba_templates": spec["templates"]})


def _draws(rng: random.Random, n: int, n_templates: int, n_places: int, n_objects: int) -> list[tuple]:
    return [(rng.randrange(n_templates), rng.choice(("ABBA", "BABA")), rng.randrange(n_places),
             rng.randrange(n_objects), rng.random()) for _ in range(n)]


def language_set(tokenizer, lang: str, n: int, seed: int = 0) -> list[IOIPrompt]:
    """n prompts in ``lang`` with the language's own names; template/order/place/object draws are
    the same for every language given the seed (only the names differ)."""
    spec = _lang(lang)
    names = language_names(tokenizer, lang)
    draws = _draws(random.Random(seed), n, len(spec["templates"]), len(spec["places"]), len(spec["objects"]))
    name_rng = random.Random(f"{seed}-{lang}")
    out = []
    for t, order, p, o, _ in draws:
        io, s = name_rng.sample(names, 2)
        out.append(ml_prompt(tokenizer, lang, t, order, io, s, p, o))
    return out


def parallel_sets(tokenizer, n: int, seed: int = 0, languages=LANGUAGES) -> dict[str, list[IOIPrompt]]:
    """n prompts per language, prompt i identical across languages up to translation: same template,
    order, place, object and the same (IO, S) pair from :func:`shared_names`. Templates cycle
    through all of them and orders alternate (flipping every cycle), so small n covers both orders
    and 2 x (number of templates) prompts cover every (template, order) cell."""
    rows = _parallel_rows(tokenizer, n, seed, languages)
    return {lang: [ml_prompt(tokenizer, lang, t, order, io, s, p, o) for t, order, p, o, io, s in rows]
            for lang in languages}


def _parallel_rows(tokenizer, n: int, seed: int, languages) -> list[tuple]:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    spec = _lang(languages[0])
    names = shared_names(tokenizer)
    if len(names) < 2:
        raise ValueError("fewer than two shared names are single tokens for this tokenizer")
    rng = random.Random(seed)
    k = len(spec["templates"])
    rows = []
    for i in range(n):
        io, s = rng.sample(names, 2)
        # templates cycle; the order alternates and flips every cycle, so 2k prompts cover every
        # (template, order) cell once (with k even a plain alternation would pair each template with one order)
        rows.append((i % k, ("BABA", "ABBA")[(i + i // k) % 2], rng.randrange(len(spec["places"])),
                     rng.randrange(len(spec["objects"])), io, s))
    return rows


def null_sets(tokenizer, n: int, seed: int = 0, languages=LANGUAGES) -> dict[str, list[IOIPrompt]]:
    """The within-language null of :func:`parallel_sets`: prompt i has the same template, order,
    place and object as prompt i there, in the same language, with another (IO, S) pair of shared
    names (neither name in the original pair; seeded). Comparing a circuit with its null counterpart
    measures how much circuits change when only the names change, at the same circuit sizes."""
    rows = _parallel_rows(tokenizer, n, seed, languages)
    names = shared_names(tokenizer)
    if len(names) < 4:
        raise ValueError("the null needs at least four shared single-token names")
    rng = random.Random(f"{seed}-null")
    out_rows = []
    for t, order, p, o, io, s in rows:
        io2, s2 = rng.sample([x for x in names if x not in (io, s)], 2)
        out_rows.append((t, order, p, o, io2, s2))
    return {lang: [ml_prompt(tokenizer, lang, t, order, io, s, p, o) for t, order, p, o, io, s in out_rows]
            for lang in languages}


# ---------------------------------------------------------------- circuit sets and distances

def _label(d: dict) -> str:
    """Position-free component name (accpp.graph.component_name)."""
    from accpp.graph import component_name

    return component_name(d)


def component_set(g) -> frozenset:
    """Heads and MLPs of a circuit graph, position-free: {'A3.1', 'M5', ...}."""
    return frozenset(_label(d) for _, d in g.nodes(data=True) if d["kind"] in ("head", "mlp"))


def edge_set(g) -> frozenset:
    """Signal edges without their singular indices: {(sender, receiver head, side)}."""
    return frozenset((_label(g.nodes[u]), _label(g.nodes[v]), d["side"])
                     for u, v, d in g.edges(data=True) if d["side"] in ("d", "s"))


def signal_set(g) -> frozenset:
    """Signals: {(sender, receiver head, side, singular index k)} over all signal edges."""
    return frozenset((_label(g.nodes[u]), _label(g.nodes[v]), d["side"], int(k))
                     for u, v, d in g.edges(data=True) if d["side"] in ("d", "s") for k in d["sing"])


def jaccard(a, b) -> float:
    """Jaccard similarity |a & b| / |a | b| (1 for two empty sets)."""
    a, b = set(a), set(b)
    return 1.0 if not (a or b) else len(a & b) / len(a | b)


def language_distances(sets: dict[str, list], languages=None) -> pd.DataFrame:
    """Mean Jaccard distance 1 - J between languages over matched prompts (sets[lang][i] are the
    circuits of parallel prompt i); the diagonal is 0."""
    langs = list(languages or sets)
    n = {len(sets[lang]) for lang in langs}
    if len(n) != 1:
        raise ValueError("every language needs the same number of matched circuits")
    D = pd.DataFrame(0.0, index=langs, columns=langs)
    for i, a in enumerate(langs):
        for b in langs[i + 1:]:
            D.loc[a, b] = D.loc[b, a] = float(np.mean([1 - jaccard(x, y) for x, y in zip(sets[a], sets[b])]))
    return D


def mean_offdiag(D: pd.DataFrame) -> float:
    m = D.to_numpy()
    return float(m[~np.eye(len(m), dtype=bool)].mean())


def closest_pair(D: pd.DataFrame) -> tuple[str, str, float, float]:
    """(a, b, distance, margin to the second-closest pair) of the smallest off-diagonal entry."""
    langs = list(D.index)
    pairs = sorted((float(D.loc[a, b]), a, b) for i, a in enumerate(langs) for b in langs[i + 1:])
    (d0, a, b), d1 = pairs[0], pairs[1][0] if len(pairs) > 1 else float("nan")
    return a, b, d0, d1 - d0


def closest_pair_stable(sets: dict[str, list], languages=None) -> bool:
    """Whether leaving out any one matched prompt keeps the same closest language pair."""
    langs = list(languages or sets)
    n = len(sets[langs[0]])
    a, b, *_ = closest_pair(language_distances(sets, langs))
    for i in range(n):
        sub = {lang: [x for j, x in enumerate(sets[lang]) if j != i] for lang in langs}
        if n < 2 or closest_pair(language_distances(sub, langs))[:2] != (a, b):
            return False
    return True


def average_linkage(D) -> np.ndarray:
    """Average linkage (UPGMA) on a square distance matrix: scipy's linkage matrix, rows
    [cluster i, cluster j, distance, size] with new clusters numbered n, n+1, ..."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    m = np.asarray(D, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.allclose(m, m.T) or np.any(np.diag(m) != 0):
        raise ValueError("need a symmetric square distance matrix with a zero diagonal")
    if len(m) < 2:
        return np.zeros((0, 4))
    return linkage(squareform(m, checks=False), method="average")


def draw_dendrogram(Z: np.ndarray, labels: list[str], ax=None, title: str = ""):
    """Draw a linkage matrix with scipy (leaf i sits at x = 5 + 10 * its place in the leaf order)."""
    import matplotlib.pyplot as plt
    from scipy.cluster.hierarchy import dendrogram

    ax = ax or plt.subplots(figsize=(4, 3))[1]
    dendrogram(Z, labels=list(labels), ax=ax, color_threshold=0, above_threshold_color="0.2",
               leaf_rotation=0 if max(map(len, labels), default=0) <= 3 else 90)
    ax.set_ylabel("average-linkage distance")
    ax.set_ylim(0, max(1e-6, float(Z[:, 2].max())) * 1.1)
    ax.grid(axis="x", visible=False)
    ax.set_title(title, fontsize=9)
    return ax


# ---------------------------------------------------------------- size-aware similarity, nulls, bootstrap

def chance_jaccard(na: int, nb: int, universe: int) -> float:
    """Jaccard similarity expected (to first order) between random sets of sizes ``na`` and ``nb``
    drawn from ``universe`` items: E|a & b| = na nb / N, so E[J] ~ E|a & b| / (na + nb - E|a & b|)."""
    if universe <= 0 or na < 0 or nb < 0 or na > universe or nb > universe:
        raise ValueError(f"need 0 <= sizes <= universe > 0; got {na}, {nb}, {universe}")
    if na == 0 and nb == 0:
        return 1.0
    inter = na * nb / universe
    return inter / (na + nb - inter)


def adjusted_jaccard(a, b, universe: int) -> float:
    """Chance-corrected Jaccard: (J - E[J]) / (1 - E[J]) with E[J] from :func:`chance_jaccard`
    (0: no more overlap than random sets of the same sizes; 1: identical). Larger sets overlap more
    by chance, so this normalises for circuit size."""
    e = chance_jaccard(len(set(a)), len(set(b)), universe)
    return 0.0 if e >= 1 else (jaccard(a, b) - e) / (1 - e)


def _pair_sims(sets: dict[str, list], langs, sim) -> dict[tuple[str, str], np.ndarray]:
    n = {len(sets[lang]) for lang in langs}
    if len(n) != 1:
        raise ValueError("every language needs the same number of matched circuits")
    return {(a, b): np.array([sim(x, y) for x, y in zip(sets[a], sets[b])])
            for i, a in enumerate(langs) for b in langs[i + 1:]}


def reuse_vs_null(sets: dict[str, list], null: dict[str, list], languages=None, universe: int | None = None,
                  n_boot: int = 2000, seed: int = 0) -> dict:
    """Cross-language similarity of matched circuits against the within-language null.

    ``sets[lang][i]`` and ``null[lang][i]``: the circuit sets of parallel prompt i and of its null
    counterpart (same template/order/place/object, other names; :func:`null_sets`). Per prompt i:
    cross_i = mean over language pairs of sim(sets[a][i], sets[b][i]); null_i = mean over languages
    of sim(sets[lang][i], null[lang][i]). ``sim`` is the Jaccard similarity, or the chance-corrected
    one (:func:`adjusted_jaccard`) when ``universe`` is given.

    Returns cross, null, ratio = cross / null (1: circuits change across languages no more than when
    only the names change; < 1: language-specific), specificity = 1 - ratio, and its bootstrap 95%
    CI over prompts (``n_boot`` resamples, seeded), with the per-prompt arrays.
    """
    langs = list(languages or sets)
    sim = jaccard if universe is None else (lambda x, y: adjusted_jaccard(x, y, universe))
    n = len(sets[langs[0]])
    if any(len(sets[lang]) != n or len(null[lang]) != n for lang in langs):
        raise ValueError("sets and null need the same number of circuits in every language")
    cross = np.mean(np.stack(list(_pair_sims(sets, langs, sim).values())), 0)
    nul = np.mean(np.stack([np.array([sim(x, y) for x, y in zip(sets[lang], null[lang])]) for lang in langs]), 0)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        if nul[i].mean() > 0:
            boot.append(1 - cross[i].mean() / nul[i].mean())
    boot = np.array(boot)
    ratio = float(cross.mean() / nul.mean()) if nul.mean() > 0 else float("nan")
    return dict(cross=float(cross.mean()), null=float(nul.mean()), ratio=ratio, specificity=1 - ratio,
                specificity_ci_low=float(np.percentile(boot, 2.5)) if len(boot) else float("nan"),
                specificity_ci_high=float(np.percentile(boot, 97.5)) if len(boot) else float("nan"),
                cross_per_prompt=cross.tolist(), null_per_prompt=nul.tolist(), n=n)


def specificity_gap(sets_a: dict, null_a: dict, sets_b: dict, null_b: dict, languages=None,
                    universe_a: int | None = None, universe_b: int | None = None, n_boot: int = 2000,
                    seed: int = 0) -> dict:
    """Specificity (1 - cross / null, :func:`reuse_vs_null`) of level b minus that of level a (e.g.
    b = signals, a = components), with a paired bootstrap 95% CI over prompts (the same resampled
    prompts for both levels)."""
    ra = reuse_vs_null(sets_a, null_a, languages, universe_a, n_boot=0)
    rb = reuse_vs_null(sets_b, null_b, languages, universe_b, n_boot=0)
    ca, na_, cb, nb_ = (np.array(ra["cross_per_prompt"]), np.array(ra["null_per_prompt"]),
                        np.array(rb["cross_per_prompt"]), np.array(rb["null_per_prompt"]))
    n = len(ca)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        if na_[i].mean() > 0 and nb_[i].mean() > 0:
            boot.append((1 - cb[i].mean() / nb_[i].mean()) - (1 - ca[i].mean() / na_[i].mean()))
    boot = np.array(boot)
    return dict(gap=rb["specificity"] - ra["specificity"],
                ci_low=float(np.percentile(boot, 2.5)) if len(boot) else float("nan"),
                ci_high=float(np.percentile(boot, 97.5)) if len(boot) else float("nan"),
                specificity_a=ra["specificity"], specificity_b=rb["specificity"])


def closest_pair_bootstrap(sets: dict[str, list], languages=None, pair=("es", "pt"), n_boot: int = 2000,
                           seed: int = 0) -> dict:
    """How stable the ranking of language pairs is: resample the matched prompts (``n_boot`` times,
    seeded), recompute the mean Jaccard distance of every pair, and count how often each pair is the
    closest. Returns the fraction for ``pair`` (``frac_closest``), all fractions, and the margin
    d(pair) - min over the other pairs of d (negative: ``pair`` closest) with its bootstrap 95% CI."""
    langs = list(languages or sets)
    key = tuple(sorted(pair))
    sims = {tuple(sorted(k)): v for k, v in _pair_sims(sets, langs, jaccard).items()}
    if key not in sims:
        raise ValueError(f"pair {pair} not among the languages {langs}")
    names = sorted(sims)
    dist = 1 - np.stack([sims[k] for k in names])  # (pairs, prompts)
    n = dist.shape[1]
    rng = np.random.default_rng(seed)
    j = names.index(key)
    wins = np.zeros(len(names))
    margins = np.empty(n_boot)
    for b in range(n_boot):
        m = dist[:, rng.integers(0, n, n)].mean(1)
        wins[int(np.argmin(m))] += 1
        margins[b] = m[j] - np.delete(m, j).min()
    m = dist.mean(1)
    return dict(frac_closest=float(wins[j] / n_boot) if n_boot else float("nan"),
                fractions={"-".join(k): float(w / n_boot) for k, w in zip(names, wins)} if n_boot else {},
                margin=float(m[j] - np.delete(m, j).min()),
                margin_ci_low=float(np.percentile(margins, 2.5)) if n_boot else float("nan"),
                margin_ci_high=float(np.percentile(margins, 97.5)) if n_boot else float("nan"), n=n)


# --- the claims of notebook accpp/03_multilingual_ioi ---

def _min_accuracy(accuracy: dict[str, float], who: str) -> float:
    if not accuracy:
        raise ValueError(f"{who}: no per-language accuracy given")
    return float(min(accuracy.values()))


def measure_component_reuse(similarity: dict[str, float], pairs: pd.DataFrame, within: dict[str, float],
                            specificity: pd.DataFrame, gap: dict[bool, dict], accuracy: dict[str, float],
                            n_parallel: int, config: dict | None = None):
    """Claim accpp/multilingual-component-reuse: components are shared across languages more than signals.

    ``similarity``/``within``: mean cross-language / within-language Jaccard similarity per level
    ("components", "edges", "signals"); ``pairs``: one row per matched prompt pair with a similarity
    column per level; ``specificity``: rows of :func:`reuse_vs_null` indexed by (level, "plain" or
    "chance-corrected"); ``gap``: :func:`specificity_gap` keyed by chance-corrected (True) or plain
    (False); ``accuracy``: IOI accuracy per language.
    """
    from compendium.claims import Measurement

    who = "measure_component_reuse"
    for level in ("components", "signals"):
        if level not in similarity or level not in pairs:
            raise ValueError(f"{who}: no '{level}' similarity (similarity keys {sorted(similarity)}, "
                             f"pair columns {list(pairs.columns)})")
    if len(pairs) == 0:
        raise ValueError(f"{who}: no matched prompt pairs")
    if set(gap) != {False, True}:
        raise ValueError(f"{who}: gap needs the plain (False) and chance-corrected (True) entries, got {sorted(gap)}")
    spec = {f"{lvl}_{'corrected' if c == 'chance-corrected' else 'plain'}": dict(
        specificity=float(r["specificity"]), ci_low=float(r["specificity_ci_low"]),
        ci_high=float(r["specificity_ci_high"]), cross=float(r["cross"]), null=float(r["null"]))
        for (lvl, c), r in specificity.iterrows()}
    for key in ("components_corrected", "signals_corrected"):
        if key not in spec:
            raise ValueError(f"{who}: the specificity table lacks the row {key.replace('_corrected', '')}, "
                             "chance-corrected")
    g = gap[True]
    return Measurement(
        claim="accpp/multilingual-component-reuse",
        values=dict(reuse_gap=similarity["components"] - similarity["signals"],
                    frac_pairs_component_gt_signal=float((pairs["components"] > pairs["signals"]).mean()),
                    min_language_accuracy=_min_accuracy(accuracy, who), specificity_gap=float(g["gap"]),
                    specificity_gap_ci_low=g["ci_low"], specificity_gap_ci_high=g["ci_high"],
                    n_parallel_prompts=n_parallel),
        evidence=dict(similarity=similarity, within_language=within, specificity=spec,
                      signal_minus_component_specificity={("corrected" if k else "plain"): v for k, v in gap.items()}),
        tables={"03_multilingual_specificity": specificity.reset_index(), "03_multilingual_pairs": pairs},
        config=dict(config or {}),
        unit="signal minus component specificity (1 - cross / null, chance-corrected Jaccard)",
        note=(f"{(config or {}).get('model', 'the model')}, {n_parallel} parallel prompts; against the within-language "
              f"null (other names), specificity (1 - cross/null, chance-corrected Jaccard): components "
              f"{spec['components_corrected']['specificity']:+.2f}, signals {spec['signals_corrected']['specificity']:+.2f}; "
              f"signal minus component {g['gap']:+.2f} (95% CI {g['ci_low']:+.2f} to {g['ci_high']:+.2f})"))


def measure_es_pt_closest(dist_components: pd.DataFrame, dist_signals: pd.DataFrame, stable: bool, boot: dict,
                          accuracy: dict[str, float], n_parallel: int, config: dict | None = None):
    """Claim accpp/multilingual-es-pt-closest: Spanish and Portuguese are the closest pair by components,
    judged by the margin d(es-pt) - min over the other pairs of d and its bootstrap interval over prompts.

    ``dist_*``: language x language Jaccard distances (:func:`language_distances`) of the component and
    signal sets; ``stable``: :func:`closest_pair_stable` of the component sets; ``boot``:
    :func:`closest_pair_bootstrap` of es-pt.
    """
    from compendium.claims import Measurement

    who = "measure_es_pt_closest"
    for name, D in (("dist_components", dist_components), ("dist_signals", dist_signals)):
        if D.shape[0] < 2 or D.shape[0] != D.shape[1] or list(D.index) != list(D.columns):
            raise ValueError(f"{who}: {name} must be a square language x language table of at least two languages")
    for key in ("margin", "margin_ci_low", "margin_ci_high", "frac_closest"):
        if key not in boot:
            raise ValueError(f"{who}: boot lacks {key!r} (closest_pair_bootstrap of es-pt gives it)")
    a, b, d, margin = closest_pair(dist_components)
    pair = "-".join(sorted((a, b)))
    return Measurement(
        claim="accpp/multilingual-es-pt-closest",
        values=dict(es_pt_margin=float(boot["margin"]), es_pt_margin_ci_low=float(boot["margin_ci_low"]),
                    es_pt_margin_ci_high=float(boot["margin_ci_high"]), es_pt_closest=pair == "es-pt",
                    min_language_accuracy=_min_accuracy(accuracy, who), n_parallel_prompts=int(n_parallel)),
        evidence=dict(closest=pair, distance=d, margin=margin, closest_pair_stable=bool(stable), bootstrap=boot,
                      distances=dist_components.round(4).to_dict(),
                      closest_by_signals="-".join(sorted(closest_pair(dist_signals)[:2]))),
        tables={"03_multilingual_distances": dist_components.reset_index()}, config=dict(config or {}),
        unit="component Jaccard distance, es-pt minus the closest other pair",
        note=(f"{(config or {}).get('model', 'the model')}, {n_parallel} parallel prompts per language; closest pair "
              f"{pair}; es-pt's distance minus the closest other pair's {boot['margin']:+.3f} (95% CI "
              f"{boot['margin_ci_low']:+.3f} to {boot['margin_ci_high']:+.3f}); es-pt is the closest pair in "
              f"{boot['frac_closest']:.0%} of bootstrap resamples of the prompts"))
