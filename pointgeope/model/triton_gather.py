"""Triton kernels of the fused relations' backward summed by source point, without atomics (``gather_backward.py``
launches them).

The relations and the aggregation read row ``idx[i, j]`` of a source (the keys, GeoPE's turned points, the
values) for query ``i`` and neighbour ``j``; their backward sums each pair's gradient into that row::

    relation   gkey[p, c] = sum_{(i, j): idx[i, j] = p} g[i, j, c]
    frame      gP[p, c]   = sum_{(i, j): idx[i, j] = p} sum_o T_o[i, c] g[i, j, c + o]     (R_i g_ij, standard GeoPE)
    aggregate  gv[p, c]   = sum_{(i, j): idx[i, j] = p} softmax_j(w_i)[j, c mod G] gy[i, c]     (the values)

``triton_attention``'s kernels take a tile of queries and add into the rows with atomics (the order of the sums
is the GPU's). Here a program owns a tile of ``BLOCK_P`` source points (and ``BLOCK_C`` channels) and reads
their pairs from the kNN lists' transpose (``gather_backward.transpose``): ``order`` the pair numbers
``i K + j`` sorted by source row (stably: by pair number within a row; int32 below 2^31 pairs, so that the
query ``i = pair // K`` is an int32 division, by the constant ``K``), ``starts (R + 1,)`` where each row's
pairs begin. It walks its rows' pairs ``BLOCK_T`` at a time, as a ``(BLOCK_P, BLOCK_T, BLOCK_C)`` tile, sums
each chunk over the pairs and adds it to a ``(BLOCK_P, BLOCK_C)`` accumulator in registers, and stores every
row once (0 for a point that is nobody's neighbour). The order of the sums is fixed by ``order`` and the
tile sizes: the result is the same bit for bit in every run. Loads are converted to the accumulation type
(float32, or float64 for float64 inputs), stores round once to the output's type.

Decorated when imported in the mode ``TRITON_INTERPRET`` asks for then (``INTERPRET``), reloaded by
``kernel_choice.kernel_module`` (``gather_backward`` launches through it) when it changed; only the ``tl``
APIs of Triton 3.6 and newer, and the combine functions of ``triton_attention``'s docstring (same reason).
"""
import triton
import triton.language as tl

from pointgeope.model.kernel_choice import current, kernel_module

INTERPRET = current().interpret
# the reductions' combine functions, from their owner decorated in this same mode (reloaded if need be)
_add, _maximum = (getattr(kernel_module("pointgeope.model.triton_attention"), f) for f in ("_add", "_maximum"))


@triton.jit
def _source_tile(starts_ptr, R, BLOCK_P: tl.constexpr):
    """This program's source rows ``p`` (BLOCK_P,) int64, where their pairs start in ``order`` and how many
    they have (0 past ``R``), and the largest count of the tile (how many pairs the program walks)."""
    p = (tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    start = tl.load(starts_ptr + p, mask=p < R, other=0).to(tl.int64)
    count = tl.load(starts_ptr + p + 1, mask=p < R, other=0).to(tl.int64) - start
    return p, start, count, tl.reduce(count, 0, _maximum)


@triton.jit
def _pair_block(order_ptr, start, count, t0, t3, K: tl.constexpr):
    """The tile's pairs ``t0 .. t0 + BLOCK_T - 1`` of each source row: whether they exist ``live``, their pair
    numbers ``i K + j`` and queries ``i`` (int64; divided in ``order``'s int32), all ``(BLOCK_P, BLOCK_T, 1)``."""
    live = (t0 + t3) < count[:, None, None]
    pair = tl.load(order_ptr + start[:, None, None] + t0 + t3, mask=live, other=0)
    return live, pair.to(tl.int64), (pair // K).to(tl.int64)


@triton.jit
def relation_gather(g_ptr, order_ptr, starts_ptr, gkey_ptr, R, C, F64: tl.constexpr, BLOCK_P: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """``gkey[p, c] = sum_{(i, j): idx[i, j] = p} g[i, j, c]`` for rows ``p < R``: ``g (N, K, C)``."""
    p, start, count, most = _source_tile(starts_ptr, R, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c3 = c[None, None, :]
    t3 = tl.arange(0, BLOCK_T)[None, :, None]
    acc = tl.full([BLOCK_P, BLOCK_C], 0.0, tl.float64 if F64 else tl.float32)
    one = tl.full([1, 1, 1], 1.0, tl.float64 if F64 else tl.float32)
    t0 = 0
    while t0 < most:                  # (not range(0, most): Triton 3.6's interpreter cannot take a reduced bound)
        live = (t0 + t3) < count[:, None, None]                                     # (BLOCK_P, BLOCK_T, 1)
        pair = tl.load(order_ptr + start[:, None, None] + t0 + t3, mask=live, other=0).to(tl.int64)
        acc += tl.reduce(tl.load(g_ptr + pair * C + c3, mask=live & (c3 < C), other=0.0) * one, 1, _add)
        t0 += BLOCK_T
    tl.store(gkey_ptr + p[:, None] * C + c[None, :], acc.to(gkey_ptr.dtype.element_ty),
             mask=(p[:, None] < R) & (c[None, :] < C))


@triton.jit
def frame_gather(g_ptr, order_ptr, starts_ptr, tables_ptr, gpoints_ptr, N, K: tl.constexpr, C, F64: tl.constexpr,
                 BLOCK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """``gP[p, c] = sum_{(i, j): idx[i, j] = p} sum_o T_o[i, c] g[i, j, c + o]`` (``R_i g_ij``, the pair's
    query ``i = pair // K``) for the ``N`` points: ``g (N, K, C)``, ``T (5, N, C)`` the shift tables."""
    p, start, count, most = _source_tile(starts_ptr, N, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c3 = c[None, None, :]
    t3 = tl.arange(0, BLOCK_T)[None, :, None]
    plane = (p[:, None, None] * 0 + N) * C                                          # N C, in int64
    acc = tl.full([BLOCK_P, BLOCK_C], 0.0, tl.float64 if F64 else tl.float32)
    one = tl.full([1, 1, 1], 1.0, tl.float64 if F64 else tl.float32)
    t0 = 0
    while t0 < most:                                                                 # (as relation_gather's)
        live, pair, query = _pair_block(order_ptr, start, count, t0, t3, K)
        turned = tl.full([BLOCK_P, BLOCK_T, BLOCK_C], 0.0, tl.float64 if F64 else tl.float32)
        for shift in tl.static_range(5):                                             # o = shift - 2
            col = c3 + (shift - 2)
            inside = (col >= 0) & (col < C)
            t = tl.load(tables_ptr + (query * C + c3 + shift * plane), mask=live & (c3 < C), other=0.0) * one
            turned += t * tl.load(g_ptr + pair * C + col, mask=live & inside, other=0.0)
        acc += tl.reduce(turned, 1, _add)
        t0 += BLOCK_T
    tl.store(gpoints_ptr + p[:, None] * C + c[None, :], acc.to(gpoints_ptr.dtype.element_ty),
             mask=(p[:, None] < N) & (c[None, :] < C))


@triton.jit
def aggregate_gather(p_ptr, gy_ptr, order_ptr, starts_ptr, gv_ptr, R, K: tl.constexpr, C, G, F64: tl.constexpr,
                     BLOCK_P: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """The aggregation's value gradient ``gv[r, c] = sum_{(i, j): idx[i, j] = r} p[i, j, c mod G] gy[i, c]``
    for rows ``r < R``: the weights ``p (N, K, G)`` (``aggregate_backward``'s ``STORE_P``), ``gy (N, C)``."""
    rows, start, count, most = _source_tile(starts_ptr, R, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c3 = c[None, None, :]
    h3 = (c % G)[None, None, :]                                                      # the channel's weight
    t3 = tl.arange(0, BLOCK_T)[None, :, None]
    acc = tl.full([BLOCK_P, BLOCK_C], 0.0, tl.float64 if F64 else tl.float32)
    one = tl.full([1, 1, 1], 1.0, tl.float64 if F64 else tl.float32)
    t0 = 0
    while t0 < most:                                                                 # (as relation_gather's)
        live, pair, query = _pair_block(order_ptr, start, count, t0, t3, K)
        inside = live & (c3 < C)
        weight = tl.load(p_ptr + pair * G + h3, mask=inside, other=0.0) * one
        acc += tl.reduce(weight * tl.load(gy_ptr + query * C + c3, mask=inside, other=0.0), 1, _add)
        t0 += BLOCK_T
    tl.store(gv_ptr + rows[:, None] * C + c[None, :], acc.to(gv_ptr.dtype.element_ty),
             mask=(rows[:, None] < R) & (c[None, :] < C))
