"""Exact k nearest neighbours on the GPU in Triton: Morton-sorted blocks with bounding boxes, pruned search.

The result (``knn`` backend ``"triton"``) is defined exactly, whatever the data:

- the distance of query ``q`` to support point ``s`` is the float32 value
  ``d2 = ((q_x - s_x)^2 + (q_y - s_y)^2) + (q_z - s_z)^2``, each operation rounded on its own (no fused
  multiply-add), the same expression as the torch backend's final step;
- the search compares keys ``bits(d2) << 32 | (row - first row of the cloud)`` (int64): the float32 bits
  of a non-negative number order like the number, so a key orders like the pair ``(d2, row)``; a cloud
  may hold up to 2^31 points;
- the neighbours of ``q`` are the ``k`` points of its own support cloud that come first in the total
  order of ``(d2, global support row)``: **ties in distance go to the smaller row**; each row of the
  output is sorted ascending by that pair;
- a support cloud of ``n < k`` points gives its ``n`` sorted neighbours repeated cyclically (column ``c``
  holds neighbour ``c mod n``), as every ``knn`` backend does.

So the result is unique, independent of the order of processing and the same run to run; without ties it
is the neighbour set of the CPU backends. Coordinates are converted to float32 first.

Layout (torch, on the device): the points of each cloud are sorted by the Morton code of their position
in the support cloud's bounding cube (16 bits per axis) and cut into blocks of consecutive points, padded
per cloud::

    # support planes (3, NBS * BLOCK_S): [ cloud 0: block 0 | block 1 | ... (last one padded) | cloud 1: ... ]
    # support rows   (NBS * BLOCK_S,):   global support row of each slot, -1 for padding
    # boxes          (NBS, 6):           min x, y, z and max x, y, z of each support block
    # super boxes    (NSB, 6):           the same of blocks SUPER * j .. SUPER * (j + 1) - 1 of a cloud

One program per query block (``BLOCK_Q`` consecutive sorted queries of one cloud) keeps a ``(BLOCK_Q, KP)``
top-k of keys in registers. It first merges the ``WINDOW`` support blocks nearest in Morton order to the
block's middle query (``start, start + 1, start - 1, start + 2, ...``: a range of blocks), which makes the
k-th distances nearly final, then scans the rest in two levels: the boxes of super-blocks (``SUPER``
consecutive blocks) ``CHUNK`` at a time, and inside a super-block some query can reach, the boxes of its
blocks; it merges a block only if some query's squared distance to its box is ``<=`` that query's current
k-th distance. The box distance is computed with the same rounded operations, which are monotone, so it
never exceeds the distance of a point inside: a skipped (super-)block holds no neighbour and no tie. A
program reads the boxes of the super-blocks near it, not every box of its cloud.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pointgeope.model.kernels import KernelArgumentError, launch_device
from pointgeope.model.ops.backends import TRITON_KNN_MAX_K
from pointgeope.model.ops.morton import layout
from pointgeope.model.ops.triton_geometry import box_squared_distance, distance_key, key_distance, squared_distance

__all__ = ["knn_triton", "BLOCK_Q", "BLOCK_S", "KNN_WARPS", "SUPER"]

BLOCK_Q = 32    # queries per program (H100, stage 0 of 2 x 80k, k = 16: 32/32/4 warps 5.0 ms, 64/64/8 8.6 ms,
BLOCK_S = 32    # support points per block                        32/64/4 8.9 ms; 64/64/8 spills under Triton 3.6)
KNN_WARPS = 4   # warps per program
WINDOW = 8      # support blocks merged first, nearest in Morton order, whatever their boxes
CHUNK = 32      # boxes tested together in the scan of the rest
SUPER = 32      # blocks of a super-block (its blocks are one CHUNK)
_NONE = tl.constexpr(0x7FFFFFFFFFFFFFFF)   # no candidate: above every key
_EMPTY = tl.constexpr(0x7F80000080000000)  # key of an empty top-k slot: (inf, local row 2^31), + slot number


@triton.jit
def _merge(best, qx, qy, qz, q_ok, s_ptr, s_row_ptr, plane, s_first, b, BS: tl.constexpr):
    """Insert the points of support block ``b`` that beat a row's worst key, best first, one per row and
    pass, in place of that worst key, until no row has a better candidate left.

    A key is ``bits(d2) << 32 | (row - s_first)``: the float32 bits of a non-negative distance order like
    the distance, so comparing keys compares ``(d2, row)``."""
    rs = b * BS + tl.arange(0, BS)
    dx = qx[:, None] - tl.load(s_ptr + rs)[None, :]
    dy = qy[:, None] - tl.load(s_ptr + plane + rs)[None, :]
    dz = qz[:, None] - tl.load(s_ptr + 2 * plane + rs)[None, :]
    d = squared_distance(dx, dy, dz)                                     # (BQ, BS)
    row = tl.load(s_row_ptr + rs)
    key = distance_key(d, (row - s_first)[None, :])
    key = tl.where(q_ok[:, None] & (row >= 0)[None, :], key, _NONE)
    go = 1
    while go > 0:
        worst = tl.max(best, 1)
        key = tl.where(key < worst[:, None], key, _NONE)
        first = tl.min(key, 1)
        has = first < _NONE
        best = tl.where((best == worst[:, None]) & has[:, None], first[:, None], best)
        key = tl.where(key == first[:, None], _NONE, key)
        go = tl.max(has.to(tl.int32), 0)
    return best


@triton.jit
def _worst_d2(best):
    """The k-th (largest kept) distance of each row, from its key."""
    return key_distance(tl.max(best, 1))


@triton.jit
def _scan(best, worst_d, qx, qy, qz, q_ok, s_ptr, s_row_ptr, plane, s_first, box_ptr, lo, hi, w_lo, w_hi,
          BS: tl.constexpr, CH: tl.constexpr):
    """Blocks ``[lo, hi)`` outside the window ``[w_lo, w_hi)``, ``CH`` boxes at a time: merge each block
    some query's box distance does not exceed that query's k-th distance, nearest-index first."""
    c0 = lo
    while c0 < hi:                                     # while: bounds loaded from memory (Triton 3.6's interpreter)
        b = c0 + tl.arange(0, CH)
        live = (b < hi) & ((b < w_lo) | (b >= w_hi))
        box_d = _box_d2(box_ptr, b, live, qx, qy, qz)                     # (BQ, CH)
        ok = live[None, :] & q_ok[:, None]
        need = tl.max((ok & (box_d <= worst_d[:, None])).to(tl.int32), 0) > 0
        while tl.max(need.to(tl.int32), 0) > 0:
            nb = tl.min(tl.where(need, b, hi), 0)
            best = _merge(best, qx, qy, qz, q_ok, s_ptr, s_row_ptr, plane, s_first, nb, BS)
            worst_d = _worst_d2(best)
            ok = ok & (b != nb)[None, :]
            need = tl.max((ok & (box_d <= worst_d[:, None])).to(tl.int32), 0) > 0
        c0 += CH
    return best, worst_d


@triton.jit
def _box_d2(box_ptr, b, live, qx, qy, qz):
    """``(BQ, CH)`` squared distances of the queries to boxes ``b``, rounded like ``d2`` (never above the
    distance to a point inside)."""
    box = box_ptr + b * 6
    lx, ly, lz = (tl.load(box, mask=live, other=0.0)[None, :], tl.load(box + 1, mask=live, other=0.0)[None, :],
                  tl.load(box + 2, mask=live, other=0.0)[None, :])
    hx, hy, hz = (tl.load(box + 3, mask=live, other=0.0)[None, :], tl.load(box + 4, mask=live, other=0.0)[None, :],
                  tl.load(box + 5, mask=live, other=0.0)[None, :])
    return box_squared_distance(lx, ly, lz, hx, hy, hz, qx[:, None], qy[:, None], qz[:, None])


@triton.jit
def _scan_super(best, worst_d, qx, qy, qz, q_ok, s_ptr, s_row_ptr, plane, s_first, box_ptr, sbox_ptr, lo, hi,
                slo, shi, w_lo, w_hi, BS: tl.constexpr, CH: tl.constexpr, SB: tl.constexpr):
    """Super-blocks ``[slo, shi)`` (blocks ``lo + SB j ..``), ``CH`` boxes at a time: the blocks of each one
    some query can reach are scanned by :func:`_scan`, nearest-index first."""
    c0 = slo
    while c0 < shi:
        sb = c0 + tl.arange(0, CH)
        live = sb < shi
        sbox_d = _box_d2(sbox_ptr, sb, live, qx, qy, qz)
        ok = live[None, :] & q_ok[:, None]
        need = tl.max((ok & (sbox_d <= worst_d[:, None])).to(tl.int32), 0) > 0
        while tl.max(need.to(tl.int32), 0) > 0:
            ns = tl.min(tl.where(need, sb, shi), 0)
            b_lo = lo + (ns - slo) * SB
            best, worst_d = _scan(best, worst_d, qx, qy, qz, q_ok, s_ptr, s_row_ptr, plane, s_first, box_ptr,
                                  b_lo, tl.minimum(b_lo + SB, hi), w_lo, w_hi, BS, CH)
            ok = ok & (sb != ns)[None, :]
            need = tl.max((ok & (sbox_d <= worst_d[:, None])).to(tl.int32), 0) > 0
        c0 += CH
    return best, worst_d


@triton.jit
def _knn_kernel(q_ptr, q_row_ptr, q_plane, s_ptr, s_row_ptr, s_plane, box_ptr, sbox_ptr, qb_ptr, idx_ptr, d2_ptr,
                K: tl.constexpr, KP: tl.constexpr, BQ: tl.constexpr, BS: tl.constexpr, W: tl.constexpr,
                CH: tl.constexpr, SB: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rq = pid * BQ + tl.arange(0, BQ)
    q_row = tl.load(q_row_ptr + rq)                                       # global query row, -1: padding
    q_ok = q_row >= 0
    qx = tl.load(q_ptr + rq)
    qy = tl.load(q_ptr + q_plane + rq)
    qz = tl.load(q_ptr + 2 * q_plane + rq)
    meta = qb_ptr + pid * 6
    lo, hi = tl.load(meta), tl.load(meta + 1)                             # the cloud's support blocks [lo, hi)
    start = tl.load(meta + 2)
    s_first = tl.load(meta + 3)                                           # the cloud's first support row
    slo, shi = tl.load(meta + 4), tl.load(meta + 5)                       # and its super-blocks
    best = tl.zeros((BQ, KP), tl.int64) + _EMPTY + tl.arange(0, KP)[None, :]
    # the window: the W blocks nearest in Morton order, start, start + 1, start - 1, start + 2, ... (a range)
    m = tl.minimum(start - lo, hi - 1 - start)                            # blocks on the shorter side
    n = tl.where(hi - lo < W, hi - lo, W)                                 # blocks in the window
    t = n * 0
    while t < n:
        r = (t + 1) // 2
        b = tl.where(t % 2 == 1, start + r, start - r)
        b = tl.where(t <= 2 * m, b, tl.where(hi - 1 - start > start - lo, start + (t - m), start - (t - m)))
        best = _merge(best, qx, qy, qz, q_ok, s_ptr, s_row_ptr, s_plane, s_first, b, BS)
        t += 1
    w_lo = tl.where(n - 1 <= 2 * m, start - (n - 1) // 2, tl.where(hi - 1 - start > start - lo, lo, hi - n))
    best, _ = _scan_super(best, _worst_d2(best), qx, qy, qz, q_ok, s_ptr, s_row_ptr, s_plane, s_first, box_ptr,
                          sbox_ptr, lo, hi, slo, shi, w_lo, w_lo + n, BS, CH, SB)
    for c in tl.static_range(K):                                          # emit sorted by (d2, row)
        first = tl.min(best, 1)
        tl.store(idx_ptr + q_row * K + c, (first & 0xFFFFFFFF) + s_first, mask=q_ok)
        tl.store(d2_ptr + q_row * K + c, key_distance(first), mask=q_ok)
        best = tl.where(best == first[:, None], _NONE, best)


def _super_boxes(tiles, boxes: Tensor) -> tuple[Tensor, Tensor]:
    """``(NSB, 6)`` boxes of every cloud's super-blocks (``SUPER`` consecutive blocks, the last one shorter)
    and ``(B,)`` the first super-block of each cloud."""
    device = boxes.device
    supers_t = (tiles.blocks_t + SUPER - 1) // SUPER
    super_start = torch.cumsum(supers_t, 0) - supers_t
    cloud = torch.repeat_interleave(torch.arange(len(tiles.blocks), device=device), tiles.blocks_t)
    block = torch.arange(boxes.shape[0], device=device) - tiles.block_start_t[cloud]
    index = (super_start[cloud] + block // SUPER)[:, None].expand(-1, 3)
    nsb = sum(triton.cdiv(b, SUPER) for b in tiles.blocks)
    lo = torch.full((nsb, 3), torch.inf, device=device).scatter_reduce_(0, index, boxes[:, :3], "amin")
    hi = torch.full((nsb, 3), -torch.inf, device=device).scatter_reduce_(0, index, boxes[:, 3:], "amax")
    return torch.cat([lo, hi], 1).contiguous(), super_start


def _query_blocks(q_tiles, s_tiles, super_start: Tensor) -> Tensor:
    """``(NQB, 6)`` int64 per query block: its cloud's support blocks ``[lo, hi)``, the block to start
    from (the one holding the support point at the Morton position of the block's middle query), the
    cloud's first support row and its super-blocks ``[slo, shi)``."""
    device = q_tiles.keys.device
    cloud = torch.repeat_interleave(torch.arange(len(q_tiles.blocks), device=device), q_tiles.blocks_t)
    first = torch.arange(cloud.numel(), device=device) - q_tiles.block_start_t[cloud]   # block within cloud
    middle = (first * BLOCK_Q + BLOCK_Q // 2).clamp(max=q_tiles.sizes_t[cloud] - 1) + q_tiles.start_t[cloud]
    pos = torch.searchsorted(s_tiles.keys, q_tiles.keys[middle])
    s_first = s_tiles.start_t[cloud]
    pos = torch.minimum(torch.maximum(pos, s_first), s_first + s_tiles.sizes_t[cloud] - 1)
    lo = s_tiles.block_start_t[cloud]
    start = lo + (pos - s_first) // BLOCK_S
    slo = super_start[cloud]
    shi = slo + (s_tiles.blocks_t[cloud] + SUPER - 1) // SUPER
    return torch.stack([lo, lo + s_tiles.blocks_t[cloud], start, s_first, slo, shi], 1).contiguous()


def knn_triton(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """``idx (M, k)`` int64 and ``dist2 (M, k)`` float32 (see the module docstring); offsets as lists. The
    support and query layouts come from ``morton.layout`` (once per cloud inside ``shared_layouts``); a
    self-kNN (the same points and clouds) uses one layout for both. ``k <= backends.TRITON_KNN_MAX_K``."""
    if k > TRITON_KNN_MAX_K:
        raise KernelArgumentError(f"the Triton kNN takes k <= {TRITON_KNN_MAX_K}, got k={k}: call ops.knn, whose "
                                  "default backend takes a larger k elsewhere")
    q32 = query.detach().to(torch.float32).contiguous()
    s32 = support.detach().to(torch.float32).contiguous()
    s_tiles, boxes = layout(s32, s_off, BLOCK_S)                          # boxes (NBS, 6)
    same = q32.data_ptr() == s32.data_ptr() and q32.shape == s32.shape and q_off == s_off and BLOCK_Q == BLOCK_S
    q_tiles = s_tiles if same else layout(q32, q_off, BLOCK_Q, frame_of=(s32, s_off))[0]
    super_boxes, super_start = _super_boxes(s_tiles, boxes)
    qb = _query_blocks(q_tiles, s_tiles, super_start)
    idx = torch.empty(query.shape[0], k, dtype=torch.long, device=query.device)
    dist2 = torch.empty(query.shape[0], k, dtype=torch.float32, device=query.device)
    kp = max(2, triton.next_power_of_2(k))
    with launch_device(query.device):
        _knn_kernel[(qb.shape[0],)](q_tiles.planes, q_tiles.rows, q_tiles.planes.shape[1], s_tiles.planes,
                                    s_tiles.rows, s_tiles.planes.shape[1], boxes, super_boxes, qb, idx, dist2,
                                    K=k, KP=kp, BQ=BLOCK_Q, BS=BLOCK_S, W=WINDOW, CH=CHUNK, SB=SUPER,
                                    num_warps=KNN_WARPS, enable_fp_fusion=False)
    return idx, dist2
