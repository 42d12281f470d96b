"""Triton kernel of standard GeoPE's rotation by shift tables (``shifted_kernel.py`` launches it).

``rotation.apply_shifted`` turns every block of channel rows by its point's rotation ``R`` with five multiply-adds
over whole rows (``rotation.shift_tables``: ``T_o[c] = R_b[d, d + o]`` for channel ``c = 3b + d``)::

    out[c] = sum_o T_o[c] x[c + o]              (- m[c])     R x
    out[c] = sum_o T_{-o}[c + o] x[c + o]       (- m[c])     R^T x   (``TRANSPOSE``)

over ``o = -2 .. 2`` (a term whose channel ``c + o`` leaves ``0 .. C-1`` is not added), as a product and four
``addcmul_`` on torch's path: five launches a call on a GPU, twice a GeoPE layer (the points turned before the
relation's kernel, and back in its backward). Here it is one launch. A program takes ``BLOCK_R`` rows and
``BLOCK_C`` channels of the output; rows are the broadcast of up to three leading dimensions ``(L0, L1, L2)``,
each tensor read through its own strides (0 where it broadcasts: the tables ``(5, N, 1, C)`` of the queries over
their ``(N, k, C)`` pairs). The terms are added in torch's order (the product of ``o = 0``, or its fused
multiply-add onto ``-m`` where there is one; then ``o = +1, -1, +2, -2``), each a fused multiply-add (``tl.fma``:
one rounding, as torch's ``addcmul`` on the CPU, measured) in the accumulation type (float32, or float64 for
float64 tables): the same expression as torch's, so the same bits as torch's CPU path where the interpreter's fma
rounds once (Triton 3.9's; older interpreters round the product, then the sum: within one rounding of it). Loads are
converted to the accumulation type, the store rounds once to the output's type. Offsets are int64.

Decorated when imported in the mode ``TRITON_INTERPRET`` asks for then (``INTERPRET``), reloaded by
``kernel_choice.kernel_module`` when it changed; only the ``tl`` APIs of Triton 3.6 and newer.
"""
import triton
import triton.language as tl

from pointgeope.model.kernel_choice import current, kernel_module

INTERPRET = current().interpret
# Rodrigues' terms: the in-kernel copy of geope.rotation_terms, from its owner decorated in this same mode
_rodrigues_terms = kernel_module("pointgeope.model.triton_attention")._rodrigues_terms


@triton.jit
def _term(acc, x_ptr, t_ptr, xrow, trow, plane, c, live, C, xsc, tsc, one, SHIFT: tl.constexpr,
          OFFSET: tl.constexpr, TABLE_AT_SOURCE: tl.constexpr):
    """``acc + T_SHIFT[c'] x[c + OFFSET]`` where channel ``c + OFFSET`` is inside the row, with ``c' = c +
    OFFSET`` (``TABLE_AT_SOURCE``: ``R^T``) or ``c``; ``acc`` unchanged elsewhere."""
    src = c + OFFSET
    inside = live & (src >= 0) & (src < C)
    at = src if TABLE_AT_SOURCE else c
    t = tl.load(t_ptr + trow + SHIFT * plane + at * tsc, mask=inside, other=0.0) * one
    x = tl.load(x_ptr + xrow + src * xsc, mask=inside, other=0.0) * one
    return tl.where(inside, tl.fma(t, x, acc), acc)


@triton.jit
def shifted(x_ptr, t_ptr, m_ptr, out_ptr, M, L1, L2, C,
            xs0, xs1, xs2, xsc, ts0, ts1, ts2, tsc, tplane, ms0, ms1, ms2, msc, os0, os1, os2, osc,
            HAS_MINUS: tl.constexpr, TRANSPOSE: tl.constexpr, F64: tl.constexpr, BLOCK_R: tl.constexpr,
            BLOCK_C: tl.constexpr):
    """``out = R x (- m)`` (``R^T x`` with ``TRANSPOSE``) over ``M = L0 L1 L2`` rows of ``C`` channels (module
    docstring); ``*s0, *s1, *s2, *sc``: each tensor's strides of the three row dimensions and the channels,
    ``tplane`` the tables' stride between shifts."""
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)[None, :]
    i2, i1, i0 = r % L2, (r // L2) % L1, r // (L2 * L1)
    xrow, trow = i0 * xs0 + i1 * xs1 + i2 * xs2, i0 * ts0 + i1 * ts1 + i2 * ts2
    live = (r < M) & (c < C)
    one = tl.full([1, 1], 1.0, tl.float64 if F64 else tl.float32)
    t = tl.load(t_ptr + trow + 2 * tplane + c * tsc, mask=live, other=0.0) * one
    x = tl.load(x_ptr + xrow + c * xsc, mask=live, other=0.0) * one
    if HAS_MINUS:
        acc = tl.fma(t, x, -(tl.load(m_ptr + i0 * ms0 + i1 * ms1 + i2 * ms2 + c * msc, mask=live, other=0.0) * one))
    else:
        acc = t * x
    for o in tl.static_range(1, 3):
        if TRANSPOSE:      # R^T: T_{-o}[c + o] x[c + o], then T_{+o}[c - o] x[c - o]
            acc = _term(acc, x_ptr, t_ptr, xrow, trow, tplane, c, live, C, xsc, tsc, one, 2 - o, o, True)
            acc = _term(acc, x_ptr, t_ptr, xrow, trow, tplane, c, live, C, xsc, tsc, one, 2 + o, -o, True)
        else:              # R: T_{+o}[c] x[c + o], then T_{-o}[c] x[c - o]
            acc = _term(acc, x_ptr, t_ptr, xrow, trow, tplane, c, live, C, xsc, tsc, one, 2 + o, o, False)
            acc = _term(acc, x_ptr, t_ptr, xrow, trow, tplane, c, live, C, xsc, tsc, one, 2 - o, -o, False)
    tl.store(out_ptr + i0 * os0 + i1 * os1 + i2 * os2 + c * osc, acc.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _component(ux, uy, uz, axis):
    """``u_axis`` of the axis ``(ux, uy, uz)``, ``axis`` a tensor of 0, 1, 2 per channel."""
    return tl.where(axis == 0, ux, tl.where(axis == 1, uy, uz))


@triton.jit
def tables(pos_ptr, scale_ptr, out_ptr, N, C, NB, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``rotation.rotation_tables`` of ``pos (N, 3)`` and ``block_scale (NB,)`` into ``out (5, N, C)``: for channel
    ``c = 3b + d`` of block ``b < NB``, table ``s`` holds ``R_b[d, e]`` with ``e = d + s - 2`` (0 where ``e``
    leaves the block), ``R = cos I + sin [u]_x + versine u u^T`` from Rodrigues' terms of ``k_b p``
    (``triton_attention._rodrigues_terms``); the pass-through channels ``c >= 3 NB`` hold 1 on table 2, else 0.
    Entries by torch's expressions: ``fma(versine, u_d u_d, cos)`` on the diagonal, ``fma(+-sin, u_f, versine
    u_d u_e)`` off it (``f`` the third axis)."""
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)[None, :]
    live = (r < N) & (c < C)
    one = tl.full([1, 1], 1.0, tl.float64 if F64 else tl.float32)
    px = tl.load(pos_ptr + r * 3, mask=r < N, other=0.0) * one
    py = tl.load(pos_ptr + r * 3 + 1, mask=r < N, other=0.0) * one
    pz = tl.load(pos_ptr + r * 3 + 2, mask=r < N, other=0.0) * one
    plane = (tl.program_id(0).to(tl.int64) * 0 + N) * C        # N C in int64: 4 N C passes 2^31 at N C = 2^29
    b, d = c // 3, c % 3
    in_block = b < NB
    scale = tl.load(scale_ptr + b, mask=in_block & (c < C), other=0.0) * one
    ux, uy, uz, cos, sin, versine = _rodrigues_terms(px, py, pz, scale)
    ud = _component(ux, uy, uz, d)
    for s in tl.static_range(5):
        e = d + (s - 2)
        uu = ud * _component(ux, uy, uz, e)
        right = ((d == 1) & (e == 0)) | ((d == 2) & (e == 1)) | ((d == 0) & (e == 2))     # [u]_x[d, e] = +u_f
        turn = tl.where(right, sin, -sin)
        entry = tl.where(e == d, tl.fma(versine, uu, cos), tl.fma(turn, _component(ux, uy, uz, 3 - d - e),
                                                                  versine * uu))
        rest = tl.where(in_block, 0.0 * one, (1.0 if s == 2 else 0.0) * one)                # pass-through
        value = tl.where(in_block & (e >= 0) & (e < 3), entry, rest)
        tl.store(out_ptr + s * plane + r * C + c, value.to(out_ptr.dtype.element_ty), mask=live)
