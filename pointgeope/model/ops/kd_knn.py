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

__all__ = ["LEAF", "build_tree", "search_self", "search"]

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


@numba.njit(cache=True)
def _box_d2(box, v, qx, qy, qz):
    """Squared distance from ``q`` to node ``v``'s box, the expression of the point distances in their dtype."""
    zero = np.float32(0.0)                               # max(x, zero) keeps x's dtype
    gx = max(max(box[v, 0] - qx, qx - box[v, 3]), zero)
    gy = max(max(box[v, 1] - qy, qy - box[v, 4]), zero)
    gz = max(max(box[v, 2] - qz, qz - box[v, 5]), zero)
    return (gx * gx + gy * gy) + gz * gz


@numba.njit(cache=True)
def _skipped(box, low, v, qx, qy, qz, d2, idx, filled, k):
    """Whether no point of node ``v`` can enter the full list ``d2, idx`` (row 0) of ``k`` (module docstring)."""
    if filled < k:
        return False
    b = _box_d2(box, v, qx, qy, qz)
    if b != d2[0, k - 1]:
        return b > d2[0, k - 1]
    return low[v] > idx[0, k - 1]


@numba.njit(cache=True)
def _scan(rows, xyz, lo, hi, qx, qy, qz, d2, idx, filled, k):
    """The sorted positions ``lo .. hi - 1`` offered to the list ``d2, idx`` (row 0); returns its new count."""
    for r in range(lo, hi):
        dx, dy, dz = qx - xyz[r, 0], qy - xyz[r, 1], qz - xyz[r, 2]
        v = (dx * dx + dy * dy) + dz * dz
        j = rows[r]
        if filled == k and (v > d2[0, k - 1] or (v == d2[0, k - 1] and j > idx[0, k - 1])):
            continue
        filled = insert_ranked(idx, d2, 0, filled, k, v, j)
    return filled


@numba.njit(cache=True)
def _visit(rows, xyz, box, low, leaf, root, qx, qy, qz, d2, idx, filled, k, stack):
    """The subtree of node ``root`` searched into the list ``d2, idx`` (row 0), the nearer child first; returns
    the list's count."""
    n, p = xyz.shape[0], box.shape[0] // 2
    stack[0], top = root, 1
    while top > 0:
        top -= 1
        v = stack[top]
        if _skipped(box, low, v, qx, qy, qz, d2, idx, filled, k):
            continue
        if v >= p:
            lo = (v - p) * leaf
            filled = _scan(rows, xyz, lo, min(lo + leaf, n), qx, qy, qz, d2, idx, filled, k)
        else:
            a, b = 2 * v, 2 * v + 1
            if _box_d2(box, a, qx, qy, qz) > _box_d2(box, b, qx, qy, qz):
                a, b = b, a
            stack[top], stack[top + 1] = b, a                # a, the nearer, is taken first
            top += 2
    return filled


@numba.njit(cache=True)
def search_self(tree, leaf, k, idx, d2):
    """``idx, d2 (n, k)``: the ``k`` first ``(d2, row)`` of every point of the tree's own cloud (``k <= n``), in
    its rows; each query from its own leaf up, a sibling subtree at a time (module docstring)."""
    rows, xyz, box, low = tree
    n, p = xyz.shape[0], box.shape[0] // 2
    stack = np.empty(2 * 64 + 2, np.int64)
    best, best_idx = np.empty((1, k), xyz.dtype), np.empty((1, k), np.int64)
    for r in range(n):
        qx, qy, qz = xyz[r, 0], xyz[r, 1], xyz[r, 2]
        v = p + r // leaf
        lo = (v - p) * leaf
        filled = _scan(rows, xyz, lo, min(lo + leaf, n), qx, qy, qz, best, best_idx, 0, k)
        while v > 1:
            filled = _visit(rows, xyz, box, low, leaf, v ^ 1, qx, qy, qz, best, best_idx, filled, k, stack)
            v >>= 1
        i = rows[r]
        for c in range(k):
            idx[i, c], d2[i, c] = best_idx[0, c], best[0, c]


@numba.njit(cache=True)
def search(tree, leaf, query, order, k, idx, d2):
    """``idx, d2 (m, k)``: the ``k`` first ``(d2, row)`` among the tree's points (``k <= n``) of every query of
    ``query (m, 3)`` (the tree's dtype), taken in ``order`` (a permutation of ``0 .. m-1``), each from the root."""
    rows, xyz, box, low = tree
    stack = np.empty(2 * 64 + 2, np.int64)
    best, best_idx = np.empty((1, k), query.dtype), np.empty((1, k), np.int64)
    for t in range(order.shape[0]):
        i = order[t]
        _visit(rows, xyz, box, low, leaf, 1, query[i, 0], query[i, 1], query[i, 2], best, best_idx, 0, k, stack)
        for c in range(k):
            idx[i, c], d2[i, c] = best_idx[0, c], best[0, c]
