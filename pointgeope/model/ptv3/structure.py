"""The point structure that flows through PTv3: a packed batch of clouds at one stage of the network.

Pointcept's ``Point`` is an ``addict.Dict`` whose keys appear as the network runs; this is the same content
with typed fields. A packed batch of ``B`` clouds holds ``N`` points; cloud ``b`` is the rows
``offset[b-1] : offset[b]`` (``offset[-1] = N``)::

    coord       (N, 3) float   coordinates (metres; the mean of the merged points after pooling)
    grid_coord  (N, 3) int64   voxel of each point at this stage (the input grid >> pooling depth)
    feat        (N, C) float   features
    offset      (B,)   int64   end of each cloud
    batch       (N,)   int64   cloud of each point
    serialized_code/order/inverse (K, N) int64   one row per serialization order (see ``serialize``)

``conv_feat`` (N, C), when set, is what the next block's xCPE convolves instead of ``feat``: Pointcept's
unpooling refreshes its sparse tensor with the skip branch and then adds the coarse features to ``feat``
only, so the first block after an unpooling convolves the skip branch alone. PT-v3m1's checkpoints were
trained so; we keep it.

``cache`` holds what every block of a stage reuses: the sparse convolution's neighbour tables (by kernel
size) and the attention's patch partitions (by patch size). Pooling makes a new structure whose
``pooling_parent`` is the finer one and ``pooling_inverse`` (N_parent,) maps each parent point to its
pooled point; unpooling returns the parent, caches intact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pointgeope.geope_checks import check_counted
from pointgeope.model.ops.offsets import check_offset, cloud_of_rows, offset_tensor
from pointgeope.model.ptv3.serialization import check_depth, check_orders, code_of, serialization_depth
from pointgeope.number_kind import is_integer_tensor

__all__ = ["PointBatch", "check_inputs", "offsets_to_batch"]


def offsets_to_batch(offset: Tensor, rows: int) -> Tensor:
    """The cloud index (N,) of each point of a packed batch of ``rows`` points with cloud ends ``offset`` (B,)."""
    return cloud_of_rows(offset, rows)


def check_inputs(coord: Tensor, grid_coord: Tensor, feat: Tensor, offset: Tensor) -> None:
    """Raise a ``ValueError`` naming the argument unless the shapes and dtypes agree: ``coord`` (N, 3) float,
    finite and within +-2^60, ``grid_coord`` (N, 3) integer >= 0, ``feat`` (N, C), ``offset`` (B,) integer,
    strictly increasing (no empty cloud), ending at N >= 1. (The one finiteness check of the coordinates: every
    stage's are means of these, so the attention's encodings need not check again, a synchronisation each on a
    GPU.)"""
    n = coord.shape[0] if coord.dim() == 2 else -1
    if coord.dim() != 2 or coord.shape[1] != 3 or not coord.dtype.is_floating_point:
        raise ValueError(f"expected coord of shape (N, 3) float, got {tuple(coord.shape)} {coord.dtype}")
    if n == 0:
        raise ValueError("expected at least one point, got coord of shape (0, 3)")
    check_counted("coord", coord)   # one read, the point ops' rule: GeoPE's float32 axis norm overflows from ~1.8e19
    if tuple(grid_coord.shape) != (n, 3) or not is_integer_tensor(grid_coord):   # a bool: cells of 0 and 1
        raise ValueError(f"expected grid_coord of shape ({n}, 3) integer, got {tuple(grid_coord.shape)} "
                         f"{grid_coord.dtype}")
    if int(grid_coord.min()) < 0:
        raise ValueError(f"expected grid_coord >= 0, got a minimum of {int(grid_coord.min())}")
    if feat.dim() != 2 or feat.shape[0] != n:
        raise ValueError(f"expected feat of shape ({n}, C), got {tuple(feat.shape)}")
    if offset.dim() != 1 or offset.numel() == 0 or not is_integer_tensor(offset):
        raise ValueError(f"expected offset of shape (B,) integer, got {tuple(offset.shape)} {offset.dtype}")
    check_offset(offset, n)      # names the first entry at fault (offset[b] = v after u), whatever B


@dataclass(eq=False)
class PointBatch:
    """A packed batch of clouds at one stage (fields in the module docstring)."""

    coord: Tensor
    grid_coord: Tensor
    feat: Tensor
    offset: Tensor
    batch: Tensor
    serialized_depth: int = 0
    serialized_code: Tensor | None = None
    serialized_order: Tensor | None = None
    serialized_inverse: Tensor | None = None
    pooling_parent: PointBatch | None = None
    pooling_inverse: Tensor | None = None
    conv_feat: Tensor | None = None
    cache: dict[Any, Any] = field(default_factory=dict)

    @classmethod
    def from_inputs(cls, coord: Tensor, grid_coord: Tensor, feat: Tensor, offset: Tensor | list[int]) -> PointBatch:
        """Checked inputs (``check_inputs``) as a structure; ``grid_coord`` becomes int64, ``offset`` int64 (a
        host list, as ``ops.check_offset`` and PTv1 take it, becomes a tensor on ``coord``'s device)."""
        offset = offset_tensor(offset, coord.device)        # its own dtype: check_inputs refuses floats
        check_inputs(coord, grid_coord, feat, offset)
        offset = offset.long()
        return cls(coord=coord, grid_coord=grid_coord.long(), feat=feat, offset=offset,
                   batch=offsets_to_batch(offset, coord.shape[0]))

    @property
    def num_clouds(self) -> int:
        return int(self.offset.numel())

    def counts(self) -> Tensor:
        """Points per cloud (B,)."""
        return torch.diff(self.offset, prepend=self.offset.new_zeros(1))

    def serialize(self, orders: tuple[str, ...], depth: int | None = None, shuffle: bool = False) -> None:
        """Fill ``serialized_*`` for ``orders``: ``code[k]`` (N,) the code of order ``k`` (``encode``),
        ``order[k]`` the argsort of ``code[k]`` and ``inverse[k]`` its inverse permutation
        (``order[k][inverse[k]] = arange(N)``). ``depth`` None: Pointcept's adaptive depth, the bits of
        ``max(grid_coord) + 1``. ``shuffle``: permute the K rows by ``torch.randperm(K)`` (the global
        generator, drawn as Pointcept draws it)."""
        depth = serialization_depth(self.grid_coord) if depth is None else depth
        check_orders(orders)
        check_depth(self.grid_coord, depth, self.num_clouds)              # once, for every order
        code = torch.stack([code_of(self.grid_coord, self.batch, depth, o) for o in orders])
        self.serialized_depth = depth
        self.set_codes(code, shuffle)

    def set_codes(self, code: Tensor, shuffle: bool) -> None:
        """``serialized_code`` = ``code`` (K, N) with its orders and inverses, rows shuffled by
        ``torch.randperm(K)`` if ``shuffle``."""
        order = torch.argsort(code, dim=1)
        inverse = torch.empty_like(order)
        inverse.scatter_(1, order, torch.arange(code.shape[1], device=code.device).expand_as(order))
        if shuffle:       # drawn on the host as Pointcept draws it; rows picked by host ints (no copy, no sync)
            rows = torch.randperm(code.shape[0]).tolist()
            code, order, inverse = (torch.stack([t[r] for r in rows]) for t in (code, order, inverse))
        self.serialized_code, self.serialized_order, self.serialized_inverse = code, order, inverse
