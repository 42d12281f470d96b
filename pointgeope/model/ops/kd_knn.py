"""Exact k nearest neighbours on the CPU: a kd-tree compiled with numba, the ``numba`` kNN backend (the CPU default).

It gives ``knn``'s definition directly, ties included: the ``k`` support rows first in the order of ``(d2, row)``,
``d2`` the ``((dx*dx + dy*dy) + dz*dz)`` of the coordinates' dtype (float32, or float64 kept), one rounding per
operation (numba without ``fastmath`` emits no fused multiply-add), so no candidates are re-ranked afterwards
(``knn_ties``, what the other trees need) and no margin is involved.

The tree of one support cloud of ``n`` points is ``bucket_fps``'s: ``P`` leaves of ``LEAF`` consecutive points
of the cloud in kd order (``bucket_fps._kd_order``), a complete binary tree over them in heap layout::

    # node 1 the root, node v's children 2v and 2v+1, leaf l at node P + l
    # box  (2P, 6): lo_x lo_y lo_z | hi_x hi_y hi_z of the node's points     (empty: +inf | -inf)
    # low  (2P,):   the smallest row among the node's points                  (empty: the largest int64)

A query keeps its ``k`` first ``(d2, row)`` so far, sorted (``knn_ties.insert_ranked``'s order). A node is
skipped once the list is full and ``(box_d2, low) > (d2_k, row_k)`` in that order: ``box_d2 <= d2_j`` for
every point ``j`` of the node (the same float expression of gaps no larger than the point's differences:
rounding is monotone, as ``bucket_fps`` states for its boxes) and ``low <= j``, so every point of the node ranks
after the ``k``-th. Nothing else is skipped, so the result is exact whatever the tree's shape. A query that is a
point of the cloud itself (a self-neighbourhood) starts from its own leaf and climbs, searching each sibling
subtree on the way (its nearest points are found first, which bounds the rest); other queries descend from the
root, the nearer child first, taken in the Morton order of the query cloud (``morton_order``: neighbouring
queries walk the same nodes one after the other, which the cache keeps).
"""
from __future__ import annotations

import numba
import numpy as np

from pointgeope.model.ops.bucket_fps import _kd_order
from pointgeope.model.ops.knn_ties import insert_ranked

__all__ = ["LEAF", "build_tree", "tree_of", "search_own", "search_all", "search"]

LEAF = 16           # points per leaf (80k self-kNN, k = 8, one thread: 8 1.0x, 32 1.15x; a throwaway script)
_NO_ROW = np.iinfo(np.int64).max


@numba.njit(cache=True)
def build_tree(points, leaf):
    """The tree of the cloud ``points (n, 3)`` (``n >= 1``, float32 or float64, C order): ``rows (n,)`` the kd
    order, ``xyz (n, 3)`` the points in it, ``box (2P, 6)`` and ``low (2P,)`` (module docstring)."""
    n = points.shape[0]
    p = 1
    while p * leaf < n:
        p *= 2
    rows = _kd_order(points, 0, n, leaf, p)
    xyz = np.empty((n, 3), points.dtype)
    for i in range(n):
        for a in range(3):
            xyz[i, a] = points[rows[i], a]
    box, low = np.empty((2 * p, 6), points.dtype), np.full(2 * p, _NO_ROW, np.int64)
    for v in range(p, 2 * p):
        lo, hi = (v - p) * leaf, min((v - p + 1) * leaf, n)
        for a in range(3):
            box[v, a], box[v, a + 3] = np.inf, -np.inf
            for i in range(lo, hi):
                box[v, a], box[v, a + 3] = min(box[v, a], xyz[i, a]), max(box[v, a + 3], xyz[i, a])
        for i in range(lo, hi):
            low[v] = min(low[v], rows[i])
    for v in range(p - 1, 0, -1):
        low[v] = min(low[2 * v], low[2 * v + 1])
        for a in range(3):
            box[v, a] = min(box[2 * v, a], box[2 * v + 1, a])
            box[v, a + 3] = max(box[2 * v, a + 3], box[2 * v + 1, a + 3])
    return rows, xyz, box, low


def tree_of(cloud) -> tuple:
    """The tree of the cloud tensor ``cloud (n, 3)`` (:func:`build_tree`, ``LEAF`` points a leaf); inside
    ``knn.shared_trees`` built once for every call that asks (a hierarchy builds it before the FPS that takes its kd
    order when that FPS runs before the cloud's own kNN)."""
    from pointgeope.model.ops.knn import _numpy, _once

    return _once("kd", cloud, lambda: build_tree(_numpy(cloud), LEAF))


@numba.njit(cache=True)
def _box_d2(box, v, qx, qy, qz):
    """Squared distance from ``q`` to node ``v``'s box, the expression of the point distances in their dtype."""
    zero = np.float32(0.0)                               # max(x, zero) keeps x's dtype
    gx = max(max(box[v, 0] - qx, qx - box[v, 3]), zero)
    gy = max(max(box[v, 1] - qy, qy - box[v, 4]), zero)
    gz = max(max(box[v, 2] - qz, qz - box[v, 5]), zero)
    return (gx * gx + gy * gy) + gz * gz


@numba.njit(cache=True)
def _boxes_d2(box, u, other):
    """Squared distance between node ``u``'s box and the box ``other (6,)``: no larger than the ``d2`` of a point
    of one to a point of the other (their differences are no smaller than the gaps, and rounding is monotone)."""
    zero = np.float32(0.0)
    gx = max(max(box[u, 0] - other[3], other[0] - box[u, 3]), zero)
    gy = max(max(box[u, 1] - other[4], other[1] - box[u, 4]), zero)
    gz = max(max(box[u, 2] - other[5], other[2] - box[u, 5]), zero)
    return (gx * gx + gy * gy) + gz * gz


@numba.njit(cache=True)
def _skipped(box, low, v, qx, qy, qz, d2, idx, i, filled, k):
    """Whether no point of node ``v`` can enter the full list of row ``i`` of ``d2, idx`` (module docstring)."""
    if filled < k:
        return False
    b = _box_d2(box, v, qx, qy, qz)
    if b != d2[i, k - 1]:
        return b > d2[i, k - 1]
    return low[v] > idx[i, k - 1]


@numba.njit(cache=True)
def _scan(rows, xyz, lo, hi, qx, qy, qz, d2, idx, i, filled, k):
    """The sorted positions ``lo .. hi - 1`` offered to the list of row ``i`` of ``d2, idx``; returns its new
    count."""
    for r in range(lo, hi):
        dx, dy, dz = qx - xyz[r, 0], qy - xyz[r, 1], qz - xyz[r, 2]
        v = (dx * dx + dy * dy) + dz * dz
        j = rows[r]
        if filled == k and (v > d2[i, k - 1] or (v == d2[i, k - 1] and j > idx[i, k - 1])):
            continue
        filled = insert_ranked(idx, d2, i, filled, k, v, j)
    return filled


@numba.njit(cache=True)
def _radius(d2, filled, ks, m):
    """The largest ``k``-th distance of the lists of rows ``0 .. m-1`` (row ``t`` keeps ``ks[t]``; ``inf`` while one
    is not full)."""
    radius = -1.0
    for t in range(m):
        if filled[t] < ks[t]:
            return np.inf
        radius = max(radius, d2[t, ks[t] - 1])
    return radius


@numba.njit(cache=True)
def _visit_block(rows, xyz, box, low, leaf, root, block, block_box, d2, idx, filled, ks, stack):
    """The subtree of node ``root`` searched for the queries ``block (m, 3)`` (query ``t`` into row ``t`` of
    ``d2, idx``, its first ``ks[t]``) inside ``block_box (6,)``: a node is left when its box is farther from the
    block's than every row's last distance, a leaf's points are offered to each row that does not skip it."""
    n, p, m = xyz.shape[0], box.shape[0] // 2, block.shape[0]
    radius = _radius(d2, filled, ks, m)
    stack[0], top = root, 1
    while top > 0:
        top -= 1
        u = stack[top]
        if _boxes_d2(box, u, block_box) > radius:
            continue
        if u >= p:
            first = (u - p) * leaf
            for t in range(m):
                qx, qy, qz = block[t, 0], block[t, 1], block[t, 2]
                if not _skipped(box, low, u, qx, qy, qz, d2, idx, t, filled[t], ks[t]):
                    filled[t] = _scan(rows, xyz, first, min(first + leaf, n), qx, qy, qz, d2, idx, t, filled[t],
                                      ks[t])
            radius = _radius(d2, filled, ks, m)
        else:
            a, b = 2 * u, 2 * u + 1
            if _boxes_d2(box, a, block_box) > _boxes_d2(box, b, block_box):
                a, b = b, a
            stack[top], stack[top + 1] = b, a                # a, the nearer, is taken first
            top += 2


@numba.njit(cache=True)
def search_own(tree, leaf, want, idx, d2, wide, idx_wide, d2_wide):
    """The first ``(d2, row)`` of the tree's own points: for a point ``j`` with ``want[j] >= 0`` its ``k`` first into
    row ``want[j]`` of ``idx, d2 (M, k)``, with ``wide[j] >= 0`` its ``K`` first into row ``wide[j]`` of ``idx_wide,
    d2_wide (W, K)`` (``want, wide (n,)`` over the cloud's rows; ``k, K <= n``). A point wanted in both is searched
    once for the larger count: the ``(d2, row)`` order is total, so its first ``k`` are the first ``k`` of its first
    ``K``. The queries of a leaf are searched together, from their own leaf up, a sibling subtree at a time (module
    docstring)."""
    rows, xyz, box, low = tree
    n, p = xyz.shape[0], box.shape[0] // 2
    k, k_wide = idx.shape[1], idx_wide.shape[1]
    stack = np.empty(2 * 64 + 2, np.int64)
    best, best_idx = np.empty((leaf, max(k, k_wide)), xyz.dtype), np.empty((leaf, max(k, k_wide)), np.int64)
    filled, ks, at = np.zeros(leaf, np.int64), np.empty(leaf, np.int64), np.empty((leaf, 2), np.int64)
    block, block_box = np.empty((leaf, 3), xyz.dtype), np.empty(6, xyz.dtype)
    for own in range(p, 2 * p):
        lo = (own - p) * leaf
        hi = min(lo + leaf, n)
        m = 0
        for a in range(3):
            block_box[a], block_box[a + 3] = np.inf, -np.inf
        for r in range(lo, hi):
            at[m, 0], at[m, 1] = want[rows[r]], wide[rows[r]]
            if at[m, 0] < 0 and at[m, 1] < 0:
                continue
            ks[m] = max(k if at[m, 0] >= 0 else 0, k_wide if at[m, 1] >= 0 else 0)
            for a in range(3):
                block[m, a] = xyz[r, a]
                block_box[a], block_box[a + 3] = min(block_box[a], xyz[r, a]), max(block_box[a + 3], xyz[r, a])
            filled[m] = _scan(rows, xyz, lo, hi, xyz[r, 0], xyz[r, 1], xyz[r, 2], best, best_idx, m, 0, ks[m])
            m += 1
        v = own
        while v > 1 and m > 0:
            _visit_block(rows, xyz, box, low, leaf, v ^ 1, block[:m], block_box, best, best_idx, filled, ks, stack)
            v >>= 1
        for t in range(m):
            if at[t, 0] >= 0:
                idx[at[t, 0]], d2[at[t, 0]] = best_idx[t, :k], best[t, :k]
            if at[t, 1] >= 0:
                idx_wide[at[t, 1]], d2_wide[at[t, 1]] = best_idx[t, :k_wide], best[t, :k_wide]


def search_all(tree, leaf, k):
    """:func:`search_own` of every point of the tree for its ``k`` first (``k <= n``): ``idx, d2 (n, k)``."""
    n, dtype = tree[1].shape[0], tree[1].dtype
    idx, d2, none = np.empty((n, k), np.int64), np.empty((n, k), dtype), np.empty((0, k), np.int64)
    search_own(tree, leaf, np.arange(n), idx, d2, np.full(n, -1), none, none.astype(dtype))
    return idx, d2


@numba.njit(cache=True)
def search(tree, leaf, query, order, k, idx, d2):
    """``idx, d2 (m, k)``: the ``k`` first ``(d2, row)`` among the tree's ``n`` points (``k <= n``) of every query
    of ``query (m, 3)`` (the tree's dtype), in blocks of consecutive queries of ``order`` (a permutation of
    ``0 .. m-1`` that keeps near queries together), each block from the root. A block holds ``leaf * m // (8 n)``
    queries, 1 to ``leaf`` (80k queries of a 20k cloud, ``k = 3``, and 20k of an 80k one, ``k = 16``, one thread:
    blocks of 8 0.63x the time of single queries, of 1 the fastest at 1.0x; a throwaway script)."""
    rows, xyz, box, low = tree
    size = max(1, min(leaf, order.shape[0] * leaf // (8 * xyz.shape[0])))
    stack = np.empty(2 * 64 + 2, np.int64)
    best, best_idx = np.empty((size, k), query.dtype), np.empty((size, k), np.int64)
    filled, ks = np.zeros(size, np.int64), np.full(size, k, np.int64)
    block, block_box = np.empty((size, 3), query.dtype), np.empty(6, query.dtype)
    for start in range(0, order.shape[0], size):
        m = min(size, order.shape[0] - start)
        for a in range(3):
            block_box[a], block_box[a + 3] = np.inf, -np.inf
        for t in range(m):
            filled[t] = 0
            for a in range(3):
                block[t, a] = query[order[start + t], a]
                block_box[a], block_box[a + 3] = min(block_box[a], block[t, a]), max(block_box[a + 3], block[t, a])
        _visit_block(rows, xyz, box, low, leaf, 1, block[:m], block_box, best, best_idx, filled, ks, stack)
        for t in range(m):
            for c in range(k):
                idx[order[start + t], c], d2[order[start + t], c] = best_idx[t, c], best[t, c]
