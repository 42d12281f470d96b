"""Exact farthest point sampling on the GPU in Triton: each cloud's whole loop in one program.

The result (``fps`` backend ``"triton"``) is the sequence of the ``torch`` backend, bit for bit on float32
coordinates: from ``c_0 = 0`` (the cloud's first point), with ``dist_j`` the float32 squared distance of
point ``j`` to its nearest chosen sample,

    dist_j <- min(dist_j, ((x_j - x_c)^2 + (y_j - y_c)^2) + (z_j - z_c)^2)     (no fused multiply-add)
    c_{s+1} = the smallest j with dist_j = max_l dist_l

(``torch.argmax`` returns the first maximal index, so duplicates and exact ties resolve the same way).
Coordinates are converted to float32 first (the torch backend computes float64 input in float64).

One program per cloud, all clouds of a batch in parallel, one launch for the whole sampling. Two kernels:

- ``stream``: a step streams the cloud in chunks of ``BLOCK`` points: it updates ``dist`` (a global
  buffer, each slot read and written by the same thread) and a per-lane running maximum with its first
  index, then reduces the lanes once: the max, then the smallest index holding it. Reads every point
  at every step.
- ``pruned`` (the former default; H100: as fast as ``rounds`` at 32 chunk blocks, ``bench_hierarchy.py``): the
  cloud is sorted in Morton order
  and cut into blocks of ``BLOCK_P`` points with bounding boxes (``morton``); each block keeps its largest
  ``dist`` and the smallest row holding it.
  A step updates only the blocks whose box is nearer to the new sample than their largest ``dist``
  (``box_dist2 < block max``; elsewhere ``min(dist, d)`` cannot change, as ``d >= box_dist2`` with the
  same monotone rounding), ``GROUP`` blocks at a time, and takes the new sample from the blocks'
  maxima: the max, then the smallest row. Late in the sampling a step touches a few blocks instead of
  the whole cloud. The blocks to visit are listed through a scratch buffer and the block maxima go
  through global memory, with ``tl.debug_barrier()`` between writes and reads by other threads of the
  program (the interpreter runs a program's threads as one, so only a GPU run exercises the barriers;
  ``num_stages=1`` keeps Triton from prefetching loads across them).
- ``rounds`` (the default, ``triton_fps_rounds``): exact picks several at a time from a chunk of the blocks
  with the largest distances, in registers; the fewest dependent steps.

Loops bounded by values loaded from memory are ``while`` loops: Triton 3.6's interpreter (with numpy >= 2.4)
cannot take such a bound in ``range``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pointgeope.model.ops.morton import launch_device
from pointgeope.model.ops.triton_fps_rounds import cloud_blocks, fps_rounds

__all__ = ["fps_triton", "BLOCK_P", "GROUP", "METHODS", "METHOD"]

BLOCK_P = 64       # points per block of the pruned kernel
GROUP = 8          # blocks updated together
PRUNED_WARPS = 8   # warps of a pruned program (untuned: bench/bench_hierarchy.py time_fps_variants)
STREAM_BLOCK = 4096       # points per chunk of the stream kernel, at most
METHODS = ("rounds", "pruned", "stream")
METHOD = "rounds"         # the default up to MAX_BLOCKS blocks a cloud
MAX_BLOCKS = 2048         # larger clouds (131k points at 64 a block) take the stream kernel: the block kernels
                          # hold a lane per block in registers and are checked without spills up to 2048

_NONE = tl.constexpr(1 << 62)  # larger than every index


@triton.jit
def _fps_kernel(p_ptr, plane, dist_ptr, start_ptr, size_ptr, kept_ptr, out_start_ptr, out_ptr,
                BLOCK: tl.constexpr):
    cloud = tl.program_id(0)
    start = tl.load(start_ptr + cloud)                     # int64: first row of the cloud
    n = tl.load(size_ptr + cloud)
    m = tl.load(kept_ptr + cloud)
    out = out_ptr + tl.load(out_start_ptr + cloud)
    lane = tl.arange(0, BLOCK)
    last = start
    tl.store(out, last)
    s = m * 0 + 1                                          # while loops: bounds loaded from memory (module doc)
    while s < m:
        cx = tl.load(p_ptr + last)
        cy = tl.load(p_ptr + plane + last)
        cz = tl.load(p_ptr + 2 * plane + last)
        run_d = tl.full((BLOCK,), -1.0, tl.float32)        # below every distance: padding never wins
        run_j = tl.zeros((BLOCK,), tl.int64)
        c0 = n * 0
        while c0 < n:
            j = c0 + lane
            ok = j < n
            r = start + j
            dx = tl.load(p_ptr + r, mask=ok, other=0.0) - cx
            dy = tl.load(p_ptr + plane + r, mask=ok, other=0.0) - cy
            dz = tl.load(p_ptr + 2 * plane + r, mask=ok, other=0.0) - cz
            d = tl.minimum(tl.load(dist_ptr + r, mask=ok, other=-1.0), (dx * dx + dy * dy) + dz * dz)
            tl.store(dist_ptr + r, d, mask=ok)
            up = ok & (d > run_d)                          # strict: an earlier chunk keeps its tie
            run_d = tl.where(up, d, run_d)
            run_j = tl.where(up, j, run_j)
            c0 += BLOCK
        best = tl.max(run_d, 0)
        last = start + tl.min(tl.where(run_d == best, run_j, _NONE), 0)
        tl.store(out + s, last)
        s += 1


@triton.jit
def _update_blocks(count, scratch, p_ptr, plane, row_ptr, dist_ptr, bmax_ptr, barg_ptr, cx, cy, cz,
                   BP: tl.constexpr, G: tl.constexpr):
    """``min(dist, d)`` over the ``count`` blocks listed in ``scratch``, ``G`` at a time, and their new
    maxima with the smallest row holding each."""
    g0 = count * 0
    while g0 < count:
        g = g0 + tl.arange(0, G)
        ids = tl.load(scratch + g, mask=g < count, other=0)
        slot = ids[:, None] * BP + tl.arange(0, BP)[None, :]            # (G, BP) tiled positions
        row = tl.load(row_ptr + slot, mask=(g < count)[:, None], other=-1)
        ok = row >= 0
        dx = tl.load(p_ptr + slot, mask=ok, other=0.0) - cx
        dy = tl.load(p_ptr + plane + slot, mask=ok, other=0.0) - cy
        dz = tl.load(p_ptr + 2 * plane + slot, mask=ok, other=0.0) - cz
        d = tl.minimum(tl.load(dist_ptr + slot, mask=ok, other=-1.0), (dx * dx + dy * dy) + dz * dz)
        tl.store(dist_ptr + slot, d, mask=ok)
        d = tl.where(ok, d, -1.0)
        top = tl.max(d, 1)
        tl.store(bmax_ptr + ids, top, mask=g < count)
        tl.store(barg_ptr + ids, tl.min(tl.where(d == top[:, None], row, _NONE), 1), mask=g < count)
        g0 += G


@triton.jit
def _fps_pruned_kernel(p_ptr, plane, row_ptr, box_ptr, dist_ptr, bmax_ptr, barg_ptr, scratch_ptr, pts_ptr,
                       pts_plane, meta_ptr, out_ptr, NBP: tl.constexpr, BP: tl.constexpr, G: tl.constexpr):
    cloud = tl.program_id(0)
    meta = meta_ptr + cloud * 5                                  # first row, kept, out start, first block, blocks
    m = tl.load(meta + 1)
    out = out_ptr + tl.load(meta + 2)
    lane = tl.arange(0, NBP)
    live = lane < tl.load(meta + 4)
    blk = tl.load(meta + 3) + lane
    lx = tl.load(box_ptr + blk * 6, mask=live, other=0.0)
    ly = tl.load(box_ptr + blk * 6 + 1, mask=live, other=0.0)
    lz = tl.load(box_ptr + blk * 6 + 2, mask=live, other=0.0)
    hx = tl.load(box_ptr + blk * 6 + 3, mask=live, other=0.0)
    hy = tl.load(box_ptr + blk * 6 + 4, mask=live, other=0.0)
    hz = tl.load(box_ptr + blk * 6 + 5, mask=live, other=0.0)
    scratch = scratch_ptr + cloud * NBP
    last = tl.load(meta)
    tl.store(out, last)
    bmax = tl.load(bmax_ptr + blk, mask=live, other=-1.0)       # +inf at first: every block is visited
    s = m * 0 + 1
    while s < m:
        cx = tl.load(pts_ptr + last)
        cy = tl.load(pts_ptr + pts_plane + last)
        cz = tl.load(pts_ptr + 2 * pts_plane + last)
        gx = tl.maximum(tl.maximum(lx - cx, cx - hx), 0.0)
        gy = tl.maximum(tl.maximum(ly - cy, cy - hy), 0.0)
        gz = tl.maximum(tl.maximum(lz - cz, cz - hz), 0.0)
        visit = live & (((gx * gx + gy * gy) + gz * gz) < bmax)
        tl.store(scratch + tl.cumsum(visit.to(tl.int32), 0) - 1, blk, mask=visit)
        tl.debug_barrier()
        _update_blocks(tl.sum(visit.to(tl.int32), 0), scratch, p_ptr, plane, row_ptr, dist_ptr, bmax_ptr,
                       barg_ptr, cx, cy, cz, BP, G)
        tl.debug_barrier()
        bmax = tl.load(bmax_ptr + blk, mask=live, other=-1.0)
        barg = tl.load(barg_ptr + blk, mask=live, other=_NONE)
        last = tl.min(tl.where(bmax == tl.max(bmax, 0), barg, _NONE), 0)
        tl.store(out + s, last)
        s += 1


def _fps_stream(planes: Tensor, sizes: list[int], kept: list[int], out: Tensor) -> None:
    device = planes.device
    sizes_t = torch.tensor(sizes, dtype=torch.long, device=device)
    kept_t = torch.tensor(kept, dtype=torch.long, device=device)
    starts = torch.cumsum(sizes_t, 0) - sizes_t
    out_starts = torch.cumsum(kept_t, 0) - kept_t
    dist = torch.full((planes.shape[1],), torch.inf, dtype=torch.float32, device=device)
    block = min(STREAM_BLOCK, triton.next_power_of_2(max(128, max(sizes))))
    _fps_kernel[(len(sizes),)](planes, planes.shape[1], dist, starts, sizes_t, kept_t, out_starts, out,
                               BLOCK=block, num_warps=16 if block >= 4096 else 4, num_stages=1,
                               enable_fp_fusion=False)


def _fps_pruned(points: Tensor, planes: Tensor, sizes: list[int], kept: list[int], out: Tensor) -> None:
    device = planes.device
    tiles, boxes, nbp, meta = cloud_blocks(points, sizes, kept, BLOCK_P)
    nb = sum(tiles.blocks)
    bmax = torch.full((nb,), torch.inf, dtype=torch.float32, device=device)
    barg = torch.zeros(nb, dtype=torch.long, device=device)
    dist = torch.full((tiles.rows.numel(),), torch.inf, dtype=torch.float32, device=device)
    scratch = torch.zeros(len(sizes) * nbp, dtype=torch.long, device=device)
    _fps_pruned_kernel[(len(sizes),)](tiles.planes, tiles.planes.shape[1], tiles.rows, boxes,
                                      dist, bmax, barg, scratch, planes, planes.shape[1], meta, out, NBP=nbp,
                                      BP=BLOCK_P, G=GROUP, num_warps=PRUNED_WARPS, num_stages=1, enable_fp_fusion=False)


def fps_triton(points: Tensor, sizes: list[int], kept: list[int], method: str | None = None) -> Tensor:
    """``(sum(kept),)`` int64 global rows: the first ``kept[b]`` FPS samples of every cloud, cloud by cloud,
    with the ``"rounds"`` (``triton_fps_rounds``), ``"pruned"`` or ``"stream"`` kernel (the same result).
    ``None``: :data:`METHOD`, unless a cloud has more than :data:`MAX_BLOCKS` blocks (its block maxima would
    no longer fit in registers): then ``stream``."""
    if method is None:
        method = METHOD if max(sizes) <= MAX_BLOCKS * BLOCK_P else "stream"
    if method not in METHODS:
        raise ValueError(f"expected method in {METHODS} or None, got {method!r}")
    points = points.detach().to(torch.float32).contiguous()
    planes = points.T.contiguous()                                        # (3, N): x | y | z
    out = torch.empty(sum(kept), dtype=torch.long, device=points.device)
    with launch_device(points.device):
        if method == "stream":
            _fps_stream(planes, sizes, kept, out)
        elif method == "pruned":
            _fps_pruned(points, planes, sizes, kept, out)
        else:
            fps_rounds(points, planes, sizes, kept, out)
    return out
