"""Training for the ProtoT family: tokenizer, packed data, trainer, checkpoints, evaluation.

    python -m protot.train --arch protot --profile smoke --out build/runs/smoke [--resume]
    torchrun --nproc_per_node 2 -m protot.train --arch protot --profile smoke --out DIR

Public API: :func:`protot.train.trainer.train`, :class:`protot.train.config.TrainConfig`,
:func:`protot.train.config.profile`, :func:`protot.train.evaluate.perplexity`,
:func:`protot.train.pretrained.load`. Submodules are imported lazily (no import-time work).
"""
