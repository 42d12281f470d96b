"""Spatial order of packed clouds for the block-based GPU kernels: Morton codes and padded blocks.

The Morton (Z-order) code interleaves the bits of the quantised coordinates, ``code = ... z1 y1 x1 z0 y0 x0``,
so points close in the code are mostly close in space. Sorting each cloud by its code and cutting it into
blocks of consecutive points gives compact blocks whose bounding boxes prune a neighbour search. The order
only affects speed: the kernels' results do not depend on it.

The code of one point in plain arithmetic (``code``, ``cell``, ``cube_scale``) is :mod:`pointgeope.morton_code`'s
(torch-free and numba-free: data code and the CPU order import it too); this module
computes the same on whole tensors.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor

from pointgeope.model.ops.offsets import cloud_of_rows, counts
from pointgeope.morton_code import cell, code, cube_scale

__all__ = ["tile_sorted", "block_boxes", "Tiles", "BITS", "cloud_frame", "keys_in",
           "layout", "shared_layouts", "code", "cell", "cube_scale"]

BITS = 16  # bits per axis: 48 bits of code, the cloud's number above them


# --- the keys of packed clouds (torch) -----------------------------------------------------------------------

@cache
def _spread_table(device: torch.device) -> Tensor:
    """``(2^BITS, 3)`` int64: the code of every cell number on axis x, y, z alone (one gather per point
    instead of 15 tensor ops per axis)."""
    v = torch.arange(1 << BITS, device=device)
    return torch.stack([code(v, 0, 0), code(0, v, 0), code(0, 0, v)], 1)


def _cloud_ids(off: list[int], device: torch.device) -> Tensor:
    return cloud_of_rows(torch.tensor(off, device=device), off[-1])


def cloud_frame(points: Tensor, off: list[int]) -> tuple[Tensor, Tensor]:
    """The bounding cube of every cloud: ``lo (B, 3)`` and ``scale (B,)`` cells per unit length (``cube_scale``
    of its side at ``BITS``)."""
    if len(off) >= 1 << (63 - 3 * BITS):
        raise ValueError(f"expected fewer than {1 << (63 - 3 * BITS)} clouds in a batch (the key's top bits), "
                         f"got {len(off)}: split the batch")
    index = _cloud_ids(off, points.device)[:, None].expand(-1, 3)
    lo = torch.full((len(off), 3), torch.inf, device=points.device).scatter_reduce_(0, index, points, "amin")
    hi = torch.full((len(off), 3), -torch.inf, device=points.device).scatter_reduce_(0, index, points, "amax")
    return lo, ((1 << BITS) - 1) / (hi - lo).amax(1).clamp_min(1e-12)


def keys_in(points: Tensor, off: list[int], frame: tuple[Tensor, Tensor]) -> Tensor:
    """``cloud << 48 | code`` (int64) of every point, ``code`` of its ``cell`` on each axis of its cloud's cube
    of ``frame`` at ``BITS`` (points outside it are clamped to its faces)."""
    lo, scale = frame
    cloud = _cloud_ids(off, points.device)
    cells = ((points - lo[cloud]) * scale[cloud, None]).clamp(0, (1 << BITS) - 1).long()
    parts = _spread_table(points.device).gather(0, cells)                   # (N, 3) code of each axis alone
    return (cloud << (3 * BITS)) | parts[:, 0] | parts[:, 1] | parts[:, 2]


@dataclass(frozen=True)
class Tiles:
    """Points sorted by key and cut into blocks of ``block`` slots per cloud, the last block of each cloud
    padded::

        # planes (3, NB * block): x, y, z of each slot (0 in padding)
        # rows   (NB * block,):   global row of the point in each slot, -1 in padding
    """

    order: Tensor           # (N,) rows in sorted order (grouped by cloud: the cloud is the key's top bits)
    planes: Tensor
    rows: Tensor
    blocks: list[int]       # blocks per cloud
    blocks_t: Tensor        # (B,) the same on the device
    block_start_t: Tensor   # (B,) first block of each cloud
    sizes_t: Tensor         # (B,) points per cloud
    start_t: Tensor         # (B,) first sorted position (= first row) of each cloud
    keys: Tensor            # (N,) the keys in sorted order


def tile_sorted(points: Tensor, keys: Tensor, off: list[int], block: int) -> Tiles:
    """The ``Tiles`` of ``points (N, 3)`` sorted by ``keys (N,)`` (stable sort: deterministic)."""
    device = points.device
    sizes = counts(off)
    blocks = [-(-n // block) for n in sizes]
    order = torch.sort(keys, stable=True).indices
    sizes_t = torch.tensor(sizes, device=device)
    blocks_t = torch.tensor(blocks, device=device)
    start_t = torch.cumsum(sizes_t, 0) - sizes_t
    block_start_t = torch.cumsum(blocks_t, 0) - blocks_t
    cloud = _cloud_ids(off, device)
    slot = torch.arange(points.shape[0], device=device) + (block_start_t * block - start_t)[cloud]
    planes = torch.zeros(3, sum(blocks) * block, dtype=points.dtype, device=device)
    planes[:, slot] = points[order].T
    rows = torch.full((sum(blocks) * block,), -1, dtype=torch.long, device=device)
    rows[slot] = order
    return Tiles(order, planes, rows, blocks, blocks_t, block_start_t, sizes_t, start_t, keys[order])


def block_boxes(tiles: Tiles, block: int) -> Tensor:
    """``(NB, 6)`` bounding box of every block, ``min x, y, z, max x, y, z`` (padding left out)."""
    valid = (tiles.rows >= 0)[None, :]
    lo = torch.where(valid, tiles.planes, torch.inf).view(3, -1, block).amin(2)
    hi = torch.where(valid, tiles.planes, -torch.inf).view(3, -1, block).amax(2)
    return torch.cat([lo, hi]).T.contiguous()


# --- one layout per cloud for the ops of a hierarchy ---------------------------------------------------------

_shared = threading.local()      # the layouts of the hierarchy being built in this thread (shared_layouts)


@contextlib.contextmanager
def shared_layouts(points: Tensor, off: list[int]):
    """Within the block, :func:`layout` quantises every cloud in the cubes of ``points`` (the hierarchy's
    input, which holds every stage's points) and sorts and tiles each cloud tensor once: a stage's FPS, its
    kNN as support and as queries share one layout. Per thread (a loader worker, the side stream's thread)."""
    previous = getattr(_shared, "state", None)
    _shared.state = (cloud_frame(points.detach().to(torch.float32), off), {})
    try:
        yield
    finally:
        _shared.state = previous


def layout(points: Tensor, off: list[int], block: int, frame_of: tuple[Tensor, list[int]] | None = None
           ) -> tuple[Tiles, Tensor]:
    """``points (N, 3)`` float32 in Morton order, tiled by ``block``, and the boxes of its blocks
    (``block_boxes``): quantised in the cubes of ``frame_of`` (default: the points' own clouds), or in a
    :func:`shared_layouts` block in its frame, computed once per tensor there."""
    state = getattr(_shared, "state", None)
    key = (points.data_ptr(), points.shape[0], tuple(off), block)
    if state is not None and key in state[1]:
        return state[1][key][1]
    frame = state[0] if state is not None else cloud_frame(*(frame_of or (points, off)))
    tiles = tile_sorted(points, keys_in(points, off, frame), off, block)
    out = (tiles, block_boxes(tiles, block))
    if state is not None:       # holding the tensor keeps its memory, so no other tensor takes its address
        state[1][key] = (points, out)
    return out
