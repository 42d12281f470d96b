"""The k nearest neighbours of points given by their rows in the support cloud: the transition down's search.

``down_s = knn(coord_s -> coord_{s-1}, k_s)`` (``hierarchy``'s docstring) asks for the neighbours of the FPS
samples, which are points of the support cloud itself. The ``numba`` backend's tree (``kd_knn``) then knows each
query's leaf and answers the queries of a leaf together from there, as it does a self-neighbourhood.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pointgeope.geope import geometry_dtype
from pointgeope.model.ops import checks
from pointgeope.model.ops.backends import KNN_BACKENDS, resolve
from pointgeope.model.ops.knn import _fill, _numpy, _once, knn
from pointgeope.model.ops.offsets import check_offset

__all__ = ["knn_of_rows"]


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
    from pointgeope.model.ops import kd_knn

    if checks.check_flag("check_finite", check_finite):
        checks.check_coordinates("support", support)
    q_off = check_offset(rows_offset, rows.shape[0], "rows_offset")
    s_off = check_offset(support_offset, support.shape[0], "support_offset")
    support, all_rows = support.detach(), rows.cpu().numpy()
    idx_parts, dist_parts, q_start, s_start = [], [], 0, 0
    for b, (q_end, s_end) in enumerate(zip(q_off, s_off, strict=True)):
        cloud, local = support[s_start:s_end], all_rows[q_start:q_end] - s_start
        outside = (local < 0) | (local >= s_end - s_start)
        if outside.any():           # a negative one would index the cloud from its end: another point's answer
            raise ValueError(f"expected the rows of cloud {b} (rows_offset) in its support rows {s_start} .. "
                             f"{s_end - 1}, got row {local[outside][0] + s_start}")
        tree = _once("kd", cloud, lambda c=cloud: kd_knn.build_tree(_numpy(c), kd_knn.LEAF))
        k_eff = min(k, s_end - s_start)
        want = np.full(s_end - s_start, -1, np.int64)
        want[local] = np.arange(len(local))                 # a row taken twice: its last place answers both
        idx, dist2 = np.empty((len(local), k_eff), np.int64), np.empty((len(local), k_eff), tree[1].dtype)
        kd_knn.search_own(tree, kd_knn.LEAF, want, k_eff, idx, dist2)
        answered = want[local]
        if (answered != np.arange(len(local))).any():
            idx, dist2 = idx[answered], dist2[answered]
        idx_parts.append(_fill(torch.from_numpy(idx).to(support.device) + s_start, k, k_eff))
        dist_parts.append(_fill(torch.from_numpy(dist2).to(support.device, geometry_dtype(support.dtype)), k, k_eff))
        q_start, s_start = q_end, s_end
    return torch.cat(idx_parts), torch.cat(dist_parts)
