"""Serialization codes of PTv3: the space-filling curves that order a cloud's voxels into a sequence.

Point Transformer V3 (Wu et al., CVPR 2024, arXiv 2312.10035) attends within patches of consecutive points
along a curve through the voxel grid. Four curves, bit for bit as Pointcept's
``pointcept/models/utils/serialization`` computes them for the same ``depth``:

- ``"z"``: the Morton (Z-order) code. Bit ``b`` of x, y, z goes to bits ``3 b + 2``, ``3 b + 1``, ``3 b``::

      code = ... x1 y1 z1 x0 y0 z0          (x the most significant of each triple)

- ``"hilbert"``: the Hilbert index of Skilling's algorithm ("Programming the Hilbert curve", AIP Conf. Proc.
  707, 2004): the coordinates are turned into the curve's "transpose" (inverse undo of the rotations, then
  Gray decoding) and its bits are interleaved as above, x the most significant of each triple.
- ``"z-trans"``, ``"hilbert-trans"``: the same curves of ``(y, x, z)``: the x and y axes swapped.

The batch index goes above the ``3 depth`` bits, ``code = batch << 3 depth | curve``, so that sorting the
codes of a packed batch keeps each cloud together. Both curves nest: the code at ``depth - 1`` of
``grid >> 1`` is the code at ``depth`` of ``grid`` shifted right by 3 bits, which is what serialized pooling
relies on.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.ops.morton import BITS, code as morton_code
from pointgeope.model.presets import ORDERS
from pointgeope.number_kind import is_integer_tensor

__all__ = ["MAX_DEPTH", "ORDERS", "check_depth", "check_orders", "code_of", "encode", "hilbert", "serialization_depth",
           "z_order"]

MAX_DEPTH = BITS  # 16 bits per axis, as Pointcept (and OCNN): 48 bits of curve, the batch index above them


def check_depth(grid_coord: Tensor, depth: int, num_clouds: int = 1) -> None:
    """Raise a ``ValueError`` unless ``grid_coord`` (N, 3) is integer, non-negative and below ``2^depth``,
    ``1 <= depth <= 16`` and the batch index fits in the int64 code (``3 depth + bits(num_clouds) <= 63``)."""
    if grid_coord.dim() != 2 or grid_coord.shape[-1] != 3:
        raise ValueError(f"expected grid_coord of shape (N, 3), got {tuple(grid_coord.shape)}")
    if not is_integer_tensor(grid_coord):
        raise ValueError(f"expected integer grid_coord, got {grid_coord.dtype}")
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"expected a serialization depth in 1..{MAX_DEPTH}, got {depth}")
    if 3 * depth + int(num_clouds).bit_length() > 63:
        raise ValueError(f"{num_clouds} clouds at depth {depth} do not fit in an int64 code "
                         f"(3 * depth + bits(clouds) must be <= 63)")
    if grid_coord.numel():
        lo, hi = int(grid_coord.min()), int(grid_coord.max())
        if lo < 0 or hi >= 1 << depth:
            raise ValueError(f"expected grid_coord in [0, 2^{depth}) for a serialization depth of {depth}, "
                             f"got values in [{lo}, {hi}]: shift the grid to start at 0, or coarsen it "
                             f"(at most {MAX_DEPTH} bits per axis)")


def serialization_depth(grid_coord: Tensor) -> int:
    """Pointcept's adaptive depth: the bits of ``max(grid_coord) + 1`` (so the cube ``[0, 2^depth)^3`` holds
    the cloud); at least 1, at most 16. A grid of ``2^16 = 65,536`` cells per axis (indices 0..65535) fits
    16 bits and gets depth 16 (Pointcept's formula says 17 there, and its assertion refuses it); a wider grid
    (an index >= 65536) raises a ``ValueError``."""
    top = int(grid_coord.max()) if grid_coord.numel() else 0
    if top >= 1 << MAX_DEPTH:
        raise ValueError(f"grid_coord reaches {top}, beyond the {MAX_DEPTH} bits per axis of the serialization "
                         f"codes (indices 0..{(1 << MAX_DEPTH) - 1}, a grid of {1 << MAX_DEPTH:,} cells): use a "
                         "coarser grid (larger grid size) or smaller scenes")
    return min(max((top + 1).bit_length(), 1), MAX_DEPTH)


def z_order(grid_coord: Tensor) -> Tensor:
    """Morton code (N,) int64 of ``grid_coord`` (N, 3) ``< 2^16``: x bit ``b`` at ``3 b + 2``, y at ``3 b + 1``,
    z at ``3 b`` (``morton_code`` puts its first argument at ``3 b``, so it gets z, y, x)."""
    g = grid_coord.long()
    return morton_code(g[:, 2], g[:, 1], g[:, 0])


def _transpose(g: Tensor, depth: int) -> Tensor:
    """Skilling's ``AxesToTranspose`` on ``g`` (N, 3) int64 (modified copy): the Hilbert transpose, whose
    bit ``b`` of axis ``i`` is bit ``3 b + 2 - i`` of the index."""
    x = [g[:, i].clone() for i in range(3)]
    q = 1 << (depth - 1)
    while q > 1:                                   # inverse undo, from the top bit down
        p = q - 1
        for i in range(3):
            on = (x[i] & q) != 0
            t = (x[0] ^ x[i]) & p                  # where bit q of axis i is off: swap low bits of x0, xi
            if i == 0:
                x[0] = torch.where(on, x[0] ^ p, x[0])
            else:
                x0 = torch.where(on, x[0] ^ p, x[0] ^ t)
                x[i] = torch.where(on, x[i], x[i] ^ t)
                x[0] = x0
        q >>= 1
    x[1] = x[1] ^ x[0]                             # Gray decode: prefix xor along the interleaved bits
    x[2] = x[2] ^ x[1]
    t = torch.zeros_like(x[0])
    q = 1 << (depth - 1)
    while q > 1:
        t = torch.where((x[2] & q) != 0, t ^ (q - 1), t)
        q >>= 1
    return torch.stack([xi ^ t for xi in x], dim=1)


def hilbert(grid_coord: Tensor, depth: int) -> Tensor:
    """Hilbert index (N,) int64 of ``grid_coord`` (N, 3) ``< 2^depth`` (Skilling's curve, x first):
    the transpose's bits interleaved as the Morton code interleaves coordinates."""
    return z_order(_transpose(grid_coord.long(), depth))


def encode(grid_coord: Tensor, batch: Tensor | None, depth: int, order: str = "z") -> Tensor:
    """The serialization code (N,) int64 of one ``order`` in :data:`ORDERS`:
    ``batch << 3 depth | curve(grid_coord)``. ``grid_coord`` (N, 3) integer in ``[0, 2^depth)``, ``batch`` (N,)
    the cloud of each point (or None: no batch bits)."""
    check_orders((order,))
    check_depth(grid_coord, depth, int(batch.max()) + 1 if batch is not None and batch.numel() else 1)
    return code_of(grid_coord, batch, depth, order)


def check_orders(orders: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` for an order not in :data:`ORDERS`."""
    for order in orders:
        if order not in ORDERS:
            raise ValueError(f"expected a serialization order in {ORDERS}, got {order!r}")


def code_of(grid_coord: Tensor, batch: Tensor | None, depth: int, order: str) -> Tensor:
    """:func:`encode` without its checks, for inputs already checked (``check_orders``, ``check_depth``:
    each reads the GPU's values back, once a forward is enough)."""
    g = grid_coord.long()
    if order.endswith("-trans"):
        g = g[:, [1, 0, 2]]
    code = z_order(g) if order.startswith("z") else hilbert(g, depth)
    if batch is not None:
        code = (batch.long() << (3 * depth)) | code
    return code
