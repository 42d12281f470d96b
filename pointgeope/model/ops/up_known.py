"""The transition up's 3-NN of a CPU hierarchy, read from the neighbourhoods already searched where they settle it.

``up_s = knn(coord_s -> coord_{s+1}, 3)`` (``hierarchy``'s docstring), with ``coord_{s+1} = coord_s[sample]``
(``sample (N_{s+1},)``, rows of stage ``s``). The answer of a query depends on its coordinates, the support
cloud and ``k`` alone (``knn``'s definition: the first rows in the order of ``(d2, row)``), so two kinds of
row need no search:

- **A sampled row** ``p = sample[j]`` is the point ``j`` of stage ``s + 1``, whose first 3 neighbours there
  ``neighbours_{s+1}[j, :3]`` (and their ``d2``) already are its 3-NN (the first 3 of the same order; a coarse
  cloud of ``n < 3`` points fills both the same way, column ``c`` holding neighbour ``c mod n``). A row FPS
  sampled twice (a cloud of duplicates) is two points at one place: either gives the same answer.
- **A row whose neighbourhood holds 3 samples strictly inside it.** ``neighbours_s[p]`` holds the first ``k``
  stage-``s`` rows of ``p`` by ``(d2, row)`` (its cloud holds ``n_s >= k`` points, so no row repeats), its
  last distance ``T = d2_{k-1}``. Every stage-``s`` row outside the list has ``d2 >= T``, so every coarse point
  has ``d2 >= T`` unless it is a listed row with ``d2 < T``: call those ``S``. When ``|S| >= 3`` every coarse
  point outside ``S`` ranks after all of ``S`` and the 3-NN are the first 3 of ``S`` by ``(d2, coarse row)``:
  the order of the search, whose row is the coarse row (the sampling order), not the stage-``s`` row the list
  is sorted by. The distances are the same float expression of the same two points. ``S`` names each coarse
  point by its stage-``s`` row, so a cloud that FPS sampled a row twice (two coarse points at one row) does not
  take this rule.

The rest are searched (``search(rows)``, the tree of stage ``s + 1`` shared with its kNN). On an 80k room of
PTv1's layout (``bench_model.synthetic_room``) the two rules settle 34 % of stage 0's rows (a quarter sampled,
``k = 8``) and 91-93 % of the later stages' (``k = 16``).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from pointgeope.model.ops.knn_ties import insert_ranked
from pointgeope.model.ops.offsets import counts

try:
    import numba
except ImportError:            # every non-sampled row is searched then
    numba = None

__all__ = ["known_up"]


def known_up(sample: Tensor, offsets: tuple[list[int], list[int]], fine: tuple[Tensor, Tensor],
             coarse: tuple[Tensor, Tensor], up: int,
             search: Callable[[Tensor, list[int]], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """The ``up``-NN of every stage-``s`` row among the points of stage ``s + 1`` (module docstring), on the CPU.

    Args:
        sample: ``(N_{s+1},)`` int64 rows of stage ``s``, the FPS samples of stage ``s + 1``.
        offsets: the offsets of stages ``s`` and ``s + 1``, as lists.
        fine: ``neighbours_s (N_s, k_s)`` int64 and their ``d2 (N_s, k_s)``, as ``knn`` gave them.
        coarse: ``neighbours_{s+1} (N_{s+1}, k_{s+1})`` int64 and their ``d2``, as ``knn`` gave them.
        up: neighbours a row, ``1 <= up <= k_{s+1}``.
        search: ``search(rows, rows_off)``: ``knn``'s ``up``-NN in stage ``s + 1`` of the stage-``s`` rows
            ``rows (R,)`` (int64, ascending), ``rows_off`` their cumulative counts per cloud (each >= 1).

    Returns:
        ``idx (N_s, up)`` int64 rows of stage ``s + 1`` and their ``d2``: what the search gives for every row.
    """
    (nb, nd), (coarse_nb, coarse_nd) = fine, coarse
    n_fine = nb.shape[0]
    idx = torch.empty((n_fine, up), dtype=torch.long)
    d2 = torch.empty((n_fine, up), dtype=nd.dtype)
    coarse_row = np.full(n_fine, -1, np.int64)
    coarse_row[sample.numpy()] = np.arange(sample.shape[0])
    idx[sample], d2[sample] = coarse_nb[:, :up], coarse_nd[:, :up]
    done = coarse_row >= 0
    if numba is not None:
        sizes = np.asarray(counts(offsets[0]))
        distinct = np.add.reduceat(done.astype(np.int64), [0, *offsets[0][:-1]])     # sampled rows a cloud
        eligible = (sizes >= nb.shape[1]) & (distinct == np.asarray(counts(offsets[1])))
        _kernel(nb.numpy(), nd.numpy(), coarse_row, np.repeat(eligible, sizes), idx.numpy(), d2.numpy(), done)
    rows, rows_off = _open_rows(done, offsets[0])
    found_idx, found_d2 = search(torch.from_numpy(rows), rows_off)
    idx[rows], d2[rows] = found_idx, found_d2
    return idx, d2


def _open_rows(done: np.ndarray, off: list[int]) -> tuple[np.ndarray, list[int]]:
    """The rows not ``done`` (ascending) and their cumulative counts per cloud; a cloud with none keeps its first
    row (searched again, the same answer), as every cloud of a search holds a point."""
    starts = np.asarray([0, *off[:-1]])
    open_ = ~done
    open_[starts[np.logical_or.reduceat(open_, starts) == 0]] = True
    rows = np.flatnonzero(open_)
    return rows, np.searchsorted(rows, off).tolist()


def _rows_kernel(nb, nd, coarse_row, eligible, idx, d2, done):   # pragma: no cover (compiled)
    """Per open row ``i`` of an eligible cloud: the first ``up`` of ``S`` (the listed coarse points with ``d2 <
    T``) by ``(d2, coarse row)``, written with ``done[i]`` when ``S`` holds that many. The list ascends in
    ``d2``, so the scan stops at ``T`` or past the ``up``-th kept distance."""
    k, up = nb.shape[1], idx.shape[1]
    for i in range(nb.shape[0]):
        if done[i] or not eligible[i]:
            continue
        last = nd[i, k - 1]
        filled = 0
        for c in range(k):
            v = nd[i, c]
            if not v < last or (filled == up and v > d2[i, up - 1]):
                break                                   # the list is sorted by d2: no later column is kept
            j = coarse_row[nb[i, c]]
            if j < 0 or (filled == up and v == d2[i, up - 1] and j > idx[i, up - 1]):
                continue
            filled = insert_ranked(idx, d2, i, filled, up, v, j)
        done[i] = filled == up


_kernel = numba.njit(cache=True)(_rows_kernel) if numba is not None else None
