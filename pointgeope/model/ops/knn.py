"""k nearest neighbours within each cloud of a packed batch.

For every query point ``i`` of cloud ``b`` the ``k`` points ``j`` of the support cloud ``b`` with the
smallest squared distance ``|q_i - s_j|^2``, sorted by distance. Indices are global rows of the packed
support tensor. Ties: the distance is the float32 ``((dx^2 + dy^2) + dz^2)``, each operation rounded on its
own (float64 coordinates kept in float64 on the CPU backends and ``torch``; the ``triton`` kernel rounds them to
float32 first, so there float64 searches are float32 ones), and ties in it go to the smaller row, at the ``k``-th
distance too, so the result is unique: the ``triton`` backend (``triton_knn``, the CUDA default), the ``torch``
backend and the CPU trees (``numba``'s kd-tree, ``kd_knn``, the CPU default, which searches by the definition's
order itself; pykdtree and scipy, their candidates re-ranked by ``knn_ties``) give it bit for bit for coordinates
of every dtype but float64, indices and distances, so a hierarchy built in the loader's workers equals the GPU's.
torch-cluster alone breaks ties in any order.

**Small clouds.** When a support cloud holds ``n < k`` points, its ``n`` neighbours (sorted) are
repeated cyclically to fill the ``k`` columns: column ``c`` holds neighbour ``c mod n``. Every row then
has exactly ``k`` valid entries and a max-pool or softmax over them is unchanged by the padding, up to
the multiplicity the repeats give (a softmax counts a repeated neighbour several times).

**Shared trees.** Inside :func:`shared_trees` the tree backends build one tree per support cloud and put each
query cloud in Morton order once, for every call of the block that searches or queries it (a hierarchy's
tree over stage ``s`` serves its own kNN, the transition down of stage ``s + 1`` and the 3-NN up of stage
``s - 1``). A tree answers a query the same way whichever call built it, so the results are the same, bit for
bit, ties included.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import torch
from torch import Tensor

from pointgeope.geope import geometry_dtype
from pointgeope.model import kernels
from pointgeope.model.ops import checks
from pointgeope.model.ops.backends import KNN_BACKENDS, available, resolve
from pointgeope.model.ops.offsets import check_offset, cloud_of_rows, counts

__all__ = ["knn", "shared_trees", "kd_order"]

# Pure-torch brute force: at most this many (query, support) pairs per chunk (64 MiB of float32 distances);
# on one CPU thread a chunk of 1 MiB, which stays in the cache between the elementwise passes (1.8x
# faster at 20k points here); with more threads each pass is a parallel region, and many small ones
# stall on a busy machine (3.4x slower than 64 MiB chunks on 2 threads here).
_PAIRS_PER_CHUNK = 1 << 24
_PAIRS_PER_CHUNK_CPU = 1 << 18
# The tree backends search this many queries or more in Morton order (``_in_morton_order``): below it the
# order and the copies cost what the cache saves (pykdtree, one thread, process CPU time of one kNN call,
# measured once by a throwaway script: 1.0x at 2,048 queries, 0.93x at 20k, 0.82x at 80k). The whole
# hierarchy of an 80k crop: 0.92x (bench/bench_hierarchy.py, cpu against cpu_unordered).
_ORDERED_QUERIES = 2048


def knn(query: Tensor, support: Tensor, k: int, query_offset: Tensor, support_offset: Tensor,
        backend: str | None = None, *, check_finite: bool = True) -> tuple[Tensor, Tensor]:
    """k nearest support points of every query point, within the same cloud.

    Args:
        query: ``(M, 3)`` query points.
        support: ``(N, 3)`` support points (the same tensor as ``query`` for self-neighbourhoods).
        k: neighbours per query, ``k >= 1`` (the ``triton`` backend: ``k <= backends.TRITON_KNN_MAX_K``, 64; by
            default a larger ``k`` takes the next default backend).
        query_offset, support_offset: ``(B,)`` cumulative counts of both packed batches.
        backend: ``"numba"``, ``"pykdtree"``, ``"scipy"``, ``"torch"``, ``"cluster"``, ``"triton"`` or ``None`` for the
            default of the device (see ``backends``; a default Triton kernel that fails hands over to the
            next default, :mod:`pointgeope.model.kernels`).
        check_finite: check that ``query`` and ``support`` are finite and within ``checks.COORD_LIMIT`` (one
            flag read on the host each; a caller that checked the coordinates once, as ``HierarchySpec`` and
            ``interpolate`` do, passes ``False``). The name is kept from when it checked finiteness only.

    Returns:
        ``idx (M, k)`` int64 global support rows and ``dist2 (M, k)`` squared distances, both on the
        query's device, sorted by distance, with no gradient (coordinates that need one, e.g. predicted
        offsets, are read detached on every backend). Query and support of different dtypes are searched in
        their promoted dtype (``torch.promote_types``) on every backend (``triton``: float64 rounded to float32);
        ``dist2`` is float64 when that dtype is float64 and float32 otherwise (``geope.geometry_dtype``): integer
        squared distances would wrap (int32 coordinates 50 000 apart give ``-2^31``) and float16 ones overflow
        past 65504.

    Raises:
        ValueError / TypeError naming the argument: shapes, devices, ``k`` not an int ``>= 1``, non-finite
        coordinates or coordinates beyond ``checks.COORD_LIMIT`` (``2^60``: float32 squared distances
        overflow), offsets (``offsets.check_offset``), a backend that cannot run (an explicit
        ``"triton"`` for ``k`` above its largest).
    """
    if query.dim() != 2 or query.shape[1] != 3 or support.dim() != 2 or support.shape[1] != 3:
        raise ValueError(f"expected query (M, 3) and support (N, 3), got {tuple(query.shape)} and "
                         f"{tuple(support.shape)}")
    k = checks.check_count("k", k)
    if query.device != support.device:                   # the CPU backends moved both; the kernels read either
        raise ValueError(f"expected query and support on one device, got {query.device} and {support.device}")
    checks.check_values("knn", query=query, support=support, query_offset=query_offset,
                        support_offset=support_offset)
    if checks.check_flag("check_finite", check_finite):
        checks.check_coordinates("query", query)
        if support is not query:
            checks.check_coordinates("support", support)
    q_off = check_offset(query_offset, query.shape[0], "query_offset")
    s_off = check_offset(support_offset, support.shape[0], "support_offset")
    if len(q_off) != len(s_off):
        raise ValueError(f"expected as many query clouds as support clouds, got {len(q_off)} and {len(s_off)}")
    chosen = resolve(backend, KNN_BACKENDS, query.device, "knn", k)
    query, support = query.detach(), support.detach()    # indices have no gradient (nor, here, distances)
    out_dtype = geometry_dtype(torch.promote_types(query.dtype, support.dtype))
    if query.dtype != support.dtype:   # promoted here, once, for every backend (each takes one dtype)
        common = torch.promote_types(query.dtype, support.dtype)
        query, support = query.to(common), support.to(common)
    if chosen == "triton":             # the default falls back to the next default if the kernel fails
        args = (query, support, k, q_off, s_off)
        idx, dist2 = KERNEL.explicit(*args) if backend else KERNEL(query.device, *args)
        return idx, dist2.to(out_dtype)
    if chosen == "cluster":
        idx, dist2 = _knn_cluster(query, support, k, q_off, s_off)
        return idx, dist2.to(out_dtype)
    fn = {"numba": _cloud_numba, "pykdtree": _cloud_pykdtree, "scipy": _cloud_scipy, "torch": _cloud_torch}[chosen]
    return _cloud_by_cloud(fn, query, support, k, q_off, s_off)


def _cloud_by_cloud(fn, query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]):
    """``fn(query rows, support rows, min(k, support rows))`` of each cloud in turn, as ``knn`` returns them (``query``
    and ``support`` of one dtype): global int64 rows, each cloud's filled to ``k`` columns (:func:`_fill`)."""
    out_dtype = geometry_dtype(query.dtype)
    idx_parts, dist_parts = [], []
    q_start = s_start = 0
    for q_end, s_end in zip(q_off, s_off, strict=True):
        k_eff = min(k, s_end - s_start)
        idx, dist2 = fn(query[q_start:q_end], support[s_start:s_end], k_eff)
        idx = torch.as_tensor(idx).to(query.device, torch.long) + s_start
        dist2 = torch.as_tensor(dist2).to(query.device, out_dtype)
        idx_parts.append(_fill(idx, k, k_eff))
        dist_parts.append(_fill(dist2, k, k_eff))
        q_start, s_start = q_end, s_end
    return torch.cat(idx_parts), torch.cat(dist_parts)


def _fill(x: Tensor, k: int, n: int | Tensor) -> Tensor:
    """The small-cloud rule (module docstring): column ``c`` of the ``(M, k)`` result holds column ``c mod n``
    of ``x (M, >= n)``, its ``n`` sorted neighbours; ``n`` one count, or ``(M,)`` counts, one a row."""
    if isinstance(n, int):
        return x if x.shape[1] == k == n else x[:, torch.arange(k, device=x.device) % n]
    return x.gather(1, torch.arange(k, device=x.device)[None, :] % n[:, None])


def _numpy(x: Tensor) -> np.ndarray:
    """Contiguous float array on the CPU (float64 stays float64, everything else becomes float32)."""
    return x.detach().to("cpu", geometry_dtype(x.dtype)).contiguous().numpy()


_shared = threading.local()   # the trees and query orders of the block being run in this thread (shared_trees)


@contextlib.contextmanager
def shared_trees():
    """Within the block the tree backends build each support cloud's tree and order each query cloud once, on the
    first call that needs it, and the later calls reuse it (module docstring). A cloud is known by its tensor's
    memory (address, rows, strides, dtype, device), so its values must not change inside the block; the tensors
    are held there, so no other tensor takes their address. Per thread (a loader worker, the side stream's). The
    trees and orders of every cloud are held until the block ends: a hierarchy of 16 x 80k points on the CPU peaks
    60-90 MB higher than with one tree at a time (process peak RSS, pykdtree, two runs)."""
    previous = getattr(_shared, "sets", None)
    _shared.sets = {}
    try:
        yield
    finally:
        _shared.sets = previous


def _key(kind: str, points: Tensor) -> tuple:
    return kind, points.data_ptr(), points.shape, points.stride(), points.dtype, points.device


def _once(kind: str, points: Tensor, make):
    """``make()``; inside :func:`shared_trees` the value it gave for ``kind`` of this ``points`` tensor there."""
    sets = getattr(_shared, "sets", None)
    if sets is None:
        return make()
    key = _key(kind, points)
    if key not in sets:
        sets[key] = (points, make())        # holding the tensor keeps its memory: no other takes its address
    return sets[key][1]


def kd_order(points: Tensor) -> np.ndarray | None:
    """The rows of the cloud ``points`` in the kd order of the ``numba`` backend's tree over it, where this thread's
    :func:`shared_trees` block has built that tree (the FPS of the next stage takes it), else ``None``."""
    found = getattr(_shared, "sets", None) and _shared.sets.get(_key("kd", points))
    return found[1][0] if found else None


def _in_morton_order(search, query: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``search(q)`` (a tree's ``(M, k)`` rows and squared distances of each query of ``q``, ``query`` as
    ``_numpy`` gives it), run on the queries in their Morton order (``pointgeope.morton_order.cloud_order``)
    from ``_ORDERED_QUERIES`` of them, its rows put back in the caller's order. A tree answers each query on its
    own, so the result is the same, bit for bit; neighbouring queries walk the same nodes one after the other,
    which the cache keeps (a training crop's points come shuffled, and FPS samples in an order far apart by
    design). Inside :func:`shared_trees` each query cloud is ordered once."""
    if query.shape[0] < _ORDERED_QUERIES or not available("numba"):
        return search(_numpy(query))
    rank, q_sorted = _once("morton", query, lambda: _morton_sorted(_numpy(query)))
    idx_sorted, dist2_sorted = search(q_sorted)
    return np.take(idx_sorted, rank, axis=0), np.take(dist2_sorted, rank, axis=0)


def _morton_sorted(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points ``q (M, 3)`` in their Morton order and the rank of each point in it (``q_sorted[rank] == q``:
    the rows of a search of ``q_sorted`` taken at ``rank`` are in ``q``'s order; a gather, 3x faster here than
    the scatter by the order)."""
    from pointgeope import morton_order

    order = morton_order.cloud_order(q)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order), dtype=order.dtype)
    return rank, q[order]


def _cloud_numba(query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The definition's ``k`` neighbours from ``kd_knn``'s tree (exact, ties included: no re-ranking). A query
    cloud that is the support cloud itself (the same memory) is searched from each point's own leaf, another in
    its Morton order from ``_ORDERED_QUERIES`` queries (each cloud ordered once inside :func:`shared_trees`)."""
    from pointgeope import morton_order
    from pointgeope.model.ops import kd_knn

    tree = kd_knn.tree_of(support)
    if _same_memory(query, support):
        return kd_knn.search_all(tree, kd_knn.LEAF, k)
    idx, dist2 = np.empty((query.shape[0], k), np.int64), np.empty((query.shape[0], k), tree[1].dtype)
    q = _numpy(query)
    order = (_once("morton_order", query, lambda: morton_order.cloud_order(q)) if len(q) >= _ORDERED_QUERIES
             else np.arange(len(q)))
    kd_knn.search(tree, kd_knn.LEAF, q, order, k, idx, dist2)
    return idx, dist2


def _same_memory(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` are views of the same values (address, shape, strides, dtype, device)."""
    return (a.data_ptr(), a.shape, a.stride(), a.dtype, a.device) == (b.data_ptr(), b.shape, b.stride(), b.dtype,
                                                                       b.device)


def _cloud_pykdtree(query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    from pykdtree.kdtree import KDTree

    def candidates_of(tree):
        def candidates(q: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
            dist2, idx = tree.query(q, k=m, sqr_dists=True)
            return idx.reshape(-1, m), dist2.reshape(-1, m)          # uint32 rows: knn_ties reads them as they are
        return candidates
    tree = _once("pykdtree", support, lambda: KDTree(_numpy(support)))
    return _exact(candidates_of(tree), lambda points: candidates_of(KDTree(points)), query, support, k)


def _cloud_scipy(query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    from scipy.spatial import cKDTree

    def candidates_of(tree):
        def candidates(q: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
            dist, idx = tree.query(q, k=m)                   # float64 Euclidean distances
            dist = dist.reshape(-1, m)
            return idx.reshape(-1, m).astype(np.int64), dist * dist
        return candidates
    tree = _once("scipy", support, lambda: cKDTree(_numpy(support)))
    return _exact(candidates_of(tree), lambda points: candidates_of(cKDTree(points)), query, support, k)


def _exact(candidates, tree, query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The definition's ``k`` neighbours (``knn_ties.exact_knn``) from a tree's ``candidates(q, m)`` (``tree``:
    the ``candidates`` of a new tree over given points), the queries searched in Morton order. Query and
    support have one dtype (``knn`` promoted them)."""
    from pointgeope.model.ops.knn_ties import exact_knn

    s = _numpy(support)

    def brute(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx, dist2 = _cloud_torch(torch.from_numpy(q), torch.from_numpy(s), k)
        return idx.numpy(), dist2.numpy()
    return _in_morton_order(lambda q: exact_knn(candidates, brute, q, s, k, tree), query)


def _cloud_torch(query: Tensor, support: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Exact brute force: the ``k`` first support points in the order of ``(d2, row)``, the ``triton``
    backend's result (``triton_knn``), sorted by that order.

    ``d2 = ((q_x - s_x)^2 + (q_y - s_y)^2) + (q_z - s_z)^2`` of every pair, each operation a torch elementwise
    op rounded on its own, in float32 (float64 kept, as ``_numpy`` gives the CPU backends: integer coordinates
    have no float distance, half-precision squares overflow past 65504). Why direct differences and not the
    expansion ``|q|^2 + |s|^2 - 2 q.s`` (one matrix product): its rounding error grows like
    ``u (|q| + |s|)^2`` (``u = 2^-24``; coordinates centred on the cloud's mean do not help an object far
    from that mean) while the neighbours' distances may be far smaller, so it picks wrong candidates that
    no exact re-sort recovers; and a margin covering that error is no bound at all once matrix products run
    in TF32 or bfloat16 (``torch.set_float32_matmul_precision``). Elementwise ops are IEEE-rounded on every
    device and setting.

    Selection, per row of ``d2`` (``n`` support points): ``topk`` of ``k + 1``; if the ``k``-th and
    ``(k + 1)``-th values differ, the first ``k`` are exactly the points of ``d2 <=`` the ``k``-th value;
    if they are equal (a tie at the boundary), ``_boundary_ties`` keeps every point below it and the
    smallest rows at it. The ``k`` are then sorted by row, then stably by ``d2``: the ``(d2, row)`` order.

    Chunks of queries: at most ``_PAIRS_PER_CHUNK`` pairs at a time, ``_PAIRS_PER_CHUNK_CPU`` on one CPU thread.
    """
    dtype = geometry_dtype(query.dtype)
    query, support = query.to(dtype), support.to(dtype)
    n, m = support.shape[0], query.shape[0]
    planes = support.T.contiguous()                     # (3, N): x, y, z rows
    one_thread = query.device.type == "cpu" and torch.get_num_threads() == 1
    pairs = _PAIRS_PER_CHUNK_CPU if one_thread else _PAIRS_PER_CHUNK
    rows = max(1, pairs // max(1, n))
    d2_buf = query.new_empty(min(rows, m), n)
    term_buf = torch.empty_like(d2_buf)
    idx_parts, dist_parts = [torch.empty(0, k, dtype=torch.long, device=query.device)], [query.new_empty(0, k)]
    for start in range(0, m, rows):
        q = query[start:start + rows]
        d2, term = d2_buf[:len(q)], term_buf[:len(q)]
        torch.sub(q[:, 0:1], planes[0], out=d2).mul_(d2)                 # (R, N): dx^2
        d2.add_(torch.sub(q[:, 1:2], planes[1], out=term).mul_(term))   # + dy^2
        d2.add_(torch.sub(q[:, 2:3], planes[2], out=term).mul_(term))   # + dz^2
        idx, dist = _smallest(d2, k)
        idx_parts.append(idx)
        dist_parts.append(dist)
    return torch.cat(idx_parts), torch.cat(dist_parts)


def _smallest(d2: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Column indices ``(R, k)`` and values of the ``k`` first entries of each row of ``d2 (R, n)`` in the
    order of ``(value, column)``, sorted by it (``_cloud_torch``'s selection)."""
    n = d2.shape[1]
    if k >= n:
        idx, dist = torch.arange(n, device=d2.device).expand_as(d2), d2.clone()
    else:
        dist, idx = torch.topk(d2, k + 1, dim=1, largest=False, sorted=True)
        tied = (dist[:, k] == dist[:, k - 1]).nonzero().flatten()
        dist, idx = dist[:, :k], idx[:, :k]
        if len(tied):
            idx[tied], dist[tied] = _boundary_ties(d2[tied], dist[tied, k - 1], k)
        idx, by_row = idx.sort(dim=1)
        dist = dist.gather(1, by_row)
    dist, by_dist = dist.sort(dim=1, stable=True)
    return idx.gather(1, by_dist), dist


def _boundary_ties(d2: Tensor, kth: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Rows of ``d2 (T, n)`` whose ``k``-th smallest value ``kth (T,)`` is shared past column ``k``: the
    ``c < k`` columns below ``kth`` and the ``k - c`` smallest columns at ``kth``, ascending ``(T, k)``,
    with their values."""
    below = d2 < kth[:, None]
    at = d2 == kth[:, None]
    room = k - below.sum(1, keepdim=True)
    take = below | (at & (at.cumsum(1, dtype=torch.int32) <= room))
    idx = take.nonzero()[:, 1].view(-1, k)             # row-major: ascending columns within each row
    return idx, d2.gather(1, idx)


def _knn_triton(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """The Triton kernel over the whole batch, then the cyclic fill of rows whose cloud has ``n < k`` points."""
    from pointgeope.model.ops import triton_knn

    idx, dist2 = triton_knn.knn_triton(query, support, k, q_off, s_off)
    sizes = counts(s_off)
    if min(sizes) < k:
        n = torch.repeat_interleave(torch.tensor(sizes, device=query.device),
                                    torch.tensor(counts(q_off), device=query.device))
        idx, dist2 = _fill(idx, k, n), _fill(dist2, k, n)
    return idx, dist2


def _knn_cluster(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """torch-cluster's kNN over the whole batch; clouds smaller than ``k`` take the pure-torch path."""
    import torch_cluster

    if min(counts(s_off)) < k:
        return _cloud_by_cloud(_cloud_torch, query, support, k, q_off, s_off)
    device = query.device
    q_batch = cloud_of_rows(torch.tensor(q_off, device=device), q_off[-1])
    s_batch = cloud_of_rows(torch.tensor(s_off, device=device), s_off[-1])
    # edge_index: row 0 = query rows (each exactly k times, grouped by query), row 1 = support rows.
    row, col = torch_cluster.knn(support, query, k, s_batch, q_batch)
    order = torch.argsort(row, stable=True)  # group by query, keep the per-query order
    idx = col[order].view(query.shape[0], k)
    gd = geometry_dtype(query.dtype)                      # integer or half differences would wrap or overflow
    diff = query[:, None, :].to(gd) - support[idx].to(gd)
    dist2 = (diff * diff).sum(-1)
    dist2, perm = torch.sort(dist2, dim=1)
    return idx.gather(1, perm), dist2


def _next_default(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """The neighbours by the backend that follows Triton by default (once ``knn`` is off or failed)."""
    return knn(query, support, k, q_off, s_off, check_finite=False)


def _check(device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    from pointgeope.model.kernel_check import knn_cases

    return knn_cases(device, points)


KERNEL = kernels.register("knn", _knn_triton, _next_default, check=_check)
