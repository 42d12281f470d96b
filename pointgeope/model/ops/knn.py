"""k nearest neighbours within each cloud of a packed batch.

For every query point ``i`` of cloud ``b`` the ``k`` points ``j`` of the support cloud ``b`` with the
smallest squared distance ``|q_i - s_j|^2``, sorted by distance. Indices are global rows of the packed
support tensor. Ties: the CPU and torch backends break them in any order; the ``triton`` backend
(``triton_knn``, the CUDA default) defines them, ties in float32 distance go to the smaller row, so its
result is unique.

**Small clouds.** When a support cloud holds ``n < k`` points, its ``n`` neighbours (sorted) are
repeated cyclically to fill the ``k`` columns: column ``c`` holds neighbour ``c mod n``. Every row then
has exactly ``k`` valid entries and a max-pool or softmax over them is unchanged by the padding, up to
the multiplicity the repeats give (a softmax counts a repeated neighbour several times).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pointgeope.model import kernels
from pointgeope.model.ops import checks
from pointgeope.model.ops.backends import KNN_BACKENDS, resolve
from pointgeope.model.ops.offsets import check_offset, cloud_of_rows, counts

__all__ = ["knn"]

# Pure-torch brute force: at most this many (query, support) pairs per chunk (64 MiB of float32 distances).
_PAIRS_PER_CHUNK = 1 << 24


def knn(query: Tensor, support: Tensor, k: int, query_offset: Tensor, support_offset: Tensor,
        backend: str | None = None, *, check_finite: bool = True) -> tuple[Tensor, Tensor]:
    """k nearest support points of every query point, within the same cloud.

    Args:
        query: ``(M, 3)`` query points.
        support: ``(N, 3)`` support points (the same tensor as ``query`` for self-neighbourhoods).
        k: neighbours per query, ``k >= 1``.
        query_offset, support_offset: ``(B,)`` cumulative counts of both packed batches.
        backend: ``"pykdtree"``, ``"scipy"``, ``"torch"``, ``"cluster"``, ``"triton"`` or ``None`` for the
            default of the device (see ``backends``; a default Triton kernel that fails hands over to the
            next default, :mod:`pointgeope.model.kernels`).
        check_finite: check that ``query`` and ``support`` are finite and within ``checks.COORD_LIMIT`` (one
            flag read on the host each; a caller that checked the coordinates once, as ``HierarchySpec`` and
            ``interpolate`` do, passes ``False``). The name is kept from when it checked finiteness only.

    Returns:
        ``idx (M, k)`` int64 global support rows and ``dist2 (M, k)`` squared distances (query dtype),
        both on the query's device, sorted by distance. Query and support of different dtypes are searched
        in their promoted dtype (``torch.promote_types``) on every backend.

    Raises:
        ValueError / TypeError naming the argument: shapes, ``k`` not an int ``>= 1``, non-finite
        coordinates or coordinates beyond ``checks.COORD_LIMIT`` (``2^60``: float32 squared distances
        overflow), offsets (``offsets.check_offset``), a backend that cannot run.
    """
    if query.dim() != 2 or query.shape[1] != 3 or support.dim() != 2 or support.shape[1] != 3:
        raise ValueError(f"expected query (M, 3) and support (N, 3), got {tuple(query.shape)} and {tuple(support.shape)}")
    k = checks.check_count("k", k)
    if check_finite:
        checks.check_coordinates("query", query)
        if support is not query:
            checks.check_coordinates("support", support)
    q_off = check_offset(query_offset, query.shape[0], "query_offset")
    s_off = check_offset(support_offset, support.shape[0], "support_offset")
    if len(q_off) != len(s_off):
        raise ValueError(f"expected as many query clouds as support clouds, got {len(q_off)} and {len(s_off)}")
    chosen = resolve(backend, KNN_BACKENDS, query.device, "knn")
    out_dtype = query.dtype
    if query.dtype != support.dtype:   # promoted here, once, for every backend (torch's addmm refuses a mix)
        common = torch.promote_types(query.dtype, support.dtype)
        query, support = query.to(common), support.to(common)
    if chosen == "triton":             # the default falls back to the next default if the kernel fails
        args = (query, support, k, q_off, s_off)
        idx, dist2 = KERNEL.explicit(*args) if backend else KERNEL(query.device, *args)
        return idx, dist2.to(out_dtype)
    if chosen == "cluster":
        idx, dist2 = _knn_cluster(query, support, k, q_off, s_off)
        return idx, dist2.to(out_dtype)
    fn = {"pykdtree": _cloud_pykdtree, "scipy": _cloud_scipy, "torch": _cloud_torch}[chosen]
    idx_parts, dist_parts = [], []
    q_start = s_start = 0
    for q_end, s_end in zip(q_off, s_off):
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
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.detach().to("cpu", dtype).contiguous().numpy()


def _cloud_pykdtree(query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    from pykdtree.kdtree import KDTree

    s = _numpy(support)
    dist2, idx = KDTree(s).query(_numpy(query).astype(s.dtype), k=k, sqr_dists=True)
    return idx.reshape(-1, k).astype(np.int64), dist2.reshape(-1, k)


def _cloud_scipy(query: Tensor, support: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    from scipy.spatial import cKDTree

    dist, idx = cKDTree(_numpy(support)).query(_numpy(query), k=k)
    dist = dist.reshape(-1, k)
    return idx.reshape(-1, k).astype(np.int64), dist * dist


def _cloud_torch(query: Tensor, support: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Brute force in chunks of queries: candidates from ``|q|^2 + |s|^2 - 2 q.s`` (one matrix product on
    coordinates centred on the support's mean), then the exact squared differences of the ``k`` chosen,
    re-sorted. Only near-ties within float rounding (~1e-6 of the squared extent) can pick differently.
    Searched in float32, float64 kept, as ``_numpy`` gives the CPU backends: integer coordinates have no
    mean, and half-precision squared distances overflow past 65504 (coordinates a few hundred apart)."""
    dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    query, support = query.to(dtype), support.to(dtype)
    center = support.mean(0)
    q_all, s_c = query - center, support - center
    s_sq = (s_c * s_c).sum(1)
    rows = max(1, _PAIRS_PER_CHUNK // max(1, support.shape[0]))
    idx_parts, dist_parts = [], []
    for start in range(0, query.shape[0], rows):
        q = q_all[start:start + rows]
        d2 = torch.addmm(s_sq[None, :], q, s_c.T, alpha=-2).add_((q * q).sum(1, keepdim=True))
        idx = torch.topk(d2, k, dim=1, largest=False, sorted=False).indices
        diff = query[start:start + rows, None, :] - support[idx]
        exact, order = torch.sort((diff * diff).sum(-1), dim=1)
        idx_parts.append(idx.gather(1, order))
        dist_parts.append(exact)
    return torch.cat(idx_parts), torch.cat(dist_parts)


def _knn_triton(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """The Triton kernel over the whole batch, then the cyclic fill of rows whose cloud has ``n < k`` points."""
    from pointgeope.model.ops import triton_knn

    idx, dist2 = triton_knn.knn_triton(query, support, k, q_off, s_off)
    sizes = counts(s_off)
    if min(sizes) < k:
        n = torch.repeat_interleave(torch.tensor(sizes, device=query.device),
                                    torch.tensor(counts(q_off), device=query.device))
        idx, dist2 = _fill(idx, k, n), _fill(dist2, k, n)
    return idx, dist2.to(query.dtype)


def _knn_cluster(query: Tensor, support: Tensor, k: int, q_off: list[int], s_off: list[int]) -> tuple[Tensor, Tensor]:
    """torch-cluster's kNN over the whole batch; clouds smaller than ``k`` take the pure-torch path."""
    import torch_cluster

    if min(counts(s_off)) < k:
        idx_parts, dist_parts = [], []
        q_start = s_start = 0
        for q_end, s_end in zip(q_off, s_off):
            k_eff = min(k, s_end - s_start)
            idx, dist2 = _cloud_torch(query[q_start:q_end], support[s_start:s_end], k_eff)
            idx_parts.append(_fill(idx + s_start, k, k_eff))
            dist_parts.append(_fill(dist2, k, k_eff))
            q_start, s_start = q_end, s_end
        return torch.cat(idx_parts), torch.cat(dist_parts)
    device = query.device
    q_batch = cloud_of_rows(torch.tensor(q_off, device=device), q_off[-1])
    s_batch = cloud_of_rows(torch.tensor(s_off, device=device), s_off[-1])
    # edge_index: row 0 = query rows (each exactly k times, grouped by query), row 1 = support rows.
    row, col = torch_cluster.knn(support, query, k, s_batch, q_batch)
    order = torch.argsort(row, stable=True)  # group by query, keep the per-query order
    idx = col[order].view(query.shape[0], k)
    diff = query[:, None, :] - support[idx]
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
