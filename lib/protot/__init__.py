"""protot: the Prototype Transformer (arXiv 2602.11852) family.

The same modules as lib/protot/README.md's index (tests/protot/test_module_index.py checks both), by role.

model
    protot.mixer            the mixer's own maths: gates, the normaliser, the channel mix and its
                            definition, the decay parametrisation (the op itself: kernels.proto_mixer)
    protot.mixer_authors    the authors' mixer maths (routing, value convolution, exact read)
    protot.golden           the golden cases of the authors' mixer
    protot.models           ProtoT + LLaMA / DeltaNet / Mamba baselines; build_model, count_parameters
                            (protot.models.protot, .protot_authors, .llama, .deltanet, .mamba,
                            .selective_scan, .common, .loss; .library_maps: the name maps
                            onto transformers' and fla's modules)
training
    protot.train            tokenizer, packing, config, trainer, checkpoint, evaluate, split_eval,
                            sweep, pretrained, gpu, pilot (protot.train.<name>)
study (per claim; "shared": a tool of several)
    protot.intervene        mask / reinitialise / clamp one prototype (context managers; shared)
    protot.concepts         the model a study uses, text samples, every layer's gates (shared)
    protot.labels           a label per prototype, the concept check and its null models
    protot.label_select     a prototype found by its label (a class of words against matched words)
    protot.ablation         masking / reinitialising one prototype: p(word) per stratum, perplexity
    protot.women            the women claims measured with those tools
    protot.usage            each prototype's share of its layer's gate mass; dead prototypes (shared)
    protot.context_use      how much a model uses its context: the interpretability claims' power (shared)
    protot.circuits         prototype circuits: a gate logit decomposed into upstream components
    protot.circuits_authors the authors' mixer's pieces of protot.circuits
    protot.sae              a top-k sparse autoencoder on the residual stream
    protot.disentangle      disentanglement and coverage of prototypes, heads and SAE features
    protot.robustness       rule-based edits, four next-token metrics, orders against the authors' tables
    protot.generate         continuations of fixed prompts
    protot.preference       an LLM judge's pairwise preferences, Elo ratings
    protot.cola             GLUE CoLA fine-tuning and Matthews correlation
    protot.figures          the ProtoT notebooks' figures (shared)
    protot.notes            the claims' notes of protot/05, 06 and 08-11 (shared)
performance
    protot.perf             protot.perf.bench (timing helpers of the derivation notebook and
                            benchmarks/bench_mixer.py), protot.perf.throughput (training and decoding
                            throughput against context length), protot.perf.flops (the FLOP convention)
"""

import compendium.offline  # noqa: E402,F401  sets HF_HUB_OFFLINE=1 etc. unless the user set them
