"""Mix3D (Nekrasov et al. 2021) as Pointcept's PTv3 recipe does it: a batch-level op on collated samples.

With probability ``mix_prob`` (S3DIS PTv3: 0.8) a batch's samples are merged pairwise into one scene
each, ``(0, 1), (2, 3), ...`` (an odd last sample stays alone), by dropping every other offset::

    offset  [o1, o2, o3, o4, o5]   ->   [o2, o4, o5]          (cumulative point counts)

The points themselves do not move: each sample was centred in x and y (``CenterShift``), so the two
scenes of a pair overlap around the origin, and their ``grid_coord`` (each counted from its own
minimum) are not recomputed either, as in Pointcept's ``point_collate_fn`` for this config (it recomputes
them only when the batch carries a ``grid_size``): two points of a mixed scene may share a grid cell.

The decision is the batch's first sample's ``mix_draw`` (``U(0, 1)`` from that sample's generator,
:mod:`pointgeope.data.ptv3_dataset`): ``mix = mix_draw[0] < mix_prob``, where Pointcept draws Python's
global ``random.random()`` in the loader worker. Same probability; reproducible under resume.
"""
from __future__ import annotations

import copy

import torch

from pointgeope.data.points import Points


def mixed_offsets(offset: torch.Tensor) -> torch.Tensor:
    """``(B,)`` cumulative offsets of a batch -> ``(ceil(B / 2),)`` offsets of its pairs (module docstring)."""
    if offset.dim() != 1 or offset.numel() == 0:
        raise ValueError(f"expected a non-empty (B,) offset, got shape {tuple(offset.shape)}")
    return torch.cat([offset[1:-1:2], offset[-1:]])


class Mix3D:
    """Batch transform ``batch -> batch`` (the loader's ``batch_transform``): a new ``Points`` whose ``ptr``
    and ``batch`` describe the merged pairs when ``batch.mix_draw[0] < mix_prob``, else the batch as it is.
    The input batch is never changed (its tensors are shared)."""

    def __init__(self, mix_prob: float = 0.8):
        if not 0 <= mix_prob <= 1:
            raise ValueError(f"expected mix_prob in [0, 1], got {mix_prob}")
        self.mix_prob = mix_prob

    def __call__(self, batch: Points) -> Points:
        if "mix_draw" not in batch:
            raise KeyError("Mix3D expected batches of samples with a 'mix_draw' (S3DISTrainPTv3's), got keys "
                           + str(sorted(batch.keys())))
        if not float(batch.mix_draw[0]) < self.mix_prob:
            return batch
        ptr = batch.ptr
        new_ptr = torch.cat([ptr[:1], mixed_offsets(ptr[1:])])
        out = copy.copy(batch)
        out.ptr = new_ptr
        out.batch = torch.div(batch.batch, 2, rounding_mode="floor")
        return out

    def __repr__(self) -> str:
        return f"Mix3D(mix_prob={self.mix_prob})"
