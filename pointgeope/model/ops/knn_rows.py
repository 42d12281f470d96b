"""The k nearest neighbours of points given by their rows in the support cloud: the transition down's search.

``down_s = knn(coord_s -> coord_{s-1}, k_s)`` (``hierarchy``'s docstring) asks for the neighbours of the FPS
samples, which are points of the support cloud itself. The ``numba`` backend's tree (``kd_knn``) then knows each
query's leaf and answers the queries of a leaf together from there, as it does a self-neighbourhood; with
:func:`knn_with_rows` in the same pass as the cloud's own neighbourhoods (``neighbours_{s-1}``), a sample's ``k_s``
searched once with its ``k_{s-1}`` when ``k_s > k_{s-1}`` (the first ``k_{s-1}`` of its first ``k_s`` are its
``k_{s-1}``: the order of ``(d2, row)`` is total).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pointgeope.geope import geometry_dtype
from pointgeope.model.ops import checks
from pointgeope.model.ops.backends import KNN_BACKENDS, resolve
from pointgeope.model.ops.knn import _fill, knn
from pointgeope.model.ops.offsets import check_offset

__all__ = ["knn_of_rows", "knn_with_rows"]


def knn_of_rows(rows: Tensor, support: Tensor, k: int, rows_offset, support_offset, backend: str | None = None, *,
                check_finite: bool = True) -> tuple[Tensor, Tensor]:
    """``knn(support[rows], support, k, rows_offset, support_offset, backend)`` for queries that are support points:
    ``rows (M,)`` int64 global rows of ``support``, each in its own cloud (a transition down's FPS samples). The
    ``numba`` backend answers them from their own leaves of the support's tree (``kd_knn.search_own``), a row taken
    twice once; the answer of a query depends on its point alone, so the result is ``knn``'s, bit for bit; a row
    outside its cloud is refused (``ValueError``). The other backends search ``support[rows]``."""
    chosen = resolve(backend, KNN_BACKENDS, support.device, "knn", k)
    if chosen != "numba":
        return knn(support[rows], support, k, rows_offset, support_offset, backend, check_finite=check_finite)
    if checks.check_flag("check_finite", check_finite):
        checks.check_coordinates("support", support)
    return _search_own(support, support_offset, None, (rows, rows_offset, k))[1]


def knn_with_rows(points: Tensor, offset, k: int, rows: Tensor, rows_offset, k_rows: int,
                  backend: str | None = None) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """``(knn(points, points, k, offset, offset), knn_of_rows(rows, points, k_rows, rows_offset, offset))`` with
    the same ``backend``, bit for bit; the ``numba`` backend searches both in one pass of each cloud's tree (a row
    of ``rows`` once, for ``max(k, k_rows)``). The coordinates are not checked here (``HierarchySpec`` checked
    them)."""
    chosen = resolve(backend, KNN_BACKENDS, points.device, "knn", max(k, k_rows))
    if chosen != "numba":
        return (knn(points, points, k, offset, offset, backend, check_finite=False),
                knn_of_rows(rows, points, k_rows, rows_offset, offset, backend, check_finite=False))
    return _search_own(points, offset, k, (rows, rows_offset, k_rows))


def _search_own(support: Tensor, support_offset, k: int | None, picked: tuple[Tensor, object, int]):
    """``kd_knn.search_own`` of each cloud of ``support``: every point's ``k`` (none when ``k`` is None) and the
    ``k_rows`` of ``picked = (rows, rows_offset, k_rows)``, each as ``knn`` gives them (global rows, the small-cloud
    fill); ``(None, rows')`` when ``k`` is None."""
    from pointgeope.model.ops import kd_knn

    rows, rows_offset, k_rows = picked
    q_off = check_offset(rows_offset, rows.shape[0], "rows_offset")
    s_off = check_offset(support_offset, support.shape[0], "support_offset")
    support, all_rows = support.detach(), rows.cpu().numpy()
    own, picked_parts, q_start, s_start = [], [], 0, 0
    for b, (q_end, s_end) in enumerate(zip(q_off, s_off, strict=True)):
        n, cloud, local = s_end - s_start, support[s_start:s_end], all_rows[q_start:q_end] - s_start
        outside = (local < 0) | (local >= n)
        if outside.any():           # a negative one would index the cloud from its end: another point's answer
            raise ValueError(f"expected the rows of cloud {b} (rows_offset) in its support rows {s_start} .. "
                             f"{s_end - 1}, got row {local[outside][0] + s_start}")
        tree = kd_knn.tree_of(cloud)
        dtype = tree[1].dtype
        wide = np.full(n, -1, np.int64)
        wide[local] = np.arange(len(local))                 # a row taken twice: its last place answers both
        k_eff, rows_eff = min(k, n) if k else 0, min(k_rows, n)
        idx, dist2 = np.empty((n if k else 0, k_eff), np.int64), np.empty((n if k else 0, k_eff), dtype)
        idx_rows, dist2_rows = np.empty((len(local), rows_eff), np.int64), np.empty((len(local), rows_eff), dtype)
        want = np.arange(n) if k else np.full(n, -1, np.int64)
        kd_knn.search_own(tree, kd_knn.LEAF, want, idx, dist2, wide, idx_rows, dist2_rows)
        answered = wide[local]
        if (answered != np.arange(len(local))).any():
            idx_rows, dist2_rows = idx_rows[answered], dist2_rows[answered]
        if k:
            own.append(_global(idx, dist2, s_start, k, k_eff, support))
        picked_parts.append(_global(idx_rows, dist2_rows, s_start, k_rows, rows_eff, support))
        q_start, s_start = q_end, s_end
    mine = (torch.cat([i for i, _ in own]), torch.cat([d for _, d in own])) if k else None
    return mine, (torch.cat([i for i, _ in picked_parts]), torch.cat([d for _, d in picked_parts]))


def _global(idx: np.ndarray, dist2: np.ndarray, start: int, k: int, k_eff: int, support: Tensor):
    """A cloud's rows ``idx`` as global rows, both filled to ``k`` columns (``knn._fill``), on the support's device."""
    return (_fill(torch.from_numpy(idx).to(support.device) + start, k, k_eff),
            _fill(torch.from_numpy(dist2).to(support.device, geometry_dtype(support.dtype)), k, k_eff))
