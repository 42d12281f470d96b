"""The k nearest neighbours of ``pointgeope.model.ops.knn``'s definition, written from it in numpy: the one
brute force the exact kNN backends (``torch``: test_knn_torch.py; ``triton``: test_triton_ops.py) compare with."""
from __future__ import annotations

import numpy as np
import torch

from pointgeope.model.ops import knn


def reference_knn(query: torch.Tensor, support: torch.Tensor, k: int, q_off, s_off) -> tuple[np.ndarray, np.ndarray]:
    """Brute force in float64 from the definition, one query at a time: explicit differences, and for float32
    input every operation of ``((dx^2 + dy^2) + dz^2)`` rounded to float32 after it (float64 holds the exact
    difference, product or sum of float32 values of these clouds, so one rounding gives float32's result);
    float64 input is not rounded. Each row: support rows ordered by ``(d2, global row)``, the first ``k``,
    a cloud of ``n < k`` points repeated cyclically."""
    rnd = (lambda x: x.astype(np.float32).astype(np.float64)) if query.dtype == torch.float32 else (lambda x: x)
    q, s = query.cpu().double().numpy(), support.cpu().double().numpy()
    idx_rows, d_rows, q0, s0 = [], [], 0, 0
    for q1, s1 in zip(q_off.tolist(), s_off.tolist(), strict=True):
        rows = np.arange(s0, s1)
        for i in range(q0, q1):
            dx, dy, dz = (rnd(q[i, a] - s[s0:s1, a]) for a in range(3))
            d2 = rnd(rnd(rnd(dx * dx) + rnd(dy * dy)) + rnd(dz * dz))
            order = np.lexsort((rows, d2))[np.arange(k) % (s1 - s0)]
            idx_rows.append(rows[order])
            d_rows.append(d2[order])
        q0, s0 = q1, s1
    return np.stack(idx_rows), np.stack(d_rows)


def assert_exact_knn(backend: str, query, support, k: int, q_off, s_off):
    """``knn(..., backend=backend)`` equals :func:`reference_knn`: the same rows in the same order, the same
    distances, in float64 for float64 coordinates and float32 otherwise, on the query's device."""
    idx, dist2 = knn(query, support, k, q_off, s_off, backend=backend)
    want_idx, want_d = reference_knn(query, support, k, q_off, s_off)
    assert idx.dtype == torch.long and idx.shape == (query.shape[0], k) and idx.device == query.device
    assert dist2.dtype == (torch.float64 if query.dtype == torch.float64 else torch.float32)
    np.testing.assert_array_equal(idx.cpu().numpy(), want_idx)
    np.testing.assert_array_equal(dist2.cpu().double().numpy(), want_d)
    return idx, dist2
