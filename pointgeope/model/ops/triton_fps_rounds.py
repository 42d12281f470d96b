"""Exact farthest point sampling in rounds of several samples: the ``rounds`` kernel of ``triton_fps``.

The sequence is the one defined in ``triton_fps`` (float32 squared distances without fused multiply-add, the
largest distance first, ties to the smallest row), bit for bit; only the order of the work changes. With
``key_j = bits(dist_j) << 32 | (2^31 - 1 - (j - first))`` (int64; the bits of a non-negative float order
like the float), the next sample is the point of largest key.

The cloud is sorted in Morton order and cut into blocks of ``BLOCK_POINTS`` points (``morton``) with bounding boxes;
each block keeps the largest key of its points. A round:

1. **Chunk.** From the block maxima, a threshold ladder (``u = 1 - bmax / max``, level ``floor(-2 log2 u)``,
   ``LEVELS`` levels) picks the most blocks that fit ``CHUNK_BLOCKS``: the chunk, every block above a level.
   ``tkey`` is the
   largest block key outside it.
2. **Picks.** The chunk's points are loaded once; while the chunk's best key beats ``tkey``, that point is
   the next sample (every point outside the chunk has a smaller key, and keys only shrink as samples are
   added, so the sample is exact), its distance is folded into the chunk's points in registers, and the
   next best is found by one reduction. At most ``ROUND_SAMPLES`` samples a round.
3. **Update.** The chunk's distances and block keys are written back; every other block whose box is nearer
   to one of the round's samples than its largest distance (elsewhere ``min(dist, d)`` cannot change, as
   ``d >= box_dist2`` with the same monotone rounding) takes the round's samples into its distances and key.

A round yields one sample at least (the largest key lies in the chunk); when even the top level holds more
than ``CHUNK_BLOCKS`` blocks (many exact ties) it is a single step from the block maxima. One program per cloud,
``tl.debug_barrier()`` between writes to scratch memory and reads of it by other threads of the program.
Loops bounded by loaded values are ``while`` loops (Triton 3.6's interpreter cannot take them in ``range``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pointgeope.model.kernel_choice import current
from pointgeope.model.ops.morton import layout
from pointgeope.model.ops.triton_geometry import box_squared_distance, distance_key, key_distance, squared_distance

__all__ = ["fps_rounds", "cloud_blocks", "BLOCK_POINTS", "CHUNK_BLOCKS", "ROUND_SAMPLES"]

BLOCK_POINTS = 64     # points per block
CHUNK_BLOCKS = 16     # blocks of a chunk at most (CHUNK_BLOCKS * BLOCK_POINTS points in registers)
ROUND_SAMPLES = 16    # samples of a round at most (H100, Triton 3.6, 2 x 80k, chunk/round: 16/16 50 ms, 32/32 63 ms,
                      # 32/64 63 ms)
UPDATE_BLOCKS = 8     # blocks updated together after a round
UPDATE_SAMPLES = 1    # samples applied together in that update (more: registers spill, bench/triton_compile_check.py)
LEVELS = 32           # the threshold ladder: 1 - 2^(-i/2), i < LEVELS
WARPS = 8
# All 255 registers a thread may hold at 8 warps: left to itself ptxas caps some sizes at 128 and spills (Triton
# 3.6, 128 blocks: 28-36 bytes); one program a cloud, so the occupancy it would buy is of no use here.
MAXNREG = {"maxnreg": 255}

_NONE = tl.constexpr(-(1 << 62))          # below every key: padding, or no block outside the chunk
_LOW = tl.constexpr(0x7FFFFFFF)
_INF_KEY = tl.constexpr(0x7F800000 << 32)   # the key of an infinite distance


@triton.jit
def _key(d, lrow):
    """``bits(d) << 32 | (2^31 - 1 - lrow)``: larger distance first, then the smaller row."""
    return distance_key(d, _LOW - lrow)


@triton.jit
def _best(k1, x1, y1, z1, k2, x2, y2, z2):
    """Combine of the argmax reduction: the larger key with its coordinates."""
    t = k1 > k2
    return tl.where(t, k1, k2), tl.where(t, x1, x2), tl.where(t, y1, y2), tl.where(t, z1, z2)


@triton.jit
def _argmax(key, x, y, z, TUPLE: tl.constexpr):
    """The largest key and its point's coordinates: one reduction of the tuple when compiled; under the
    interpreter (whose reductions with a combine function run element by element in Python) the key's
    maximum, then the coordinates where the key equals it (keys are unique: one term in each sum)."""
    if TUPLE:
        best, bx, by, bz = tl.reduce((key, x, y, z), 0, _best)
    else:
        best = tl.max(key, 0)
        at = key == best
        bx, by, bz = tl.sum(tl.where(at, x, 0.0), 0), tl.sum(tl.where(at, y, 0.0), 0), tl.sum(tl.where(at, z, 0.0), 0)
    return best, bx, by, bz


@triton.jit
def _chunk(bkey, live, LEVELS: tl.constexpr, CHUNK_BLOCKS: tl.constexpr):
    """The chunk's blocks (lanes) by the threshold ladder, empty if the top level alone exceeds ``CHUNK_BLOCKS``."""
    top = tl.max(bkey, 0)
    md = key_distance(top)
    bmax = key_distance(bkey)
    u = tl.where(md > 0, 1.0 - bmax / tl.where(md > 0, md, 1.0), 0.0)
    # floor(-2 log2 u) from u's bits (u = 2^e (1 + f)): -2e - 1, less one more where 1 + f >= sqrt(2)
    bits = u.to(tl.int32, bitcast=True)
    level = -2 * (((bits >> 23) & 0xFF) - 127) - 1 - ((bits & 0x7FFFFF) >= 0x3504F3).to(tl.int32)
    level = tl.where(u > 0, tl.minimum(tl.maximum(level, 0), LEVELS - 1), LEVELS - 1)
    hist = tl.histogram(level, LEVELS, mask=live)
    above = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist                  # blocks at level >= i
    first = tl.sum((above > CHUNK_BLOCKS).to(tl.int32), 0)   # the lowest level that fits (LEVELS: none)
    return live & (level >= first)


@triton.jit
def _update(bkey, skip, live, blk, lx, ly, lz, hx, hy, hz, picks, pk, ids, p_ptr, plane, row_ptr, dist_ptr,
            bkey_ptr, first, BLOCK_POINTS: tl.constexpr, UPDATE_BLOCKS: tl.constexpr,
            UPDATE_SAMPLES: tl.constexpr, ROUND_SAMPLES: tl.constexpr):
    """Fold the round's ``picks`` samples (``pk``: x | y | z) into every block but ``skip`` that they can
    reach; returns the block keys, reloaded."""
    bmax = key_distance(bkey)
    visit = live & (lx < lx)
    p0 = picks * 0
    while p0 < picks:
        q = p0 + tl.arange(0, UPDATE_SAMPLES)
        px = tl.load(pk + q, mask=q < picks, other=float("inf"))[None, :]
        py = tl.load(pk + ROUND_SAMPLES + q, mask=q < picks, other=float("inf"))[None, :]
        pz = tl.load(pk + 2 * ROUND_SAMPLES + q, mask=q < picks, other=float("inf"))[None, :]
        near = box_squared_distance(lx[:, None], ly[:, None], lz[:, None], hx[:, None], hy[:, None], hz[:, None],
                                    px, py, pz) < bmax[:, None]
        visit = visit | (tl.max(near.to(tl.int32), 1) > 0)
        p0 += UPDATE_SAMPLES
    visit = visit & live & ~skip
    tl.store(ids + tl.cumsum(visit.to(tl.int32), 0) - 1, blk, mask=visit)
    tl.debug_barrier()
    count = tl.sum(visit.to(tl.int32), 0)
    j = tl.arange(0, UPDATE_BLOCKS * BLOCK_POINTS)
    g0 = count * 0
    while g0 < count:
        gok = g0 + j // BLOCK_POINTS < count
        slot = tl.load(ids + g0 + j // BLOCK_POINTS, mask=gok, other=0) * BLOCK_POINTS + j % BLOCK_POINTS
        row = tl.load(row_ptr + slot, mask=gok, other=-1)
        ok = row >= 0
        x, y, z = (tl.load(p_ptr + slot, mask=ok, other=0.0), tl.load(p_ptr + plane + slot, mask=ok, other=0.0),
                   tl.load(p_ptr + 2 * plane + slot, mask=ok, other=0.0))
        d = tl.load(dist_ptr + slot, mask=ok, other=-1.0)
        p0 = picks * 0
        while p0 < picks:
            q = p0 + tl.arange(0, UPDATE_SAMPLES)
            dx = x[:, None] - tl.load(pk + q, mask=q < picks, other=float("inf"))[None, :]
            dy = y[:, None] - tl.load(pk + ROUND_SAMPLES + q, mask=q < picks, other=float("inf"))[None, :]
            dz = z[:, None] - tl.load(pk + 2 * ROUND_SAMPLES + q, mask=q < picks, other=float("inf"))[None, :]
            d = tl.minimum(d, tl.min(squared_distance(dx, dy, dz), 1))
            p0 += UPDATE_SAMPLES
        tl.store(dist_ptr + slot, d, mask=ok)
        gkey = tl.max(tl.reshape(tl.where(ok, _key(d, row - first), _NONE), (UPDATE_BLOCKS, BLOCK_POINTS)), 1)
        b = g0 + tl.arange(0, UPDATE_BLOCKS)
        tl.store(bkey_ptr + tl.load(ids + b, mask=b < count, other=0), gkey, mask=b < count)
        g0 += UPDATE_BLOCKS
    tl.debug_barrier()
    return tl.load(bkey_ptr + blk, mask=live, other=_NONE)


@triton.jit
def _fps_rounds_kernel(p_ptr, plane, row_ptr, box_ptr, dist_ptr, bkey_ptr, ids_ptr, picks_ptr, pts_ptr, pts_plane,
                       meta_ptr, out_ptr, BLOCK_LANES: tl.constexpr, BLOCK_POINTS: tl.constexpr,
                       CHUNK_BLOCKS: tl.constexpr, ROUND_SAMPLES: tl.constexpr, UPDATE_BLOCKS: tl.constexpr,
                       UPDATE_SAMPLES: tl.constexpr, LEVELS: tl.constexpr, TUPLE: tl.constexpr):
    cloud = tl.program_id(0)
    meta = meta_ptr + cloud * 5                                  # first row, kept, out start, first block, blocks
    first, m, out = tl.load(meta), tl.load(meta + 1), out_ptr + tl.load(meta + 2)
    lane = tl.arange(0, BLOCK_LANES)
    live = lane < tl.load(meta + 4)
    blk = tl.load(meta + 3) + lane
    box = box_ptr + blk * 6
    lx, ly, lz = tl.load(box, mask=live, other=0.0), tl.load(box + 1, mask=live, other=0.0), \
        tl.load(box + 2, mask=live, other=0.0)
    hx, hy, hz = tl.load(box + 3, mask=live, other=0.0), tl.load(box + 4, mask=live, other=0.0), \
        tl.load(box + 5, mask=live, other=0.0)
    ids, pk = ids_ptr + cloud * BLOCK_LANES, picks_ptr + cloud * 3 * ROUND_SAMPLES
    tl.store(out, first)                                         # sample 0: the cloud's first point
    for a in tl.static_range(3):
        tl.store(pk + a * ROUND_SAMPLES, tl.load(pts_ptr + a * pts_plane + first))
    tl.debug_barrier()
    bkey = tl.where(live, _INF_KEY, _NONE)                      # every block reachable from the first sample
    bkey = _update(bkey, lane < 0, live, blk, lx, ly, lz, hx, hy, hz, m * 0 + 1, pk, ids, p_ptr, plane, row_ptr,
                   dist_ptr, bkey_ptr, first, BLOCK_POINTS, UPDATE_BLOCKS, UPDATE_SAMPLES, ROUND_SAMPLES)
    s = m * 0 + 1
    while s < m:
        member = _chunk(bkey, live, LEVELS, CHUNK_BLOCKS)
        count = tl.sum(member.to(tl.int32), 0)
        tkey = tl.max(tl.where(member, _NONE, bkey), 0)         # the best key outside the chunk
        tl.store(ids + tl.cumsum(member.to(tl.int32), 0) - 1, blk, mask=member)
        tl.debug_barrier()
        j = tl.arange(0, CHUNK_BLOCKS * BLOCK_POINTS)
        blk_j = j // BLOCK_POINTS                                 # the chunk's block of each lane
        slot = tl.load(ids + blk_j, mask=blk_j < count, other=0) * BLOCK_POINTS + j % BLOCK_POINTS
        row = tl.load(row_ptr + slot, mask=j // BLOCK_POINTS < count, other=-1)
        ok = row >= 0
        x, y, z = (tl.load(p_ptr + slot, mask=ok, other=0.0), tl.load(p_ptr + plane + slot, mask=ok, other=0.0),
                   tl.load(p_ptr + 2 * plane + slot, mask=ok, other=0.0))
        d = tl.load(dist_ptr + slot, mask=ok, other=-1.0)
        best, bx, by, bz = _argmax(tl.where(ok, _key(d, row - first), _NONE), x, y, z, TUPLE)
        if count == 0:                                           # ties at the top: one step, from the maxima
            best = tl.max(bkey, 0)
            r = first + _LOW - (best & 0xFFFFFFFF)
            bx, by, bz = tl.load(pts_ptr + r), tl.load(pts_ptr + pts_plane + r), tl.load(pts_ptr + 2 * pts_plane + r)
            tkey = best - 1
        picks = s * 0
        go = (best > tkey) & (s < m)
        while go:
            tl.store(out + s, first + _LOW - (best & 0xFFFFFFFF))
            tl.store(pk + picks, bx)
            tl.store(pk + ROUND_SAMPLES + picks, by)
            tl.store(pk + 2 * ROUND_SAMPLES + picks, bz)
            s += 1
            picks += 1
            dx, dy, dz = x - bx, y - by, z - bz
            d = tl.minimum(d, squared_distance(dx, dy, dz))
            best, bx, by, bz = _argmax(tl.where(ok, _key(d, row - first), _NONE), x, y, z, TUPLE)
            go = (best > tkey) & (s < m) & (picks < ROUND_SAMPLES) & (count > 0)
        tl.store(dist_ptr + slot, d, mask=ok)
        ckey = tl.max(tl.reshape(tl.where(ok, _key(d, row - first), _NONE), (CHUNK_BLOCKS, BLOCK_POINTS)), 1)
        c = tl.arange(0, CHUNK_BLOCKS)
        tl.store(bkey_ptr + tl.load(ids + c, mask=c < count, other=0), ckey, mask=c < count)
        tl.debug_barrier()
        bkey = _update(tl.load(bkey_ptr + blk, mask=live, other=_NONE), member, live, blk, lx, ly, lz, hx, hy, hz,
                       picks, pk, ids, p_ptr, plane, row_ptr, dist_ptr, bkey_ptr, first, BLOCK_POINTS, UPDATE_BLOCKS,
                       UPDATE_SAMPLES, ROUND_SAMPLES)


def cloud_blocks(points: Tensor, sizes: list[int], kept: list[int], block: int):
    """What a block kernel of FPS reads: the clouds' ``Tiles`` and block boxes (``morton.layout``), the
    lanes ``BLOCK_LANES`` (a power of two holding the most blocks of a cloud) and ``meta (B, 5)`` int64 per cloud:
    first row, samples kept, first output row, first block, blocks."""
    off = torch.tensor(sizes).cumsum(0).tolist()
    tiles, boxes = layout(points, off, block)
    kept_t = torch.tensor(kept, dtype=torch.long, device=points.device)
    meta = torch.stack([tiles.start_t, kept_t, torch.cumsum(kept_t, 0) - kept_t, tiles.block_start_t,
                        tiles.blocks_t], 1).contiguous()
    return tiles, boxes, max(2, triton.next_power_of_2(max(tiles.blocks))), meta


def fps_rounds(points: Tensor, planes: Tensor, sizes: list[int], kept: list[int], out: Tensor) -> None:
    """Write the first ``kept[b]`` samples of every cloud into ``out`` (the module docstring's method):
    ``points (N, 3)`` float32, ``planes`` its ``(3, N)`` transpose, on one device; the chunk's blocks and a
    round's samples at most :data:`CHUNK_BLOCKS`, :data:`ROUND_SAMPLES`."""
    device = planes.device
    tiles, boxes, lanes, meta = cloud_blocks(points, sizes, kept, BLOCK_POINTS)
    dist = torch.full((tiles.rows.numel(),), torch.inf, dtype=torch.float32, device=device)
    bkey = torch.empty(sum(tiles.blocks), dtype=torch.long, device=device)
    ids = torch.zeros(len(sizes) * lanes, dtype=torch.long, device=device)
    picks = torch.zeros(len(sizes) * 3 * ROUND_SAMPLES, dtype=torch.float32, device=device)
    tuple_argmax = not current().interpret          # the argmax as one tuple reduction when compiled (_argmax)
    _fps_rounds_kernel[(len(sizes),)](tiles.planes, tiles.planes.shape[1], tiles.rows, boxes, dist, bkey, ids, picks,
                                      planes, planes.shape[1], meta, out, BLOCK_LANES=lanes, BLOCK_POINTS=BLOCK_POINTS,
                                      CHUNK_BLOCKS=CHUNK_BLOCKS, ROUND_SAMPLES=ROUND_SAMPLES,
                                      UPDATE_BLOCKS=UPDATE_BLOCKS,
                                      UPDATE_SAMPLES=UPDATE_SAMPLES, LEVELS=LEVELS, TUPLE=tuple_argmax, num_warps=WARPS,
                                      num_stages=1, enable_fp_fusion=False, **MAXNREG)
