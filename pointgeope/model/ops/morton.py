"""Spatial order of packed clouds for the block-based GPU kernels: Morton codes and padded blocks (and the
device context the kernels launch in).

The Morton (Z-order) code interleaves the bits of the quantised coordinates, ``code = ... z1 y1 x1 z0 y0 x0``,
so points close in the code are mostly close in space. Sorting each cloud by its code and cutting it into
blocks of consecutive points gives compact blocks whose bounding boxes prune a neighbour search. The order
only affects speed: the kernels' results do not depend on it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from pointgeope.model.ops.offsets import counts

__all__ = ["morton_keys", "tile_sorted", "block_boxes", "launch_device", "Tiles", "BITS"]

BITS = 16  # bits per axis: 48 bits of code, the cloud's number above them
_SPREAD = ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F), (4, 0x10C30C30C30C30C3),
           (2, 0x1249249249249249))


def _spread(v: Tensor) -> Tensor:
    """Bits ``b`` of ``v`` (int64, < 2^21) moved to bits ``3 b``."""
    for shift, mask in _SPREAD:
        v = (v | (v << shift)) & mask
    return v


@lru_cache(maxsize=None)
def _spread_table(device: torch.device) -> Tensor:
    """``(2^BITS, 3)`` int64: the spread bits of every cell number, shifted for axis x, y, z (one gather per
    point instead of 15 tensor ops per axis)."""
    spread = _spread(torch.arange(1 << BITS, device=device))
    return torch.stack([spread, spread << 1, spread << 2], 1)


def _cloud_ids(off: list[int], device: torch.device) -> Tensor:
    sizes = torch.tensor(counts(off), device=device)
    return torch.repeat_interleave(torch.arange(len(off), device=device), sizes)


def morton_keys(support: Tensor, s_off: list[int], query: Tensor, q_off: list[int]) -> tuple[Tensor, Tensor]:
    """``cloud << 48 | morton`` (int64) of every support and query point, both quantised in the bounding
    cube of their support cloud (queries outside it are clamped to its faces)."""
    if len(s_off) >= 1 << (63 - 3 * BITS):
        raise ValueError(f"expected fewer than {1 << (63 - 3 * BITS)} clouds in a batch (the key's top bits), "
                         f"got {len(s_off)}: split the batch")
    s_cloud, q_cloud = _cloud_ids(s_off, support.device), _cloud_ids(q_off, query.device)
    index = s_cloud[:, None].expand(-1, 3)
    lo = torch.full((len(s_off), 3), torch.inf, device=support.device).scatter_reduce_(0, index, support, "amin")
    hi = torch.full((len(s_off), 3), -torch.inf, device=support.device).scatter_reduce_(0, index, support, "amax")
    scale = ((1 << BITS) - 1) / (hi - lo).amax(1).clamp_min(1e-12)      # (B,) cells per unit length
    table = _spread_table(support.device)

    def keys(points: Tensor, cloud: Tensor) -> Tensor:
        cell = ((points - lo[cloud]) * scale[cloud, None]).clamp(0, (1 << BITS) - 1).long()
        code = table.gather(0, cell)                                      # (N, 3) spread bits per axis
        return (cloud << (3 * BITS)) | code[:, 0] | code[:, 1] | code[:, 2]

    s_keys = keys(support, s_cloud)
    if query is support and q_off == s_off:                             # self-neighbourhoods: the same keys
        return s_keys, s_keys
    return s_keys, keys(query, q_cloud)


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
    return Tiles(order, planes, rows, blocks, blocks_t, block_start_t, sizes_t, start_t)


def block_boxes(tiles: Tiles, block: int) -> Tensor:
    """``(NB, 6)`` bounding box of every block, ``min x, y, z, max x, y, z`` (padding left out)."""
    valid = (tiles.rows >= 0)[None, :]
    lo = torch.where(valid, tiles.planes, torch.inf).view(3, -1, block).amin(2)
    hi = torch.where(valid, tiles.planes, -torch.inf).view(3, -1, block).amax(2)
    return torch.cat([lo, hi]).T.contiguous()


def launch_device(device: torch.device):
    """Context to launch a Triton kernel on ``device``: Triton launches on the current CUDA device, which
    need not be the tensors' (``cuda:1`` while the current one is ``cuda:0``)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
