r"""The layer's rotations of keys on every edge as one compiled pass on the CPU (numba), for CPU tensors of
float32 or float64: the kernels behind [`turn_into_targets`][pointgeope.nn.target_frame.turn_into_targets]
(standard GeoPE) and the per-edge rotations of linear GeoPE and RoPE in `GeoPEPointTransformerConv`.

**Blocks of three** (`turn_edges`), per edge `e` with source `j` and block `b`, Rodrigues with a coefficient row
`c = crow[e]` `[cos | sin | 1 - cos | u]` (`pointgeope/nn/target_frame.py`; a target's row for standard
GeoPE, the edge's own for linear GeoPE); `sign = -1` turns by $R^\top$, `+1` by $R$:

$$o_{e,b} = \cos\varphi_{c,b}\, k_{j,b} + \mathrm{sign}\,\sin\varphi_{c,b}\, (u_c \times k_{j,b})
          + (1 - \cos\varphi_{c,b}) (u_c \cdot k_{j,b})\, u_c$$

**Channel pairs** (`turn_edges(..., pairs=True)`), RoPE's: $(a, b) \mapsto (a \cos\theta_{e,p} - b \sin\theta_{e,p},
a \sin\theta_{e,p} + b \cos\theta_{e,p})$ with the edge's angles. The pass-through channels are copied. Each
edge reads one row of the keys and writes one row of the output: one pass over `(E, C)`, where torch's
operations make about twenty (`target_frame._turn`).

Backward, $\partial k_j = \sum_{e: src(e) = j} R_e^\top g_e$: every thread owns a range of source rows and
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

__all__ = ["turn_edges", "add_turned_edges"]

_SERIAL_EDGES = 1 << 14                     # fewer edges: one thread (a thread's hand-off costs ~50 us)


@numba.njit(nogil=True, cache=True)
def _turn_rows(rows, coef, src, crow, sign, out, e0, e1):  # pragma: no cover - compiled
    """`out[e] = R_{crow[e]}^{sign} rows[src[e]]` for edges `e0 <= e < e1` (`R_c`: the rotation of coefficient row
    `c`); returns the first edge whose index is out of range (`-1`: none), before anything of it is read."""
    n = (coef.shape[1] - 3) // 3
    for e in range(e0, e1):
        j, i = src[e], crow[e]
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
def _add_turned_edges(grad, coef, src, crow, sign, out, j0, j1):  # pragma: no cover - compiled
    """`out[j] += R_{crow[e]}^{sign} grad[e]` for every edge `e` whose source `j` is in `[j0, j1)`, in edge order
    (indices already checked by the forward)."""
    n = (coef.shape[1] - 3) // 3
    for e in range(src.shape[0]):
        j = src[e]
        if j < j0 or j >= j1:
            continue
        i = crow[e]
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


@numba.njit(nogil=True, cache=True)
def _turn_pair_rows(rows, cs, src, crow, sign, out, e0, e1):  # pragma: no cover - compiled
    """`out[e]`: the channel pairs `(a, b)` of `rows[src[e]]` turned to `(a c - s b, a s + b c)` by
    `c = cs[crow[e], p]`, `s = sign * cs[crow[e], P + p]`, the rest copied, for edges `e0 <= e < e1`; returns
    the first edge whose index is out of range (`-1`: none)."""
    pairs = cs.shape[1] // 2
    for e in range(e0, e1):
        j, i = src[e], crow[e]
        if j < 0 or j >= rows.shape[0] or i < 0 or i >= cs.shape[0]:
            return e
        for p in range(pairs):
            c, s = cs[i, p], sign * cs[i, pairs + p]
            a, b = rows[j, 2 * p], rows[j, 2 * p + 1]
            out[e, 2 * p] = a * c - s * b
            out[e, 2 * p + 1] = a * s + b * c
        for r in range(2 * pairs, rows.shape[1]):
            out[e, r] = rows[j, r]
    return -1


@numba.njit(nogil=True, cache=True)
def _add_pair_turned_edges(grad, cs, src, crow, sign, out, j0, j1):  # pragma: no cover - compiled
    """`out[j] +=` the pairs of `grad[e]` turned as `_turn_pair_rows` does, for every edge `e` whose source `j` is
    in `[j0, j1)`, in edge order."""
    pairs = cs.shape[1] // 2
    for e in range(src.shape[0]):
        j, i = src[e], crow[e]
        if j < j0 or j >= j1:
            continue
        for p in range(pairs):
            c, s = cs[i, p], sign * cs[i, pairs + p]
            a, b = grad[e, 2 * p], grad[e, 2 * p + 1]
            out[j, 2 * p] += a * c - s * b
            out[j, 2 * p + 1] += a * s + b * c
        for r in range(2 * pairs, grad.shape[1]):
            out[j, r] += grad[e, r]


def _check_edges(bad: list[int], src: Tensor, crow: Tensor, sources: int, rows: int) -> None:
    """An `IndexError` naming the first edge out of range among the parts' answers (`-1`: none)."""
    bad = [e for e in bad if e >= 0]
    if bad:
        e = bad[0]
        raise IndexError(f"edge {e} ({int(src[e])} -> {int(crow[e])}) is out of range: expected sources in "
                         f"[0, {sources}) and targets in [0, {rows})")


@torch.library.custom_op("pointgeope::turn_edges", mutates_args=())
def turn_edges(keys: Tensor, table: Tensor, src: Tensor, crow: Tensor, sign: float, pairs: bool) -> Tensor:
    r"""`out[e] = T_{crow[e]}^{sign} k_{src[e]}` for every edge: keys `(N_s, C)` in the layer's interleaved
    layout; `T_c` the rotation of row `c` of `table`: Rodrigues coefficients `(M, 3n + 3)` per block of three
    (a target's, `crow = dst`, `sign = -1`: $R(t_i)^\top$; or an edge's own, `crow = arange(E)`, `sign = 1`),
    or with `pairs` RoPE's `[cos | sin]` `(M, 2P)` per channel pair; int64 `src, crow (E,)` -> `(E, C)` in the
    keys' dtype (float32 or float64, CPU). Differentiable in the keys; a custom op, so `torch.compile` keeps it
    whole. An index out of range is an `IndexError` naming the edge."""
    rows, table = keys.contiguous(), table.to(keys.dtype).contiguous()
    src, crow = src.to(torch.int64).contiguous(), crow.to(torch.int64).contiguous()
    out = keys.new_empty(src.shape[0], keys.shape[1])
    kernel = _turn_pair_rows if pairs else _turn_rows
    args = (rows.numpy(), table.numpy(), src.numpy(), crow.numpy(), sign, out.numpy())
    edges = src.shape[0]
    _check_edges(_split(lambda e0, e1: kernel(*args, e0, e1), edges, edges), src, crow, keys.shape[0],
                 table.shape[0])
    return out


@torch.library.custom_op("pointgeope::add_turned_edges", mutates_args=())
def add_turned_edges(grad: Tensor, table: Tensor, src: Tensor, crow: Tensor, sign: float, pairs: bool,
                     sources: int) -> Tensor:
    """`out[j] = sum_{e: src[e] = j} T_{crow[e]}^{sign} grad[e]` `(sources, C)`: `turn_edges`' gradient (with the
    opposite `sign`), every row summed in edge order; indices as `turn_edges` checked them."""
    grad, table = grad.contiguous(), table.to(grad.dtype).contiguous()
    src, crow = src.to(torch.int64).contiguous(), crow.to(torch.int64).contiguous()
    out = grad.new_zeros(sources, grad.shape[1])
    kernel = _add_pair_turned_edges if pairs else _add_turned_edges
    args = (grad.numpy(), table.numpy(), src.numpy(), crow.numpy(), sign, out.numpy())
    _split(lambda j0, j1: kernel(*args, j0, j1), sources, src.shape[0])
    return out


@turn_edges.register_fake
def _turn_edges_shape(keys, table, src, crow, sign, pairs):
    return keys.new_empty(src.shape[0], keys.shape[1])


@add_turned_edges.register_fake
def _add_turned_edges_shape(grad, table, src, crow, sign, pairs, sources):
    return grad.new_empty(sources, grad.shape[1])


def _save(ctx, inputs, output) -> None:
    keys, table, src, crow, sign, pairs = inputs
    ctx.save_for_backward(table, src, crow)
    ctx.sign, ctx.pairs, ctx.sources = sign, pairs, keys.shape[0]


def _backward(ctx, grad: Tensor):
    table, src, crow = ctx.saved_tensors
    return add_turned_edges(grad, table, src, crow, -ctx.sign, ctx.pairs, ctx.sources), None, None, None, None, None


turn_edges.register_autograd(_backward, setup_context=_save)
