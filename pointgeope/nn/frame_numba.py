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
from functools import cache

import numba
import numpy as np
import torch
from torch import Tensor

__all__ = ["turn_edges", "add_turned_edges"]

_SERIAL_EDGES = 1 << 14                     # fewer edges: one thread (a thread's hand-off costs ~50 us)


@numba.njit(nogil=True, cache=True, inline="always")
def _turn_row(v, t, pairs, sign, out, add):  # pragma: no cover - compiled
    """`out (=|+=) T^{sign} v` for one row `v (C,)` and one table row `t`: Rodrigues `[cos | sin | 1 - cos | u]`
    per block of three, or with `pairs` `[cos | sin]` per channel pair; the rest copied (or added)."""
    if pairs:
        n = t.shape[0] // 2
        for p in range(n):
            c, s, a, b = t[p], sign * t[n + p], v[2 * p], v[2 * p + 1]
            x, y = a * c - s * b, a * s + b * c
            out[2 * p], out[2 * p + 1] = (out[2 * p] + x, out[2 * p + 1] + y) if add else (x, y)
        done = 2 * n
    else:
        n = (t.shape[0] - 3) // 3
        ux, uy, uz = t[3 * n], t[3 * n + 1], t[3 * n + 2]
        for b in range(n):
            cos, sin, vers = t[b], sign * t[n + b], t[2 * n + b]
            vx, vy, vz = v[3 * b], v[3 * b + 1], v[3 * b + 2]
            along = vers * (ux * vx + uy * vy + uz * vz)
            x = cos * vx + sin * (uy * vz - uz * vy) + along * ux
            y = cos * vy + sin * (uz * vx - ux * vz) + along * uy
            z = cos * vz + sin * (ux * vy - uy * vx) + along * uz
            if add:
                out[3 * b] += x
                out[3 * b + 1] += y
                out[3 * b + 2] += z
            else:
                out[3 * b], out[3 * b + 1], out[3 * b + 2] = x, y, z
        done = 3 * n
    for r in range(done, v.shape[0]):
        out[r] = out[r] + v[r] if add else v[r]


@numba.njit(nogil=True, cache=True)
def _turn_rows(rows, table, src, crow, sign, pairs, out, e0, e1):  # pragma: no cover - compiled
    """`out[e] = T_{crow[e]}^{sign} rows[src[e]]` for edges `e0 <= e < e1` (`_turn_row`); returns the first edge
    whose index is out of range (`-1`: none), before anything of it is read."""
    for e in range(e0, e1):
        j, i = src[e], crow[e]
        if j < 0 or j >= rows.shape[0] or i < 0 or i >= table.shape[0]:
            return e
        _turn_row(rows[j], table[i], pairs, sign, out[e], False)
    return -1


@numba.njit(nogil=True, cache=True)
def _add_turned_edges(grad, table, src, crow, sign, pairs, out, j0, j1):  # pragma: no cover - compiled
    """`out[j] += T_{crow[e]}^{sign} grad[e]` for every edge `e` whose source `j` is in `[j0, j1)`, in edge order
    (indices already checked by the forward)."""
    for e in range(src.shape[0]):
        j = src[e]
        if j0 <= j < j1:
            _turn_row(grad[e], table[crow[e]], pairs, sign, out[j], True)


@cache
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
    args = (rows.numpy(), table.numpy(), src.numpy(), crow.numpy(), sign, pairs, out.numpy())
    edges = src.shape[0]
    _check_edges(_split(lambda e0, e1: _turn_rows(*args, e0, e1), edges, edges), src, crow, keys.shape[0],
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
    args = (grad.numpy(), table.numpy(), src.numpy(), crow.numpy(), sign, pairs, out.numpy())
    _split(lambda j0, j1: _add_turned_edges(*args, j0, j1), sources, src.shape[0])
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


def _save_adjoint(ctx, inputs, output) -> None:
    grad, table, src, crow, sign, pairs, sources = inputs
    ctx.save_for_backward(table, src, crow)
    ctx.sign, ctx.pairs = sign, pairs


def _adjoint_backward(ctx, grad: Tensor):
    """`add_turned_edges` is linear in its gradient and its adjoint is `turn_edges` with the opposite sign (the
    rotations are orthogonal): second and higher derivatives in the keys (`create_graph`) are exact."""
    table, src, crow = ctx.saved_tensors
    return turn_edges(grad, table, src, crow, -ctx.sign, ctx.pairs), None, None, None, None, None, None


turn_edges.register_autograd(_backward, setup_context=_save)
add_turned_edges.register_autograd(_adjoint_backward, setup_context=_save_adjoint)
