"""Exact farthest point sampling on the CPU: a bucket tree over each cloud, compiled with numba.

The result (``fps`` backend ``"numba"``, the CPU default, what the data loader's workers run) is the
sequence of the ``torch`` and ``triton`` backends, bit for bit (``fps.py`` states the rule): from the
cloud's first point, float32 squared distances ``((dx*dx + dy*dy) + dz*dz)`` with one rounding per
operation (no fused multiply-add: numba's default, without ``fastmath``, emits none), ties to the
smallest row. The tree only decides which distances need updating, so it changes the speed, not the
result. The idea is QuickFPS's bucket tree (Han et al., 2023), the library behind ``fpsample``.

The tree of one cloud of ``n`` points: ``P`` leaves of ``leaf`` consecutive points (``P`` a power of two, the
last leaves empty) of the points in kd order, a complete binary tree over them (``_kd_order``: node ``v``'s
points split at its left subtree's share of the leaves, those lower along the axis of the points' widest extent
to the left; the boxes 10-15 % faster to sample than those of consecutive points in Morton order, which cross
cells and stretch every box, at 80k and 20k points here)::

    # node 1 the root, node v's children 2v and 2v+1, leaf l at node P + l      (heap layout)
    # box  (2P, 6): lo_x lo_y lo_z | hi_x hi_y hi_z of the node's points      (empty: +inf | -inf)
    # nmax (2P,):   max over the node's points of dist_j                       (empty: -1)
    # narg (2P,):   sorted position of the smallest row holding nmax

Step ``s`` with the last sample ``c``: a node is visited only when ``box_dist2(node, c) < nmax``. Else no
``dist_j`` in it can change: ``box_dist2 <= d_j`` for its points, as both are the same float32
expression and ``|fl(x_j - c_x)| >= fl(gap_x)`` (rounding is monotone), and ``nmax >= dist_j``. A visited
leaf sets ``dist_j <- min(dist_j, d_j)`` and its maximum; the visited inner nodes are then recomputed,
children first. The next sample is the root's ``narg``. Early steps visit every leaf, late ones a few.
"""
from __future__ import annotations

import numba
import numpy as np
import torch

from pointgeope.model.ops.checks import check_coordinates

__all__ = ["bucket_fps", "LEAF"]

LEAF = 64           # points per leaf (kd order, 80k -> 20k points, one thread: 32 1.05x, 16 1.15x; a throwaway script)


@numba.njit(cache=True)
def _kd_order(points, start, n, leaf, p):
    """Rows ``0 .. n-1`` of the cloud ``points[start:start + n]`` in kd order for ``p`` leaves of ``leaf``: the
    positions of node ``v`` (``[lo, hi)``, its leaves' share) split at ``mid = min(lo + leaf * leaves / 2, hi)``,
    the ``mid - lo`` lowest along the axis where the node's points spread widest first (``_select``). The
    coordinates move with their rows (``xyz (3, n)``), so every pass reads consecutive memory."""
    rows = np.arange(n)
    xyz = np.empty((3, n), points.dtype)
    for i in range(n):
        for a in range(3):
            xyz[a, i] = points[start + i, a]
    stack = np.empty((130, 3), np.int64)                # depth <= 63: at most one more entry a level
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, n, p
    top = 1
    while top > 0:
        top -= 1
        lo, hi, leaves = stack[top, 0], stack[top, 1], stack[top, 2]
        if leaves == 1 or hi - lo <= 1:
            continue
        mid = min(lo + (leaves // 2) * leaf, hi)
        if mid < hi:
            axis, widest = 0, -1.0
            for a in range(3):
                spread = _spread(xyz[a], lo, hi)
                if spread > widest:
                    axis, widest = a, spread
            _select(rows, xyz, axis, lo, hi, mid)
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = mid, hi, leaves // 2
        stack[top, 0], stack[top, 1], stack[top, 2] = lo, mid, leaves // 2
        top += 1 if mid >= hi else 2
    return rows


@numba.njit(cache=True, fastmath={"nnan", "ninf", "nsz"})
def _spread(x, lo, hi):
    """``max(x[lo:hi]) - min(x[lo:hi])`` (finite values: the flags let the two reductions run in vector lanes; a
    minimum and a maximum are exact in any order, and the sign of a zero they pick changes no difference)."""
    low, high = x[lo], x[lo]
    for i in range(lo + 1, hi):
        low, high = min(low, x[i]), max(high, x[i])
    return high - low


@numba.njit(cache=True)
def _select(rows, xyz, axis, lo, hi, nth):
    """``rows[lo:hi]`` and their coordinates ``xyz[:, lo:hi]`` reordered so that no ``xyz[axis]`` of positions
    ``lo:nth`` exceeds one of ``nth:hi`` (quickselect, Hoare's partition about a median of three: equal keys split
    evenly)."""
    keys = xyz[axis]
    while hi - lo > 1:
        a, b, c = keys[lo], keys[(lo + hi) // 2], keys[hi - 1]
        pivot = max(min(a, b), min(max(a, b), c))
        i, j = lo, hi - 1
        while i <= j:
            while keys[i] < pivot:
                i += 1
            while keys[j] > pivot:
                j -= 1
            if i <= j:
                rows[i], rows[j] = rows[j], rows[i]
                for q in range(3):
                    xyz[q, i], xyz[q, j] = xyz[q, j], xyz[q, i]
                i += 1
                j -= 1
        if nth <= j:
            hi = j + 1
        elif nth >= i:
            lo = i
        else:
            return


@numba.njit(cache=True)
def _build(xyz, leaf, box, nmax, narg):
    """Boxes of every node over the sorted points ``xyz (3, n)``; ``nmax = +inf`` (every node is visited
    at the first step), ``-1`` where empty."""
    n, p = xyz.shape[1], nmax.shape[0] // 2
    for v in range(p, 2 * p):
        lo, hi = (v - p) * leaf, min((v - p + 1) * leaf, n)
        narg[v] = lo if lo < n else 0
        nmax[v] = np.inf if lo < hi else -1.0
        for a in range(3):
            box[v, a], box[v, a + 3] = np.inf, -np.inf
            for i in range(lo, hi):
                box[v, a] = min(box[v, a], xyz[a, i])
                box[v, a + 3] = max(box[v, a + 3], xyz[a, i])
    for v in range(p - 1, 0, -1):
        nmax[v] = max(nmax[2 * v], nmax[2 * v + 1])
        narg[v] = narg[2 * v]
        for a in range(3):
            box[v, a] = min(box[2 * v, a], box[2 * v + 1, a])
            box[v, a + 3] = max(box[2 * v, a + 3], box[2 * v + 1, a + 3])


@numba.njit(cache=True)
def _box_dist2(box, v, cx, cy, cz):
    """float32 squared distance from ``c`` to node ``v``'s box, the expression of the point distances."""
    zero = np.float32(0.0)
    gx = max(max(box[v, 0] - cx, cx - box[v, 3]), zero)
    gy = max(max(box[v, 1] - cy, cy - box[v, 4]), zero)
    gz = max(max(box[v, 2] - cz, cz - box[v, 5]), zero)
    return (gx * gx + gy * gy) + gz * gz


@numba.njit(cache=True)
def _update_leaf(xyz, rows, dist, lo, hi, cx, cy, cz):
    """``dist_j <- min(dist_j, d_j)`` over sorted positions ``lo..hi``; returns the leaf's max and the
    position of the smallest row holding it."""
    best, arg = np.float32(-1.0), lo
    for i in range(lo, hi):
        dx, dy, dz = xyz[0, i] - cx, xyz[1, i] - cy, xyz[2, i] - cz
        d = (dx * dx + dy * dy) + dz * dz
        if d < dist[i]:
            dist[i] = d
        if dist[i] > best or (dist[i] == best and rows[i] < rows[arg]):
            best, arg = dist[i], i
    return best, arg


@numba.njit(cache=True)
def _step(xyz, rows, dist, leaf, box, nmax, narg, c, stack, inner):
    """One sample: update the nodes near sorted position ``c``; returns the position of the next sample."""
    n, p = xyz.shape[1], nmax.shape[0] // 2
    cx, cy, cz = xyz[0, c], xyz[1, c], xyz[2, c]
    top, visited = 1, 0
    stack[0] = 1
    while top > 0:
        top -= 1
        v = stack[top]
        if not _box_dist2(box, v, cx, cy, cz) < nmax[v]:
            continue
        if v >= p:
            lo = (v - p) * leaf
            nmax[v], narg[v] = _update_leaf(xyz, rows, dist, lo, min(lo + leaf, n), cx, cy, cz)
        else:
            inner[visited] = v
            visited += 1
            stack[top], stack[top + 1] = 2 * v + 1, 2 * v
            top += 2
    for t in range(visited - 1, -1, -1):                  # pre-order reversed: children before parents
        v = inner[t]
        a, b = 2 * v, 2 * v + 1
        if nmax[b] > nmax[a] or (nmax[b] == nmax[a] and rows[narg[b]] < rows[narg[a]]):
            a = b
        nmax[v], narg[v] = nmax[a], narg[a]
    return narg[1]


@numba.njit(cache=True)
def _sample_cloud(points, start, n, m, leaf, out, o, rows):
    """The first ``m`` FPS samples of the cloud ``points[start:start + n]`` (float32), global rows, into
    ``out[o:o + m]``; ``rows`` its kd order (``(0,)``: made here)."""
    p = 1
    while p * leaf < n:
        p *= 2
    if rows.shape[0] != n:
        rows = _kd_order(points, start, n, leaf, p)
    xyz = np.empty((3, n), np.float32)                   # sorted x | y | z
    for i in range(n):
        for a in range(3):
            xyz[a, i] = points[start + rows[i], a]
    box, nmax = np.empty((2 * p, 6), np.float32), np.empty(2 * p, np.float32)
    narg = np.empty(2 * p, np.int64)
    _build(xyz, leaf, box, nmax, narg)
    dist = np.full(n, np.inf, np.float32)
    stack, inner = np.empty(2 * p + 2, np.int64), np.empty(p, np.int64)
    c = np.argmin(rows)                                  # the sorted position of row 0
    out[o] = start
    for s in range(1, m):
        c = _step(xyz, rows, dist, leaf, box, nmax, narg, c, stack, inner)
        out[o + s] = start + rows[c]


@numba.njit(cache=True)
def _bucket_fps_packed(points, sizes, kept, leaf, orders, given):
    out = np.empty(kept.sum(), np.int64)
    start, o = 0, 0
    for b in range(sizes.shape[0]):
        rows = orders[start:start + sizes[b]].copy() if given[b] else np.empty(0, np.int64)
        _sample_cloud(points, start, sizes[b], kept[b], leaf, out, o, rows)
        start, o = start + sizes[b], o + kept[b]
    return out


def bucket_fps(points: np.ndarray, sizes: list[int], kept: list[int], leaf: int = LEAF,
               orders: list[np.ndarray | None] | None = None) -> np.ndarray:
    """The first ``kept[b]`` FPS samples of every cloud of a packed batch.

    Args:
        points: ``(N, 3)`` packed points, finite and within ``checks.COORD_LIMIT`` (converted to float32,
            C order).
        sizes: ``(B,)`` points per cloud (each >= 1), summing to ``N``.
        kept: ``(B,)`` samples per cloud, ``1 <= kept[b] <= sizes[b]``.
        leaf: points per leaf of the tree (speed only).
        orders: per cloud, its rows ``0 .. n_b - 1`` in a kd order made elsewhere or ``None`` (made here): the
            order of the ``numba`` kNN's tree (``kd_knn``), whose leaves of 16 are grouped by four into this
            tree's leaves of 64 with the same splits above them, spares the second one (speed only: the tree
            never changes the samples).

    Returns:
        ``(sum(kept),)`` int64 global rows, cloud by cloud, each in sampling order.
    """
    pts = np.ascontiguousarray(points, dtype=np.float32)
    sizes_a, kept_a = np.asarray(sizes, np.int64), np.asarray(kept, np.int64)
    if pts.ndim != 2 or pts.shape[1] != 3 or sizes_a.sum() != pts.shape[0] or sizes_a.shape != kept_a.shape:
        raise ValueError(f"expected points (N, 3) in clouds of sizes summing to N, and one kept count per cloud, "
                         f"got points {pts.shape}, {len(sizes_a)} sizes summing to {sizes_a.sum()}, {len(kept_a)} kept")
    if not ((kept_a >= 1) & (kept_a <= sizes_a)).all() or leaf < 1:
        raise ValueError(f"expected 1 <= kept <= size for every cloud and leaf >= 1, got kept {kept}, leaf {leaf}")
    check_coordinates("points", torch.from_numpy(pts))
    orders = orders or [None] * len(sizes_a)
    if len(orders) != len(sizes_a) or any(o is not None and len(o) != n for o, n in zip(orders, sizes_a, strict=False)):
        raise ValueError(f"expected one order (or None) a cloud, each of its {sizes_a.tolist()} rows, got lengths "
                         f"{[None if o is None else len(o) for o in orders]}")
    given = np.array([o is not None for o in orders], np.bool_)
    packed = np.concatenate([np.zeros(n, np.int64) if o is None else np.asarray(o, np.int64)
                             for o, n in zip(orders, sizes_a, strict=True)])
    return _bucket_fps_packed(pts, sizes_a, kept_a, leaf, packed, given)
