"""The kNN of the definition (``knn``'s docstring) from a kd-tree's candidates: the CPU backends' tie rule.

The ``torch`` and ``triton`` backends return, for each query, the ``k`` support rows first in the order of
``(d2, row)``, ``d2`` the float32 ``((dx^2 + dy^2) + dz^2)`` with each operation rounded on its own (float64
kept). A kd-tree (pykdtree, scipy's cKDTree) ranks by its own distance ``t``, breaks ties in its visit order,
and at a tie on the ``k``-th distance keeps any of the tied points; scipy's ``t`` is even a float64 Euclidean
distance. :func:`exact_knn` asks the tree for ``m > k`` candidates, computes their ``d2`` in the defined
arithmetic (numba without ``fastmath``, or numpy where numba is missing: no fused multiply-add either way),
keeps the first ``k`` in the order of ``(d2, row)`` -- the definition's result, provided no point beyond the
candidates could rank among those ``k``.

**When the candidates suffice.** Let ``D`` be a point's exact squared distance, ``u`` the unit roundoff of the
coordinates' dtype (``2^-24`` for float32). The defined ``d2`` is five rounded operations on exact data: ``d2
>= D (1 - 5u)`` (less ``5 * 2^-150`` absolute where squares underflow). The tree's ``t`` of a point it visited
is within ``5u`` of ``D`` the same way, so a visited point it did not return has ``D >= t_m (1 - 5u)``,
``t_m`` the ``m``-th (last) candidate's ``t``. A point it pruned lies in a box whose distance the tree bounded
by ``t_m`` or more; pykdtree (like scipy's cKDTree) updates that box distance incrementally on each step to a
far child (``B - bd^2 + no^2``), so each far step on the path adds up to about ``6u B`` of rounding error: ``D
>= t_m (1 - (5 + 6L) u)`` after ``L`` far steps (at most the tree's depth: about ``log2(n / 16)`` for a scan,
hundreds only for a pathological cloud). So every point the tree left out has ``d2 > d2_k``, the ``k``-th kept
value, whenever ``d2_k < t_m (1 - _MARGIN u) - _MARGIN s`` (``s`` the smallest subnormal): ``_MARGIN = 4096``
covers ``L`` up to 680 far steps; a row of a scan without exact ties is that far from its ``(k + 1)``-th
distance almost always (0.08-0.35 % of the rows of an 80k room are not, for ``k`` = 3, 8, 16; scipy ranks
float32 points in float64, whose error is far below). A row that fails the test (a tie or a near tie at the
boundary: duplicated points, a lattice, centimetre-rounded scans) is asked again with twice the candidates, up
to the cloud's ``n`` points, where every point is a candidate and the row is exact. Rows still open after
``_ROUNDS`` doublings are a point repeated more often than that (a resampled scan can hold one point thousands
of times; a tree asked for thousands of neighbours per query costs quadratic time in pykdtree's sorted
insertion): they are asked again of a tree over the distinct points, each candidate standing for its rows, of
which the ``k`` smallest can be kept (one ``d2`` for all). The same test settles them (``t_m`` now of the
distinct points). What remains (or every open row without numba) goes to a brute force of the same definition,
``n`` distances a row. On a real resampled S3DIS office (80k points, one of them 17k times): 1 s a kNN against
pykdtree's 0.25 s; a training crop, one point per voxel, has no duplicates.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

try:
    import numba
except ImportError:            # the numpy pass (_rank) then
    numba = None

__all__ = ["exact_knn"]

# Rows asked again at once: at most this many candidate entries (rows x m), so a cloud of many duplicates
# (m growing to thousands) does not allocate (M, m) arrays at once.
_ENTRIES = 1 << 22
# The settle test's margin, in units of the dtype's roundoff (module docstring).
_MARGIN = 4096
# Candidates asked for at most ``(k + 1) * 2^_ROUNDS``; rows open beyond go to the brute force.
_ROUNDS = 3


def exact_knn(candidates: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
              brute: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], q: np.ndarray,
              s: np.ndarray, k: int, tree: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` first support rows of each query in the order of ``(d2, row)``, and their ``d2``.

    Args:
        candidates: ``candidates(q_rows, m)`` -> ``(idx (R, m) integers, t (R, m))``: a tree's ``m`` nearest
            support rows of each query of ``q_rows`` by its distance ``t`` (squared), sorted by ``t``.
        brute: ``brute(q_rows)`` -> ``(idx (R, k), d2 (R, k))``: the definition's result by brute force.
        q: ``(M, 3)`` queries, ``s``: ``(n, 3)`` support points, one float dtype (float32 or float64).
        k: ``1 <= k <= n``.
        tree: ``tree(points)`` -> a ``candidates`` of a tree over ``points``: rows still open after the rounds
            are asked again of a tree over the distinct support points (module docstring), where given.

    Returns:
        ``idx (M, k)`` int64 rows of ``s`` and ``d2 (M, k)`` in ``q``'s dtype, each row sorted by ``(d2, row)``.
    """
    idx_out = np.empty((q.shape[0], k), np.int64)
    d2_out = np.empty((q.shape[0], k), q.dtype)
    rows = _rounds(candidates, q, s, k, np.arange(q.shape[0]), idx_out, d2_out, None)
    if len(rows) and tree is not None and numba is not None:
        distinct, members, starts, sizes = _distinct(s)
        if len(distinct) < len(s):
            rows = _rounds(tree(distinct), q, distinct, k, rows, idx_out, d2_out, (members, starts, sizes))
    if len(rows):
        idx_out[rows], d2_out[rows] = brute(q[rows])
    return idx_out, d2_out


def _rounds(candidates, q, s, k, rows, idx_out, d2_out, groups) -> np.ndarray:
    """Up to ``_ROUNDS + 1`` rounds of :func:`exact_knn` over ``rows``, ``k + 1`` candidates doubled each round;
    the settled rows written to ``idx_out``, ``d2_out``; returns the rows still open. ``groups``: ``s`` are
    the distinct support points, point ``u`` the rows ``members[starts[u]:starts[u] + sizes[u]]``."""
    n = s.shape[0]
    m = min(n, k + 1)
    for _ in range(_ROUNDS + 1):
        if not len(rows):
            break
        pending = []
        step = max(1, _ENTRIES // m)
        for start in range(0, len(rows), step):
            part = rows[start:start + step]
            sub = q if len(part) == q.shape[0] else q[part]
            cand, t = candidates(sub, m)
            if groups is None and numba is None:
                idx, d2, done = _rank(sub, s, cand, t, k, complete=m == n)
                idx_out[part], d2_out[part] = idx, d2
            elif sub is q:                  # every row (``part`` is ``arange``): written in place, no copy
                done = _rank_numba(sub, s, cand, t, k, m == n, groups, idx_out, d2_out)[2]
            else:
                idx, d2, done = _rank_numba(sub, s, cand, t, k, m == n, groups)
                idx_out[part], d2_out[part] = idx, d2
            pending.append(part[~done])
        rows = np.concatenate(pending)
        m = min(n, 2 * m)
    return rows


def _distinct(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct points of ``s (n, 3)`` and, grouped by them, the rows holding each (ascending)."""
    distinct, inverse, sizes = np.unique(s, axis=0, return_inverse=True, return_counts=True)
    members = np.argsort(inverse.reshape(-1), kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return np.ascontiguousarray(distinct), members.astype(np.int64), starts.astype(np.int64), sizes.astype(np.int64)


def _rank(q: np.ndarray, s: np.ndarray, cand: np.ndarray, t: np.ndarray, k: int,
          complete: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``k`` of the candidates ``cand (R, m)`` by ``(d2, row)``, their ``d2``, and whether each row
    is settled (module docstring): ``complete`` (every point a candidate) or ``d2_k < t_m (1 - M u) - M s``
    (``M = _MARGIN``)."""
    diff = q[:, None, :] - s[cand]                      # (R, m, 3), each difference rounded once
    sq = diff * diff
    d2 = (sq[..., 0] + sq[..., 1]) + sq[..., 2]         # the defined order of the sums
    order = np.lexsort((cand, d2), axis=1)[:, :k]
    idx, d2 = np.take_along_axis(cand, order, 1), np.take_along_axis(d2, order, 1)
    if complete:
        return idx, d2, np.ones(len(q), bool)
    rel, absolute = _margins(q.dtype)
    bound = t[:, -1].astype(np.float64) * (1.0 - rel) - absolute
    return idx, d2, d2[:, -1].astype(np.float64) < bound


def _margins(dtype) -> tuple[float, float]:
    """The settle test's relative and absolute margins for coordinates of ``dtype``: ``_MARGIN u`` (``u`` the
    unit roundoff, half of ``eps``) and ``_MARGIN`` smallest subnormals."""
    info = np.finfo(dtype)
    return _MARGIN * float(info.eps) / 2, _MARGIN * float(info.smallest_subnormal)


def _rank_numba(q: np.ndarray, s: np.ndarray, cand: np.ndarray, t: np.ndarray, k: int,
                complete: bool, groups=None, idx=None, d2=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_rank` compiled: one pass a row, the ``k`` first kept sorted by insertion (4x faster than the
    numpy sort at ``k = 16`` here); ``groups`` as in :func:`_rounds`, each distinct point's rows inserted
    in ascending order, at most ``k`` of them; written into ``idx``, ``d2`` where given."""
    if idx is None:
        idx, d2 = np.empty((len(q), k), np.int64), np.empty((len(q), k), q.dtype)
    done = np.empty(len(q), np.bool_)
    members, starts, sizes = groups if groups is not None else (None, None, None)
    _kernel(q, s, cand, t, k, complete, *_margins(q.dtype), members, starts, sizes, idx, d2, done)
    return idx, d2, done


def _rows_kernel(q, s, cand, t, k, complete, rel, absolute, members, starts, sizes, idx, d2,
                 done):   # pragma: no cover (compiled)
    """Per row ``i``: the defined ``d2`` of each candidate, inserted into the row's ``k`` first by ``(d2, row)``
    (with ``members``: the candidate's rows, ascending, until one is not kept); ``done[i]`` the settled test
    of :func:`_rank`."""
    for i in range(q.shape[0]):
        filled = 0
        for c in range(cand.shape[1]):
            u = np.int64(cand[i, c])
            dx, dy, dz = q[i, 0] - s[u, 0], q[i, 1] - s[u, 1], q[i, 2] - s[u, 2]
            v = (dx * dx + dy * dy) + dz * dz
            lo, hi = u, u + 1
            if members is not None:
                lo = starts[u]
                hi = lo + min(sizes[u], k)
            for r in range(lo, hi):
                j = r if members is None else members[r]
                if filled == k and (v > d2[i, k - 1] or (v == d2[i, k - 1] and j > idx[i, k - 1])):
                    break
                filled = insert_ranked(idx, d2, i, filled, k, v, j)
        done[i] = complete or np.float64(d2[i, k - 1]) < np.float64(t[i, -1]) * (1.0 - rel) - absolute


def _insert_ranked(idx, d2, i, filled, cap, v, j):   # pragma: no cover (compiled)
    """Put the candidate ``(v, j)`` into row ``i`` of ``d2, idx`` whose first ``filled`` entries are sorted by
    ``(distance, index)`` (the definition's order), at most ``cap`` kept (the last one falls off when full; the
    caller has checked that ``(v, j)`` ranks before it): the row's new count."""
    p = filled if filled < cap else cap - 1
    while p > 0 and (d2[i, p - 1] > v or (d2[i, p - 1] == v and idx[i, p - 1] > j)):
        d2[i, p], idx[i, p] = d2[i, p - 1], idx[i, p - 1]
        p -= 1
    d2[i, p], idx[i, p] = v, j
    return min(filled + 1, cap)


# the kernels' one insertion (this file's and up_known's), compiled where numba is
insert_ranked = numba.njit(cache=True)(_insert_ranked) if numba is not None else _insert_ranked
_kernel = numba.njit(cache=True)(_rows_kernel) if numba is not None else None
