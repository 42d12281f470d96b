r"""Standard GeoPE's $R(t_i)^\top k_j$ on every edge as one compiled pass on the CPU (numba): the kernel behind
[`turn_into_targets`][pointgeope.nn.target_frame.turn_into_targets] for CPU tensors of float32 or float64.

Forward, per edge `e = (j -> i)` and block `b` (Rodrigues with the target's coefficients
`[cos | sin | 1 - cos | u]`, `pointgeope/nn/target_frame.py`; `sign = -1` turns by $R^\top$, `+1` by $R$):

$$o_{e,b} = \cos\varphi_{i,b}\, k_{j,b} + \mathrm{sign}\,\sin\varphi_{i,b}\, (u_i \times k_{j,b})
          + (1 - \cos\varphi_{i,b}) (u_i \cdot k_{j,b})\, u_i$$

and the pass-through channels are copied. Each edge reads one row of the keys and writes one row of the output:
one pass over `(E, C)`, where torch's operations make about twenty (`target_frame._turn`).

Backward, $\partial k_j = \sum_{e: src(e) = j} R(t_{dst(e)})\, g_e$: every thread owns a range of source rows and
walks all the edges, adding those of its rows, so no two threads write one row (no atomics, no `(E, C)`
buffer) and every row sums its edges in edge order, whatever the thread count (the result is the same on 1 or
16 threads, bit for bit).

Threads: the edges (forward) or the source rows (backward) are split into `torch.get_num_threads()` parts run
by Python threads on kernels that release the GIL, so the one OpenMP runtime is torch's (numba's own parallel
layer would start a second one beside it, and two on the same cores stall each other).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numba
import numpy as np
import torch
from torch import Tensor

__all__ = ["TurnIntoTargets"]

_SERIAL_EDGES = 1 << 14                     # fewer edges: one thread (a thread's hand-off costs ~50 us)


@numba.njit(nogil=True, cache=True)
def _turn_rows(rows, coef, src, dst, sign, out, e0, e1):  # pragma: no cover - compiled
    """`out[e] = R(t_dst[e])^{sign} rows[src[e]]` for edges `e0 <= e < e1`; returns the first edge whose index
    is out of range (`-1`: none), before anything of it is read."""
    n = (coef.shape[1] - 3) // 3
    for e in range(e0, e1):
        j, i = src[e], dst[e]
        if j < 0 or j >= rows.shape[0] or i < 0 or i >= coef.shape[0]:
            return e
        ux, uy, uz = coef[i, 3 * n], coef[i, 3 * n + 1], coef[i, 3 * n + 2]
        for b in range(n):
            cos, sin, vers = coef[i, b], sign * coef[i, n + b], coef[i, 2 * n + b]
            vx, vy, vz = rows[j, 3 * b], rows[j, 3 * b + 1], rows[j, 3 * b + 2]
            along = vers * (ux * vx + uy * vy + uz * vz)
            out[e, 3 * b] = cos * vx + sin * (uy * vz - uz * vy) + along * ux
            out[e, 3 * b + 1] = cos * vy + sin * (uz * vx - ux * vz) + along * uy
            out[e, 3 * b + 2] = cos * vz + sin * (ux * vy - uy * vx) + along * uz
        for r in range(3 * n, rows.shape[1]):
            out[e, r] = rows[j, r]
    return -1


@numba.njit(nogil=True, cache=True)
def _add_turned_edges(grad, coef, src, dst, sign, out, j0, j1):  # pragma: no cover - compiled
    """`out[j] += R(t_dst[e])^{sign} grad[e]` for every edge `e` whose source `j` is in `[j0, j1)`, in edge order
    (indices already checked by the forward)."""
    n = (coef.shape[1] - 3) // 3
    for e in range(src.shape[0]):
        j = src[e]
        if j < j0 or j >= j1:
            continue
        i = dst[e]
        ux, uy, uz = coef[i, 3 * n], coef[i, 3 * n + 1], coef[i, 3 * n + 2]
        for b in range(n):
            cos, sin, vers = coef[i, b], sign * coef[i, n + b], coef[i, 2 * n + b]
            vx, vy, vz = grad[e, 3 * b], grad[e, 3 * b + 1], grad[e, 3 * b + 2]
            along = vers * (ux * vx + uy * vy + uz * vz)
            out[j, 3 * b] += cos * vx + sin * (uy * vz - uz * vy) + along * ux
            out[j, 3 * b + 1] += cos * vy + sin * (uz * vx - ux * vz) + along * uy
            out[j, 3 * b + 2] += cos * vz + sin * (ux * vy - uy * vx) + along * uz
        for r in range(3 * n, grad.shape[1]):
            out[j, r] += grad[e, r]


@lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="pointgeope-frame")


def _split(run, total: int, edges: int) -> list[int]:
    """`run(start, stop)` over `[0, total)` cut into `torch.get_num_threads()` parts (one part for small
    graphs); returns the parts' results in order."""
    parts = 1 if edges < _SERIAL_EDGES else max(1, min(torch.get_num_threads(), total))
    bounds = np.linspace(0, total, parts + 1).astype(np.int64)
    if parts == 1:
        return [run(0, total)]
    return list(_pool(parts).map(run, bounds[:-1], bounds[1:]))


class TurnIntoTargets(torch.autograd.Function):
    r"""$R(t_i)^\top k_j$ of every edge `(src[e] = j -> dst[e] = i)`: keys `(N_s, 3n + r)` in the layer's
    interleaved layout, the targets' coefficients `(N_t, 3n + 3)`, int64 edges `(E,)` -> `(E, 3n + r)` in the
    keys' dtype (float32 or float64, CPU). An edge index out of range is an `IndexError` naming the edge."""

    @staticmethod
    def forward(ctx, keys: Tensor, coef: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        rows, coef = keys.detach().contiguous(), coef.to(keys.dtype).contiguous()
        src, dst = src.to(torch.int64).contiguous(), dst.to(torch.int64).contiguous()
        out = keys.new_empty(src.shape[0], keys.shape[1])
        args = (rows.numpy(), coef.numpy(), src.numpy(), dst.numpy(), -1.0, out.numpy())
        bad = [e for e in _split(lambda e0, e1: _turn_rows(*args, e0, e1), src.shape[0], src.shape[0]) if e >= 0]
        if bad:
            e = bad[0]
            raise IndexError(f"edge {e} ({int(src[e])} -> {int(dst[e])}) is out of range: expected sources in "
                             f"[0, {keys.shape[0]}) and targets in [0, {coef.shape[0]})")
        ctx.save_for_backward(coef, src, dst)
        ctx.sources = keys.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        coef, src, dst = ctx.saved_tensors
        grad = grad.contiguous()
        out = grad.new_zeros(ctx.sources, grad.shape[1])
        args = (grad.numpy(), coef.numpy(), src.numpy(), dst.numpy(), 1.0, out.numpy())
        _split(lambda j0, j1: _add_turned_edges(*args, j0, j1), ctx.sources, src.shape[0])
        return out, None, None, None
