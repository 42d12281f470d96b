"""The PTv3 embedding: a 5x5x5 submanifold convolution of the input features, batch norm, GELU.

``feat0 = GELU(BN(SubMConv3d_5(feat)))``: (N, C_in) -> (N, C_0). Submodules ``stem.conv``, ``stem.norm``,
``stem.act`` as Pointcept's ``Embedding`` (its convolution has no bias; its ``padding=1`` has no effect on a
submanifold convolution, which keeps the input voxels). A training batch of one point is a
:class:`~pointgeope.model.small_batch.SmallBatchError` (batch norm needs two rows), not torch's error from
inside ``BatchNorm1d``.
"""
from __future__ import annotations

from collections.abc import Callable

from torch import nn

from pointgeope.model.ops.checks import check_model_dtype
from pointgeope.model.ptv3.block import neighbours
from pointgeope.model.ptv3.sparse_conv import SubMConv3d
from pointgeope.model.ptv3.structure import PointBatch
from pointgeope.model.small_batch import SmallBatchError

__all__ = ["Embedding"]


class Embedding(nn.Module):
    """Pointcept's ``Embedding`` (module docstring). forward(point) sets ``point.feat`` (N, C_0)."""

    def __init__(self, in_channels: int, embed_channels: int,
                 norm_layer: Callable[[int], nn.Module] | None = None,
                 act_layer: Callable[[], nn.Module] | None = None) -> None:
        super().__init__()
        self.in_channels, self.embed_channels = in_channels, embed_channels
        stem = {"conv": SubMConv3d(in_channels, embed_channels, kernel_size=5, bias=False)}
        if norm_layer is not None:
            stem["norm"] = norm_layer(embed_channels)
        if act_layer is not None:
            stem["act"] = act_layer()
        self.stem = nn.ModuleDict(stem)

    def forward(self, point: PointBatch) -> PointBatch:
        if point.feat.shape[-1] != self.in_channels:
            raise ValueError(f"expected feat with {self.in_channels} channels (in_channels), "
                             f"got {tuple(point.feat.shape)}")
        check_model_dtype("feat", point.feat, self.stem["conv"].weight.dtype)   # coord: any float (geometry)
        if self.training and len(point.feat) < 2 and isinstance(self.stem["norm"] if "norm" in self.stem else None,
                                                               nn.BatchNorm1d):
            raise SmallBatchError(f"a training batch of {len(point.feat)} point reaches the batch norm of PTv3's "
                                  "stem, which needs two or more", "train on batches of two points or more")
        x = self.stem["conv"](point.feat, neighbours(point, 5))
        for name in ("norm", "act"):
            if name in self.stem:
                x = self.stem[name](x)
        point.feat = x
        return point
