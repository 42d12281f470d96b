"""Triton kernels of standard GeoPE's relation with the points' turn folded in (``frame_fold.py`` launches them).

``fused_attention.frame_relation`` is ``R_i^T R_j x_j - q_i (+ delta_ij)`` for query ``i`` and neighbour ``j =
idx[i, j]``. Its unfolded path turns the points first (``P_j = R_j x_j``, ``rotation.apply_shifted``: one launch)
and its kernel turns the gathered ``P_j`` back by the query's ``R_i^T``; its backward sums ``R_i g_ij`` into the
points' rows and turns them by ``R_j^T`` (one launch more). Here every pair is turned by both rotations in the
relation's own kernel, forward and backward: one launch each way, the ``apply_shifted`` launches gone, at the cost
of reading the source point's nine coefficients of every block for every pair (``k`` times per point, not once).

The rotations are the shift tables ``T (5, N, C)`` of ``rotation.rotation_tables``, block diagonal: channel ``c =
3b + d`` of block ``b`` holds ``T_s[c] = R_b[d, d + s - 2]`` (0 where ``d + s - 2`` leaves the block; the last
block may be partial, its channels past ``C`` absent, and the pass-through channels hold the identity). So a
program takes ``BLOCK_M`` queries with all their neighbours and ``BLOCK_B`` blocks, ``(BLOCK_M, BLOCK_K,
BLOCK_B)``, and per block and pair::

    P_d    = sum_e R_j[d, e] x_j[e]           in apply_shifted's order of terms (o = 0, +1, -1, +2, -2), tl.fma
    r_d    = -q_i[d] + sum_e R_i[e, d] P_e    (+ delta)  in the unfolded kernel's order (e = 0, 1, 2)
    gq_i   = -sum_j g_ij
    gx_j  += R_j^T (R_i g_ij)                 atomics, in the accumulation type

The forward is the unfolded path's expression term for term (the terms of other blocks it adds are products by
0), so under Triton's interpreter it gives the unfolded path's bits; the backward turns each pair by ``R_j^T``
before the sum (not the sum after it), within rounding of the unfolded path. Loads are converted to the
accumulation type (float32, or float64 for float64 tables), stores round once. Offsets are int64.

Decorated when imported in the mode ``TRITON_INTERPRET`` asks for then (``INTERPRET``); only the ``tl`` APIs of
Triton 3.6 and newer.
"""
import triton
import triton.language as tl

from pointgeope.model.kernel_choice import current, kernel_module

INTERPRET = current().interpret
_attention = kernel_module("pointgeope.model.triton_attention")        # its tile and sum, in this same mode
_pair_tile, _add = _attention._pair_tile, _attention._add


@triton.jit
def _entry(t_ptr, row, c0, plane, C, mask, one, D: tl.constexpr, E: tl.constexpr):
    """``R[D, E]`` of the blocks starting at channel ``c0`` of table row ``row``: ``T_{E - D}[c0 + D]``; 0 where
    either channel is past ``C`` or ``mask`` is off."""
    inside = mask & (c0 + D < C) & (c0 + E < C)
    return tl.load(t_ptr + (E - D + 2) * plane + row * C + c0 + D, mask=inside, other=0.0) * one


@triton.jit
def _rows(ptr, base, c0, C, mask, one):
    """Components 0, 1, 2 of the blocks at ``base + c0`` (0 past ``C``)."""
    return (tl.load(ptr + base + c0, mask=mask & (c0 < C), other=0.0) * one,
            tl.load(ptr + base + c0 + 1, mask=mask & (c0 + 1 < C), other=0.0) * one,
            tl.load(ptr + base + c0 + 2, mask=mask & (c0 + 2 < C), other=0.0) * one)


@triton.jit
def _back(r, t_ptr, m3, c0, plane, C, q_mask, one, p0, p1, p2, D: tl.constexpr):
    """``r + sum_e R_i[e, D] P_e`` in the order ``e = 0, 1, 2`` (``R_i^T P``, component ``D``)."""
    r += _entry(t_ptr, m3, c0, plane, C, q_mask, one, 0, D) * p0
    r += _entry(t_ptr, m3, c0, plane, C, q_mask, one, 1, D) * p1
    r += _entry(t_ptr, m3, c0, plane, C, q_mask, one, 2, D) * p2
    return r


@triton.jit
def fold_forward(x_ptr, idx_ptr, tables_ptr, q_ptr, delta_ptr, out_ptr, N, K, C, NB, HAS_DELTA: tl.constexpr,
                 F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_B: tl.constexpr):
    """``r = R_i^T R_j x[idx[i, j]] - q_i (+ delta)`` on ``NB = ceil(C / 3)`` blocks (module docstring)."""
    m, b, m3, b3, pairs_in, _, pair, one = _pair_tile(N, K, NB, F64, BLOCK_M, BLOCK_K, BLOCK_B)     # blocks b
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    plane = (m3 * 0 + N) * C                                 # N C, the tables' plane, in int64
    c0 = 3 * b3
    mask, q_mask = pairs_in & (b3 < NB), (m3 < N) & (b3 < NB)
    x0, x1, x2 = _rows(x_ptr, rows * C, c0, C, mask, one)
    p0 = tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 0, 2), x2,
                tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 0, 1), x1,
                       _entry(tables_ptr, rows, c0, plane, C, mask, one, 0, 0) * x0))
    p1 = tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 1, 0), x0,
                tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 1, 2), x2,
                       _entry(tables_ptr, rows, c0, plane, C, mask, one, 1, 1) * x1))
    p2 = tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 2, 0), x0,
                tl.fma(_entry(tables_ptr, rows, c0, plane, C, mask, one, 2, 1), x1,
                       _entry(tables_ptr, rows, c0, plane, C, mask, one, 2, 2) * x2))
    q0, q1, q2 = _rows(q_ptr, m3 * C, c0, C, q_mask, one)
    r0 = _back(-q0, tables_ptr, m3, c0, plane, C, q_mask, one, p0, p1, p2, 0)
    r1 = _back(-q1, tables_ptr, m3, c0, plane, C, q_mask, one, p0, p1, p2, 1)
    r2 = _back(-q2, tables_ptr, m3, c0, plane, C, q_mask, one, p0, p1, p2, 2)
    if HAS_DELTA:
        d0, d1, d2 = _rows(delta_ptr, pair * C, c0, C, mask, one)
        r0, r1, r2 = r0 + d0, r1 + d1, r2 + d2
    out = out_ptr + pair * C + c0
    tl.store(out, r0.to(out_ptr.dtype.element_ty), mask=mask & (c0 < C))
    tl.store(out + 1, r1.to(out_ptr.dtype.element_ty), mask=mask & (c0 + 1 < C))
    tl.store(out + 2, r2.to(out_ptr.dtype.element_ty), mask=mask & (c0 + 2 < C))


@triton.jit
def _turn(t_ptr, row, c0, plane, C, mask, one, g0, g1, g2, D: tl.constexpr):
    """``(R g)_D = sum_e R[D, e] g_e`` in the order ``e = 0, 1, 2``."""
    h = _entry(t_ptr, row, c0, plane, C, mask, one, D, 0) * g0
    h += _entry(t_ptr, row, c0, plane, C, mask, one, D, 1) * g1
    h += _entry(t_ptr, row, c0, plane, C, mask, one, D, 2) * g2
    return h


@triton.jit
def _store_sum(ptr, m3, col, C, value, mask):
    """``ptr[m, col] = -sum_j value`` for the ``(BM, BK, BB)`` tile ``value``, where ``col < C``."""
    tl.store(ptr + m3 * C + col, (-tl.reduce(value, 1, _add)[:, None, :]).to(ptr.dtype.element_ty),
             mask=mask & (col < C))


@triton.jit
def fold_backward(g_ptr, idx_ptr, tables_ptr, gx_ptr, gq_ptr, N, K, C, NB, GRAD_X: tl.constexpr,
                  GRAD_Q: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_B: tl.constexpr):
    """``gq_i = -sum_j g_ij`` and ``gx[idx[i, j]] += R_j^T R_i g_ij`` (atomics) on ``NB`` blocks."""
    m, b, m3, b3, pairs_in, _, pair, one = _pair_tile(N, K, NB, F64, BLOCK_M, BLOCK_K, BLOCK_B)     # blocks b
    c0 = 3 * b3
    mask, q_mask = pairs_in & (b3 < NB), (m3 < N) & (b3 < NB)
    g0, g1, g2 = _rows(g_ptr, pair * C, c0, C, mask, one)
    if GRAD_Q:
        _store_sum(gq_ptr, m3, c0, C, g0, q_mask)
        _store_sum(gq_ptr, m3, c0 + 1, C, g1, q_mask)
        _store_sum(gq_ptr, m3, c0 + 2, C, g2, q_mask)
    if GRAD_X:
        plane = (m3 * 0 + N) * C                             # N C, the tables' plane, in int64
        rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
        h0 = _turn(tables_ptr, m3, c0, plane, C, q_mask, one, g0, g1, g2, 0)          # R_i g
        h1 = _turn(tables_ptr, m3, c0, plane, C, q_mask, one, g0, g1, g2, 1)
        h2 = _turn(tables_ptr, m3, c0, plane, C, q_mask, one, g0, g1, g2, 2)
        base = gx_ptr + rows * C + c0
        for e in tl.static_range(3):                         # (R_j^T h)_e = sum_d R_j[d, e] h_d
            t = _entry(tables_ptr, rows, c0, plane, C, mask, one, 0, e) * h0
            t += _entry(tables_ptr, rows, c0, plane, C, mask, one, 1, e) * h1
            t += _entry(tables_ptr, rows, c0, plane, C, mask, one, 2, e) * h2
            tl.atomic_add(base + e, t.to(gx_ptr.dtype.element_ty), mask=mask & (c0 + e < C))
