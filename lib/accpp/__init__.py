"""ACC++ circuit tracing through nnsight (Franco, Tassis, Rohr, Crovella, arXiv 2602.13483).

Public API (import the modules; nothing runs at import time):

- ``accpp.models.load_model(name)`` -> (model, tokenizer): "smollm2-135m", "gemma-3-270m" (offline
  packages, converted once into ``compendium.paths.cache_dir()/models``) or a Hub id (gpt2, ...).
- ``accpp.arch.from_model(model)`` -> Arch (weights per family; UnsupportedArchitecture otherwise).
- ``accpp.decompose``: ``collect`` (one nnsight pass), ``Decomposition`` (residual components),
  ``head_svds`` (per-head SVD of W_Q W_K^T, cached on disk per model).
- ``accpp.signals``: ``FiringSolver(dec, svd, variant).solve(Firing)`` (candidates, IG, greedy ->
  signal edges), ``query_candidates``/``key_candidates``, ``ig_direction``, ``greedy_path``,
  ``tau_for``, ``firing_exactness``.
- ``accpp.trace``: ``Tracer(model, tok, name, TraceConfig(...)).trace(ids, correct, wrong)`` ->
  ``Circuit`` (networkx MultiDiGraph + metadata); ``correct``/``wrong`` are one token id each (a
  set only as ``accpp.seeding.TokenSet``). ``TraceConfig.variant``: "authors" (default, reproduces
  the authors' tracer) or "per-position" (key-side signals at their exact key positions); ``threads``
  (default 1); ``max_memory_gb`` (prompts estimated not to fit are refused); ``seeding`` "linear" (default, the paper's) or "prob" (the authors' tracer since v0.3.0). Inputs are
  checked before any work; ``circuit.status`` / ``circuit.reason`` say why a circuit is empty or small.
  Method and sources: docs/accpp_method.md.
- ``accpp.seeding``: ``TokenSet`` (an answer of several tokens, asked for explicitly), the linear and
  prob seed rules.
- ``accpp.families``: template families per task (IOI, pronouns, Greater-Than; one family begins with
  a name or noun) and behaviour tables per family.
- ``accpp.graph``: ``Circuit``, JSON save/load, summaries, ``graph_diff``, node/edge Jaccard.
- ``accpp.acc.acc_trace``: the ACC baseline (70% of the linear score, no IG/greedy).
- ``accpp.datasets``: IOI prompts (mixed / balanced sets, single-token names) and metrics.
- ``accpp.roles``: IOI roles of a circuit's firings; the published GPT-2 circuit by role.
- ``accpp.ioi``: glue (trace a prompt, exactness over a circuit, one-row summaries).
- ``accpp.ioi_inputs``: accpp/01_ioi's inputs (the representative prompts, the name-pair null, the
  ACC rows beside ACC++, the variant comparison).
- ``accpp.multilingual``: our IOI templates for en/es/fr/pt, position-free component/signal sets,
  Jaccard distances between languages, average linkage.
- ``accpp.greater_than``: Greater-Than prompts (years as digits or two-digit tokens), the exact
  end-year distribution, tracing targets, year heads, seed shares, head knock-outs;
  ``accpp.greater_than_claim``: its claim's measurement (seed shares, knock-out p, their intervals).
- ``accpp.interventions``: remove a traced signal (or a random same-rank subspace) at one head's
  query or key input inside the real forward pass; metric, attention and residual-cosine effects.
  ``accpp.head_patch``: the patch of one head in the model's forward pass that makes the removal;
  ``accpp.intervention_summary``: summaries over many removals (per edge, per prompt, pooled) and
  the claim's measurement.
- ``accpp.item_cache``: each prompt's circuit and intervention rows kept on disk under the run folder
  as they are computed (``ioi.trace_many``, ``intervention_summary.intervention_rows``), so that a
  resumed run (``compendium run --resume``) does not redo the prompts it had finished.
- ``accpp.clustering``: Jaccard distance matrices of circuits, average linkage (scipy), ARI / NMI
  (scikit-learn), permutation tests, dendrogram and heatmap figures.
- ``accpp.interpret``: automated interpretation of signals, scaled down (signals, their activations,
  top contexts); ``accpp.interpret_judge``: the describers, the judge and the claim's measurement;
  ``accpp.interpret_view``: the descriptions as a reader sees them, each with its judge score and
  its describer's checks.
- ``accpp.viewer``: the interactive circuit viewer (one self-contained page per circuit).
- ``accpp.trace_cli``: ``compendium trace PROMPT --answer A --wrong W``: one prompt's circuit from the
  shell (summary, JSON, viewer page); ``accpp.prompt_checks``: the warnings for a prompt ending in
  whitespace and an answer lacking the leading space the prompt implies.
- ``accpp.figures``: layered circuit drawing in the viewer's colours, legible at the book's width,
  signal-rank histogram.
- ``accpp.testing``: tiny random float64 models of every supported family.
"""

import compendium.offline  # noqa: E402,F401  sets HF_HUB_OFFLINE=1 etc. unless the user set them
