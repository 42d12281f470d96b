"""Serialized pooling and unpooling of PTv3: merge the points of each coarser voxel, and come back.

Pooling with stride ``s = 2^d`` merges the points whose serialization codes agree once their last ``3 d`` bits
are dropped, i.e. the points of one voxel of the grid ``grid_coord >> d`` (every curve nests, so the first
order's code decides for all; ``s = 1`` keeps the grid and merges only the points that share a voxel). For
the M merged voxels (in the order of their codes)::

    feat'  = reduce_{i in voxel} (feat_i W + b)          reduce = max (Pointcept's default), sum, mean, min
    coord' = mean_{i in voxel} coord_i,   grid' = grid >> d,   code' = code >> 3 d,   depth' = depth - d
    feat'  = act(BN(feat'))

The new orders are re-sorted from the shifted codes and, as Pointcept does (in eval too), their rows are
shuffled by ``torch.randperm(K)`` unless ``shuffle_orders=False``; ``shuffle_in_eval=False`` keeps them in
order (no draw) while the module is in eval mode, which it reads from its own ``training``. Unpooling adds the
coarse features back to the points they came from::

    feat_parent = act(BN(feat_parent W_s + b_s)) + act(BN(feat W + b))[pooling_inverse]

and, as Pointcept's sparse tensor keeps the skip branch alone, the next block's xCPE convolves
``act(BN(feat_parent W_s + b_s))`` (``PointBatch.conv_feat``), not the sum.

Batch norm in training needs two rows or more: a training batch that pools to one voxel (voxels too coarse
for the stages, e.g. ``data.grid_size=2`` on small rooms, or a cloud cropped to a few points) is a
:class:`CoarsePoolingError` (one line for the user), where torch's ``BatchNorm1d`` would raise a
``ValueError`` from deep inside the forward; a batch of one point reaching the stem's batch norm is its base,
:class:`SmallBatchError`. The clouds of a batch never share a voxel (the batch index leads the codes), so a
batch of two clouds or more never pools to one.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from pointgeope.model.ptv3.structure import PointBatch
from pointgeope.model.ptv3_rules import stride_problem
from pointgeope.model.small_batch import SmallBatchError  # both backbones' error; in __all__, where it was first

__all__ = ["CoarsePoolingError", "SerializedPooling", "SerializedUnpooling", "SmallBatchError", "segment_reduce",
           "shuffles_now"]


class CoarsePoolingError(SmallBatchError):
    """A training batch pooled to a single voxel, which batch norm cannot normalise (module docstring)."""

_REDUCE = {"max": "amax", "min": "amin", "sum": "sum", "mean": "mean"}


def segment_reduce(src: Tensor, index: Tensor, size: int, reduce: str) -> Tensor:
    """``out[m] = reduce_{index[i] = m} src[i]`` (size, C) for ``reduce`` in max, min, sum, mean (every
    segment non-empty)."""
    out = src.new_zeros((size,) + src.shape[1:])
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    return out.scatter_reduce(0, idx, src, _REDUCE[reduce], include_self=False)


def shuffles_now(shuffle_orders: bool, module: nn.Module) -> bool:
    """Whether ``module`` (the network at serialization, or a pooling) draws shuffled orders in this call:
    ``shuffle_orders``, and the module in training mode or built with ``shuffle_in_eval`` (Pointcept's: also in
    eval). The one statement of the rule; ``shuffle_in_eval`` is each module's own, set at construction."""
    return shuffle_orders and (module.training or module.shuffle_in_eval)


class SerializedPooling(nn.Module):
    """Pointcept's ``SerializedPooling`` (module docstring); submodules ``proj``, ``norm.0``, ``act.0``.

    Args: ``shuffle_orders``: shuffle the pooled orders (Pointcept's); ``shuffle_in_eval``: in eval mode too
    (Pointcept's, True), or in training mode only (False); the rest as Pointcept's.
    Shapes: forward(point with feat (N, C_in)) -> a new PointBatch of M <= N points, feat (M, C_out),
    whose ``pooling_parent`` is ``point`` and ``pooling_inverse`` (N,) the pooled point of each."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 2,
                 norm_layer: Callable[[int], nn.Module] | None = None,
                 act_layer: Callable[[], nn.Module] | None = None, reduce: str = "max",
                 shuffle_orders: bool = True, traceable: bool = True, shuffle_in_eval: bool = True) -> None:
        super().__init__()
        problem = stride_problem(stride)
        if problem:
            raise ValueError(f"stride: {problem}")
        if reduce not in _REDUCE:
            raise ValueError(f"expected reduce in {tuple(_REDUCE)}, got {reduce!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.stride, self.reduce = int(stride), reduce   # a whole number (ptv3_rules.stride_problem): 4.0 -> 4
        self.shuffle_orders, self.shuffle_in_eval, self.traceable = shuffle_orders, shuffle_in_eval, traceable
        self.proj = nn.Linear(in_channels, out_channels)
        self.norm = nn.Sequential(norm_layer(out_channels)) if norm_layer is not None else None
        self.act = nn.Sequential(act_layer()) if act_layer is not None else None

    def forward(self, point: PointBatch) -> PointBatch:
        if point.serialized_code is None:
            raise ValueError("serialize the point structure before SerializedPooling")
        depth = (math.ceil(self.stride) - 1).bit_length()
        if depth > point.serialized_depth:            # as Pointcept: a grid already one voxel is not pooled
            depth = 0
        code = point.serialized_code >> (3 * depth)
        _, cluster, counts = torch.unique(code[0], sorted=True, return_inverse=True, return_counts=True)
        m = counts.numel()
        if m == 1 and self.training and self.norm is not None:
            raise CoarsePoolingError(
                f"PTv3's pooling (stride {self.stride}) merged the {cluster.numel()} voxels of a training batch "
                "into one, and its batch norm needs two or more",
                "the clouds are too small or their voxels too coarse for the network's stages: batch two clouds "
                "or more (the clouds of a batch are never merged), larger clouds or finer voxels, or use fewer "
                "stages")
        rows = torch.arange(cluster.numel(), device=cluster.device)
        head = torch.zeros(m, dtype=torch.long, device=cluster.device).scatter_(0, cluster, rows)  # a member
        feat = segment_reduce(self.proj(point.feat), cluster, m, self.reduce)
        batch = point.batch[head]
        pooled = PointBatch(
            coord=segment_reduce(point.coord, cluster, m, "mean"),
            grid_coord=point.grid_coord[head] >> depth, feat=feat,
            offset=torch.cumsum(torch.bincount(batch, minlength=point.num_clouds), 0), batch=batch,
            serialized_depth=point.serialized_depth - depth)
        pooled.set_codes(code[:, head], shuffle=shuffles_now(self.shuffle_orders, self))
        if self.traceable:
            pooled.pooling_parent, pooled.pooling_inverse = point, cluster
        if self.norm is not None:
            pooled.feat = self.norm(pooled.feat)
        if self.act is not None:
            pooled.feat = self.act(pooled.feat)
        return pooled


class SerializedUnpooling(nn.Module):
    """Pointcept's ``SerializedUnpooling`` (module docstring): ``proj`` and ``proj_skip`` are Sequential
    (Linear, norm, act). forward(pooled point) -> its parent with feat (N_parent, C_out)."""

    def __init__(self, in_channels: int, skip_channels: int, out_channels: int,
                 norm_layer: Callable[[int], nn.Module] | None = None,
                 act_layer: Callable[[], nn.Module] | None = None, traceable: bool = False) -> None:
        super().__init__()
        proj, skip = [nn.Linear(in_channels, out_channels)], [nn.Linear(skip_channels, out_channels)]
        if norm_layer is not None:
            proj.append(norm_layer(out_channels))
            skip.append(norm_layer(out_channels))
        if act_layer is not None:
            proj.append(act_layer())
            skip.append(act_layer())
        self.proj, self.proj_skip = nn.Sequential(*proj), nn.Sequential(*skip)
        self.traceable = traceable

    def forward(self, point: PointBatch) -> PointBatch:
        parent, inverse = point.pooling_parent, point.pooling_inverse
        if parent is None or inverse is None:
            raise ValueError("SerializedUnpooling needs a point structure made by SerializedPooling "
                             "(traceable=True)")
        skip = self.proj_skip(parent.feat)
        parent.feat = skip + self.proj(point.feat)[inverse]
        parent.conv_feat = skip                # the next xCPE convolves the skip branch (as Pointcept)
        if self.traceable:
            parent.cache["unpooling_parent"] = point
        return parent
