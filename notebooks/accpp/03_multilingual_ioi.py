# %% [markdown]
# # ACC++ 03: multilingual IOI circuits (en, es, fr, pt)
#
# **Claim (accpp, §6, multilingual):** ACC++ circuits of the IOI task in English, Spanish, French
# and Portuguese reuse the same components (heads, MLPs) across languages while the signals they
# exchange differ; cross-language circuit distances follow linguistic relatedness (Spanish and
# Portuguese closest).
#
# **Checked here:** IOI behaviour per language (logit difference, accuracy), then ACC++ circuits of
# *parallel* prompts: prompt i is the same template, ABBA/BABA order, name pair, place and object in
# every language, translated, so only the language changes. Per circuit: the component set (heads
# and MLPs, position-free) and the signal set (sender, receiver head, query/key side, singular
# index); mean cross-language Jaccard similarity of components vs of signals; 4x4 Jaccard distance
# matrices, an average-linkage dendrogram and the closest language pair. The templates, places,
# objects and name lists are **ours** (`data/names/ioi_multilingual_templates.json`): the authors'
# multilingual data are not public.
#
# "Components are more shared than signals" holds by construction (a signal refines a component:
# two circuits that share a signal share its sender and receiver), so the comparison that says
# something is against a within-language null: each parallel prompt is traced again in the same
# language with another pair of names (same template, order, place, object). Specificity =
# 1 - (cross-language similarity / within-language null similarity), per level, with bootstrap CIs
# over prompts; a chance-corrected Jaccard (expected overlap of random sets of the same sizes
# removed) normalises for circuit size. The es-pt ranking is judged by the margin of its distance
# over the closest other pair, with a bootstrap interval over prompts. Model and sample sizes are
# the registered protocol (claims.yaml): at `cpu` Gemma-3-270M (offline; the model that does IOI in
# all four languages here), 16 behaviour prompts and 30 traced parallel prompts per language (the
# claims' own floor; templates x orders cycled) plus their nulls; at `paper` 256 behaviour and 60
# traced prompts per language, or the model named in MODEL.

# %% tags=["parameters"]
PROFILE = "cpu"
SEED = 0
DEVICE = "cpu"
MODEL = ""

# %%
import time

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from accpp import datasets, ioi
from accpp import multilingual as ml
from accpp.graph import save_circuit
from accpp.models import load_model
from accpp.trace import Tracer
from compendium import claims, notebook, paths, plotting

nb = notebook.start("accpp/03_multilingual_ioi", PROFILE, SEED, DEVICE, threads=1)
# The registered protocol (papers/accpp/claims.yaml, shared by both multilingual claims).
PROTOCOL = claims.protocol("accpp/multilingual-component-reuse", nb.profile)
MODEL = MODEL or PROTOCOL["model"]
N_BEHAVIOUR = PROTOCOL["n_behaviour"]
N_TRACE = PROTOCOL["n_trace"]   # parallel prompts traced per language (and as many nulls)
N_BOOT = PROTOCOL["n_boot"]
LANGS = list(PROTOCOL["languages"])
assert LANGS == list(ml.LANGUAGES), (LANGS, ml.LANGUAGES)
OUT = paths.output_dir() / "accpp" / "03_multilingual_ioi"
OUT.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## 1. Our multilingual IOI data
# Template i is a translation of English template i (itself one of the IOI templates); the ABBA
# mirror swaps the first name pair. Names are filtered to single tokens for the model's tokenizer.

# %%
t0 = time.perf_counter()
model, tok = load_model(MODEL, device=nb.device)
load_s = time.perf_counter() - t0
data = ml.load()
templates = pd.DataFrame({lang: data["languages"][lang]["templates"] for lang in LANGS})
name_counts = {lang: len(ml.language_names(tok, lang)) for lang in LANGS}
shared = ml.shared_names(tok)
print(f"{MODEL}: loaded in {load_s:.1f} s; single-token names per language {name_counts}; "
      f"shared names {len(shared)}")
templates

# %% [markdown]
# ## 2. IOI behaviour per language
# Each language's own names; the template/order/place/object draws are the same for every language.

# %%
behaviour_prompts = {lang: ml.language_set(tok, lang, N_BEHAVIOUR, seed=SEED) for lang in LANGS}
metrics = {lang: datasets.evaluate(model, ps) for lang, ps in behaviour_prompts.items()}
behaviour = pd.DataFrame({lang: m.mean() for lang, m in metrics.items()}).T
behaviour

# %% [markdown]
# ## 3. Circuits of parallel prompts
# Same (template, order, IO, S, place, object) in the four languages, names from the shared list.

# %%
parallel = ml.parallel_sets(tok, N_TRACE, seed=SEED, languages=LANGS)
null_prompts = ml.null_sets(tok, N_TRACE, seed=SEED, languages=LANGS)
tracer = Tracer(model, tok, name=MODEL)
tracer.svd  # per-head SVDs, cached on disk per model
circuits = {lang: [ioi.trace_ioi(tracer, p) for p in ps] for lang, ps in parallel.items()}
null_circuits = {lang: [ioi.trace_ioi(tracer, p) for p in ps] for lang, ps in null_prompts.items()}
for lang in LANGS:
    save_circuit(circuits[lang][0], OUT / f"circuit_{lang}_0.json")
rows = []
for lang in LANGS:
    for i, c in enumerate(circuits[lang]):
        rows.append(dict(lang=lang, prompt=i, order=c.meta["order"], text=c.meta["text"], logit_diff=c.logit_diff,
                         firings=c.n_firings, components=len(ml.component_set(c.graph)),
                         signals=len(ml.signal_set(c.graph)), seconds=c.seconds))
circuit_table = pd.DataFrame(rows)
circuit_table

# %% [markdown]
# ## 4. Components vs signals across languages
# Jaccard similarity of matched circuits (the same parallel prompt in two languages), averaged over
# prompts and over the 6 language pairs. Edges = (sender, receiver, side) without singular indices,
# between the two levels.

# %%
SETS = {"components": ml.component_set, "edges": ml.edge_set, "signals": ml.signal_set}
sets = {level: {lang: [f(c.graph) for c in circuits[lang]] for lang in LANGS} for level, f in SETS.items()}
dist = {level: ml.language_distances(s, LANGS) for level, s in sets.items()}
similarity = {level: 1 - ml.mean_offdiag(D) for level, D in dist.items()}
# per matched pair: is the component similarity above the signal similarity?
pair_rows = []
for a_i, a in enumerate(LANGS):
    for b in LANGS[a_i + 1:]:
        for i in range(N_TRACE):
            pair_rows.append(dict(pair=f"{a}-{b}", prompt=i, **{level: ml.jaccard(sets[level][a][i], sets[level][b][i])
                                                                 for level in SETS}))
pairs = pd.DataFrame(pair_rows)
frac_comp_gt_sig = float((pairs["components"] > pairs["signals"]).mean())
# within-language reference (different prompts, same language): how much do components vary anyway?
within = {level: float(pd.Series([ml.jaccard(x, y) for lang in LANGS for i, x in enumerate(sets[level][lang])
                                  for y in sets[level][lang][i + 1:]]).mean()) for level in SETS}
print("mean cross-language Jaccard similarity:", {k: round(v, 3) for k, v in similarity.items()})
print("mean within-language (different prompts) similarity:", {k: round(v, 3) for k, v in within.items()})
print(f"matched pairs with component similarity > signal similarity: {frac_comp_gt_sig:.2f} of {len(pairs)}")
pairs.groupby("pair")[list(SETS)].mean().round(3)

# %% [markdown]
# ## 5. Language distances and average-linkage clustering

# %%
linkage = {level: ml.average_linkage(dist[level].to_numpy()) for level in ("components", "signals")}
fig, axes = plt.subplots(2, 2, figsize=(10, 8), gridspec_kw=dict(wspace=0.35, hspace=0.35))
for k, level in enumerate(("components", "signals")):
    sns.heatmap(dist[level], annot=True, fmt=".2f", cmap="viridis", ax=axes[k, 0], square=True,
                cbar_kws=dict(shrink=0.8, label="1 - Jaccard"))
    axes[k, 0].set_title(f"Jaccard distance, {level}", fontsize=9)
    ml.draw_dendrogram(linkage[level], LANGS, ax=axes[k, 1], title=f"average linkage, {level}")
fig.suptitle(f"Multilingual IOI circuits, {MODEL}, {N_TRACE} parallel prompts per language")
plotting.savefig(fig, "accpp/03_multilingual_distances", profile=nb.profile)

closest = {level: ml.closest_pair(dist[level]) for level in ("components", "signals")}
stable = {level: ml.closest_pair_stable(sets[level], LANGS) for level in ("components", "signals")}
pd.DataFrame({level: dict(pair=f"{a}-{b}", distance=d, margin=m, stable_leave_one_out=stable[level])
              for level, (a, b, d, m) in closest.items()}).T

# %% [markdown]
# ## 6. Against the within-language null, normalised for size
# Per level: cross-language similarity of matched circuits vs the similarity of each circuit with
# its same-language null (other names), plain Jaccard and chance-corrected Jaccard (universe: every
# item seen at that level). Specificity > 0: circuits change across languages more than when only
# the names change. The signal-minus-component gap in specificity is the claim's "signals differ
# while components are reused", tested against the null rather than by construction.

# %%
null_sets_ = {level: {lang: [f(c.graph) for c in null_circuits[lang]] for lang in LANGS} for level, f in SETS.items()}
spec_rows, universe = [], {}
for level in SETS:
    universe[level] = len(set().union(*[s_ for d in (sets[level], null_sets_[level]) for lang in LANGS for s_ in d[lang]]))
    for corrected in (False, True):
        r = ml.reuse_vs_null(sets[level], null_sets_[level], LANGS, universe[level] if corrected else None,
                             n_boot=N_BOOT, seed=nb.seed)
        spec_rows.append(dict(level=level, jaccard="chance-corrected" if corrected else "plain",
                              **{k: v for k, v in r.items() if not k.endswith("per_prompt")}))
specificity = pd.DataFrame(spec_rows).set_index(["level", "jaccard"])
gap = {corr: ml.specificity_gap(sets["components"], null_sets_["components"], sets["signals"], null_sets_["signals"],
                                LANGS, universe["components"] if corr else None, universe["signals"] if corr else None,
                                n_boot=N_BOOT, seed=nb.seed) for corr in (False, True)}
boot = ml.closest_pair_bootstrap(sets["components"], LANGS, pair=("es", "pt"), n_boot=N_BOOT, seed=nb.seed)
print({("chance-corrected" if k else "plain"): {kk: round(vv, 3) for kk, vv in v.items()} for k, v in gap.items()})
print(f"es-pt is the closest pair in {boot['frac_closest']:.2f} of {N_BOOT} bootstrap resamples; margin {boot['margin']:+.3f} "
      f"(95% CI {boot['margin_ci_low']:+.3f} to {boot['margin_ci_high']:+.3f})")
specificity.round(3)

# %% [markdown]
# ## 7. The claims' checks
# Pre-registered checks (papers/accpp/claims.yaml); the null-based specificities and the bootstrap
# of the language ranking are evidence beside them.

# %%
config = dict(model=MODEL, n_behaviour=N_BEHAVIOUR, n_traced_per_language=N_TRACE, languages=LANGS, n_boot=N_BOOT,
              templates="ours (data/names/ioi_multilingual_templates.json)", variant=circuits["en"][0].meta["variant"])
assert all(len(s_) > 0 for lang in LANGS for s_ in sets["components"][lang]), "an empty circuit"
accuracy = {lang: float(metrics[lang].accuracy) for lang in LANGS}
measurements = [
    ml.measure_component_reuse(similarity, pairs, within, specificity, gap, accuracy, N_TRACE, config=config),
    ml.measure_es_pt_closest(dist["components"], dist["signals"], stable["components"], boot, accuracy, N_TRACE,
                             config=config),
]
assert [m.claim for m in measurements] == ["accpp/multilingual-component-reuse", "accpp/multilingual-es-pt-closest"]
# every claim is recorded first; a failed asserted check stops the run afterwards
verdicts = claims.conclude_all(measurements, profile=nb.profile, seed=nb.seed)
for v in verdicts:
    print(v)
