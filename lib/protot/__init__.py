"""protot: the Prototype Transformer (arXiv 2602.11852) family.

    protot.mixer      the mixer's own maths: gates, the normaliser, the channel mix and its
                      definition, the decay parametrisation (the op itself: kernels.proto_mixer)
    protot.models     ProtoT + LLaMA / DeltaNet / Mamba baselines; build_model, count_parameters
    protot.intervene  mask / reinitialise / clamp one prototype (context managers)
    protot.bench      timing helpers shared by the derivation notebook and benchmarks/bench_mixer.py
    protot.concepts   the model a study uses, text samples, every layer's write and read gates
    protot.labels     a label per prototype (top write / read tokens, contexts), the concept check
                      and its null models (a prototype found by its label: protot.label_select)
    protot.ablation   masking / reinitialising one prototype: p(word) per stratum, perplexity
    protot.women      the women claims measured with those tools
    protot.usage      each prototype's share of its layer's gate mass; dead prototypes
    protot.robustness rule-based edits (7 meaning-preserving, 3 meaning-changing types), four next-token
                      metrics, comparison of orders with the authors' robustness tables
    protot.throughput training and decoding throughput against context length
    protot.train      tokenizer, packing, trainer, checkpoints, evaluation, pretrained models
"""

import compendium.offline  # noqa: E402,F401  sets HF_HUB_OFFLINE=1 etc. unless the user set them
