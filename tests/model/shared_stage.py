"""The network's forward and backward with a stage's shared tensors and with each layer building its own: what the
tests of the per-stage sharing (rotation tables, pair displacements) compare, bit for bit."""
from __future__ import annotations

import contextlib

import torch

from pointgeope.model import PointTransformerSeg, stage_memo


def shared_and_alone(monkeypatch, built: list, pe: str, tiny: dict, coord, feat, offset) -> list[tuple]:
    """``(logits, gradients, built)`` of a training step, first with the stage's sharing (``stage_memo.shared``)
    then without it, the same seed; ``built`` (a list a spy appends to) as the forward left it, each time."""
    runs = []
    for share in (True, False):
        if not share:
            monkeypatch.setattr(stage_memo, "shared", contextlib.nullcontext)
        torch.manual_seed(0)
        model = PointTransformerSeg(pe=pe, **tiny).train()
        built.clear()
        logits = model(coord, feat, offset)
        forward_built = list(built)               # (the torch path's backward rebuilds its own: not shared)
        logits.square().sum().backward()
        runs.append((logits, [p.grad for p in model.parameters()], forward_built))
    return runs


def layers_of(tiny: dict) -> int:
    """The attention layers of a network of ``tiny``'s shape (encoder and decoder blocks)."""
    model = PointTransformerSeg(**tiny)
    return sum(len(blocks) for blocks in (*model.encoder, *model.decoder))
