"""Triton kernels of Point Transformer's vector attention (``fused_attention.py`` launches them).

For query ``i``, its ``k`` neighbours ``j`` (rows ``idx[i, j]`` of the points), ``C`` channels in ``s`` groups
of ``G = C / s`` (channel ``c = g G + h`` uses weight ``h``)::

    relation   r[i, j, c] = key[idx[i, j], c] - q[i, c] (+ delta[i, j, c])
    frame      r[i, j, c] = sum_o T_{-o}[i, c + o] P[idx[i, j], c + o] - q[i, c] (+ delta)   standard GeoPE
    linear     r[i, j, 3b + d] = (R(k_b d_ij) x[idx[i, j]]_b)_d - q[i, 3b + d] (+ delta)  linear GeoPE
    aggregate  y[i, g G + h] = sum_j p[i, j, h] (v[idx[i, j], g G + h] (+ delta[i, j, g G + h]))
               p[i, j, h] = softmax_j(w[i, j, h])

and their adjoints (``dp = sum_g gy val``, ``dw = p (dp - sum_j p dp)``; the value's gradient ``p gy`` is
added into the rows ``idx[i, j]`` with atomics). A program takes ``BLOCK_M`` queries with all their
neighbours, as a ``(BLOCK_M, BLOCK_K, BLOCK_G)`` (or ``BLOCK_C``) tile; nothing of size ``(N, k, C)`` is
read or written but the inputs and outputs themselves. Loads are converted to the accumulation type
(float32, or float64 for float64 inputs) and stores round once to the output's type. Offsets are int64:
``N k C`` passes 2^31 at 80k points, k = 16, C = 2048.

The kernels are decorated when this module is imported, in the mode ``TRITON_INTERPRET`` asks for then
(``INTERPRET``); ``fused_attention.kernels`` reloads the module when the mode changed since. Only
long-standing ``tl`` APIs (Triton 3.6 and newer): load, store, atomic_add, where, reduce, maximum, exp,
arange, full, static_range. Reductions use ``tl.reduce`` with this module's combine functions and zeros
``tl.full``, not ``tl.sum``, ``tl.max`` or ``tl.zeros``: those are decorated when Triton is imported, so in a
process that imported Triton before setting ``TRITON_INTERPRET`` they would not run in the interpreter.
"""
import triton
import triton.language as tl

from pointgeope.model.kernel_choice import current

INTERPRET = current().interpret     # the project's reading of TRITON_INTERPRET (Triton reads it itself too)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


if INTERPRET:   # the interpreter reduces with numpy when it recognises Triton's own combine functions
    _add, _maximum = tl.standard._sum_combine, tl.standard._elementwise_max


@triton.jit
def _neighbour_softmax(w_ptr, idx_ptr, m, N, K, G, F64: tl.constexpr, BLOCK_K: tl.constexpr,
                       BLOCK_G: tl.constexpr):
    """The attention weights of points ``m`` (BLOCK_M,): ``p[m, j, h] = softmax_j w[m, j, h]`` in the
    accumulation type, shape (BLOCK_M, BLOCK_K, BLOCK_G), 0 outside the ``N x K x G`` pairs; with the
    neighbour rows ``idx[m, j]`` (BLOCK_M, BLOCK_K, 1) int64, the pair numbers ``m K + j``, the mask of
    valid (pair, h) and ``one``, the accumulation type's 1 (``load * one`` converts)."""
    one = tl.full([1, 1, 1], 1.0, tl.float64 if F64 else tl.float32)
    m3 = m[:, None, None]
    j3 = tl.arange(0, BLOCK_K)[None, :, None]
    h3 = tl.arange(0, BLOCK_G)[None, None, :]
    pairs_in = (m3 < N) & (j3 < K)
    mask = pairs_in & (h3 < G)
    pair = m3 * K + j3
    logits = tl.load(w_ptr + pair * G + h3, mask=mask, other=0.0)
    logits = tl.where(mask, logits * one, -1.0e30)
    e = tl.where(mask, tl.exp(logits - tl.reduce(logits, 1, _maximum)[:, None, :]), 0.0)
    total = tl.reduce(e, 1, _add)
    p = e / tl.where(total == 0, 1.0, total)[:, None, :]     # 0: masked lanes only; a NaN sum makes p NaN, as torch's
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    return p, rows, pair, mask, one


@triton.jit
def aggregate_forward(w_ptr, v_ptr, idx_ptr, delta_ptr, y_ptr, N, K, C, G, S: tl.constexpr,
                      HAS_DELTA: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_K: tl.constexpr, BLOCK_G: tl.constexpr):
    m = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    h = tl.arange(0, BLOCK_G)
    p, rows, pair, mask, one = _neighbour_softmax(w_ptr, idx_ptr, m, N, K, G, F64, BLOCK_K, BLOCK_G)
    h3 = h[None, None, :]
    out_mask = (m[:, None] < N) & (h[None, :] < G)
    for g in range(S):
        col = g * G + h3
        val = tl.load(v_ptr + rows * C + col, mask=mask, other=0.0) * one
        if HAS_DELTA:
            val += tl.load(delta_ptr + pair * C + col, mask=mask, other=0.0) * one
        y = tl.reduce(p * val, 1, _add)
        tl.store(y_ptr + m[:, None] * C + g * G + h[None, :], y.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def aggregate_backward(w_ptr, v_ptr, idx_ptr, delta_ptr, gy_ptr, gw_ptr, gv_ptr, gdelta_ptr, p_ptr, N, K, C, G,
                       S: tl.constexpr, HAS_DELTA: tl.constexpr, GRAD_V: tl.constexpr,
                       GRAD_DELTA: tl.constexpr, STORE_P: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_K: tl.constexpr, BLOCK_G: tl.constexpr):
    """``gw``, ``gdelta = p gy``, and ``gv[idx[i, j]] += p gy`` with atomics (``GRAD_V``) or the weights ``p``
    stored ``(N, K, G)`` for ``triton_gather.aggregate_gather`` to sum by source point (``STORE_P``)."""
    m = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    p, rows, pair, mask, one = _neighbour_softmax(w_ptr, idx_ptr, m, N, K, G, F64, BLOCK_K, BLOCK_G)
    m3 = m[:, None, None]
    h3 = tl.arange(0, BLOCK_G)[None, None, :]
    if STORE_P:
        tl.store(p_ptr + pair * G + h3, p.to(p_ptr.dtype.element_ty), mask=mask)
    dp = p * 0.0
    for g in range(S):
        col = g * G + h3
        gy = tl.load(gy_ptr + m3 * C + col, mask=(m3 < N) & (h3 < G), other=0.0) * one
        val = tl.load(v_ptr + rows * C + col, mask=mask, other=0.0) * one
        if HAS_DELTA:
            val += tl.load(delta_ptr + pair * C + col, mask=mask, other=0.0) * one
        dp += gy * val
        gval = p * gy
        if GRAD_DELTA:
            tl.store(gdelta_ptr + pair * C + col, gval.to(gdelta_ptr.dtype.element_ty), mask=mask)
        if GRAD_V:
            tl.atomic_add(gv_ptr + rows * C + col, gval.to(gv_ptr.dtype.element_ty), mask=mask)
    gw = p * (dp - tl.reduce(p * dp, 1, _add)[:, None, :])
    tl.store(gw_ptr + pair * G + h3, gw.to(gw_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pair_tile(N, K, C, F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
               BLOCK_C: tl.constexpr):
    """This program's tile of (point, neighbour, channel) triples: points ``m`` (BLOCK_M,) int64 of
    program 0's axis, channels ``c`` (BLOCK_C,) of axis 1, their 3D forms ``m3 (BLOCK_M, 1, 1)`` and
    ``c3 (1, 1, BLOCK_C)``, the masks of valid pairs ``(m, j)`` and triples, the pair numbers ``m K + j``
    and ``one``, the accumulation type's 1 (``load * one`` converts)."""
    m = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    one = tl.full([1, 1, 1], 1.0, tl.float64 if F64 else tl.float32)
    m3 = m[:, None, None]
    j3 = tl.arange(0, BLOCK_K)[None, :, None]
    c3 = c[None, None, :]
    pairs_in = (m3 < N) & (j3 < K)
    return m, c, m3, c3, pairs_in, pairs_in & (c3 < C), m3 * K + j3, one


@triton.jit
def relation_forward(key_ptr, idx_ptr, q_ptr, delta_ptr, out_ptr, N, K, C, HAS_DELTA: tl.constexpr,
                     F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    m, c, m3, c3, pairs_in, mask, pair, one = _pair_tile(N, K, C, F64, BLOCK_M, BLOCK_K, BLOCK_C)
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    r = tl.load(key_ptr + rows * C + c3, mask=mask, other=0.0) * one
    r -= tl.load(q_ptr + m3 * C + c3, mask=(m3 < N) & (c3 < C), other=0.0) * one
    if HAS_DELTA:
        r += tl.load(delta_ptr + pair * C + c3, mask=mask, other=0.0) * one
    tl.store(out_ptr + pair * C + c3, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def relation_backward(g_ptr, idx_ptr, gkey_ptr, gq_ptr, N, K, C, GRAD_KEY: tl.constexpr, GRAD_Q: tl.constexpr,
                      F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    m, c, m3, c3, pairs_in, mask, pair, one = _pair_tile(N, K, C, F64, BLOCK_M, BLOCK_K, BLOCK_C)
    g = tl.load(g_ptr + pair * C + c3, mask=mask, other=0.0) * one
    if GRAD_Q:
        gq = -tl.reduce(g, 1, _add)
        tl.store(gq_ptr + m[:, None] * C + c[None, :], gq.to(gq_ptr.dtype.element_ty),
                 mask=(m[:, None] < N) & (c[None, :] < C))
    if GRAD_KEY:
        rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
        tl.atomic_add(gkey_ptr + rows * C + c3, g.to(gkey_ptr.dtype.element_ty), mask=mask)


@triton.jit
def frame_forward(points_ptr, idx_ptr, tables_ptr, q_ptr, delta_ptr, out_ptr, N, K, C, HAS_DELTA: tl.constexpr,
                  F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    """Standard GeoPE's relation ``sum_o T_{-o}[i, c + o] P[idx[i, j], c + o] - q[i, c] (+ delta)``: ``P`` the
    points turned by their own rotations ``R_j x_j``, ``T (5, N, C)`` the queries' shift tables (``R_i^T``)."""
    m, c, m3, c3, pairs_in, mask, pair, one = _pair_tile(N, K, C, F64, BLOCK_M, BLOCK_K, BLOCK_C)
    plane = (m3 * 0 + N) * C                             # N C, the tables' plane, in int64
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    r = tl.load(q_ptr + m3 * C + c3, mask=(m3 < N) & (c3 < C), other=0.0) * -one
    for shift in tl.static_range(5):                     # o = shift - 2 reads channel c + o with T_{-o}
        col = c3 + (shift - 2)
        inside = (col >= 0) & (col < C)
        t = tl.load(tables_ptr + (m3 * C + col + (4 - shift) * plane), mask=(m3 < N) & inside, other=0.0) * one
        r += t * tl.load(points_ptr + rows * C + col, mask=pairs_in & inside, other=0.0)
    if HAS_DELTA:
        r += tl.load(delta_ptr + pair * C + c3, mask=mask, other=0.0) * one
    tl.store(out_ptr + pair * C + c3, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def frame_backward(g_ptr, idx_ptr, tables_ptr, gpoints_ptr, gq_ptr, turned_ptr, N, K, C, GRAD_POINTS: tl.constexpr,
                   GRAD_Q: tl.constexpr, STORE_TURNED: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr):
    """``gP[idx[i, j], c] += sum_o T_o[i, c] g[i, j, c + o]`` (``R_i g``, atomics; or with ``STORE_TURNED`` the
    turned pairs stored ``(N, K, C)``, for ``triton_gather.relation_gather`` to sum) and ``gq[i] = -sum_j g[i, j]``."""
    m, c, m3, c3, pairs_in, mask, pair, one = _pair_tile(N, K, C, F64, BLOCK_M, BLOCK_K, BLOCK_C)
    if GRAD_Q:
        g = tl.load(g_ptr + pair * C + c3, mask=mask, other=0.0) * one
        gq = -tl.reduce(g, 1, _add)
        tl.store(gq_ptr + m[:, None] * C + c[None, :], gq.to(gq_ptr.dtype.element_ty),
                 mask=(m[:, None] < N) & (c[None, :] < C))
    if GRAD_POINTS or STORE_TURNED:
        plane = (m3 * 0 + N) * C                         # N C, the tables' plane, in int64
        turned = tl.full([BLOCK_M, BLOCK_K, BLOCK_C], 0.0, tl.float64 if F64 else tl.float32)
        for shift in tl.static_range(5):                 # o = shift - 2
            col = c3 + (shift - 2)
            inside = (col >= 0) & (col < C)
            t = tl.load(tables_ptr + (m3 * C + c3 + shift * plane), mask=(m3 < N) & (c3 < C), other=0.0) * one
            turned += t * tl.load(g_ptr + pair * C + col, mask=pairs_in & inside, other=0.0)
        if STORE_TURNED:
            tl.store(turned_ptr + pair * C + c3, turned.to(turned_ptr.dtype.element_ty), mask=mask)
        else:
            rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
            tl.atomic_add(gpoints_ptr + rows * C + c3, turned.to(gpoints_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _linear_store(r, m3, pair, col, mask, q_ptr, delta_ptr, out_ptr, C, HAS_DELTA: tl.constexpr, one):
    """``out[pair, col] = r - q[m, col] (+ delta[pair, col])`` for one component tile of linear GeoPE's blocks
    (``r`` the rotated component) or its pass-through channels (``r`` the neighbour's ``x``)."""
    r -= tl.load(q_ptr + m3 * C + col, mask=mask, other=0.0) * one
    if HAS_DELTA:
        r += tl.load(delta_ptr + pair * C + col, mask=mask, other=0.0) * one
    tl.store(out_ptr + pair * C + col, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rodrigues_terms(dx, dy, dz, scale):
    """Rodrigues' terms ``(u_x, u_y, u_z, cos(phi), sin(phi), 1 - cos(phi))`` of the rotation by ``scale * d``:
    ``u = d / |d|`` (0 at ``d = 0``) and ``phi = |d| scale``. The in-kernel copy of the torch owner
    ``pointgeope.geope.rotation_terms``, which it must equal (``tests/model/test_rodrigues_terms.py``)."""
    radius = tl.sqrt(dx * dx + dy * dy + dz * dz)
    inv = tl.where(radius > 0, 1.0 / tl.where(radius > 0, radius, 1.0), 0.0)          # u = 0 at d = 0
    phi = radius * scale
    cos = tl.cos(phi)
    return dx * inv, dy * inv, dz * inv, cos, tl.sin(phi), 1.0 - cos


@triton.jit
def linear_forward(x_ptr, idx_ptr, disp_ptr, scale_ptr, q_ptr, delta_ptr, out_ptr, N, K, C, NB,
                   HAS_DELTA: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                   BLOCK_B: tl.constexpr):
    """Linear GeoPE's relation ``R(k_b d_ij) x[idx[i, j]]_b - q_i (+ delta)`` per block ``b`` (Rodrigues), and
    ``x - q (+ delta)`` on the pass-through channels ``3 NB .. C - 1`` (by the programs of block tile 0)."""
    m, b, m3, b3, pairs_in, _, pair, one = _pair_tile(N, K, NB, F64, BLOCK_M, BLOCK_K, BLOCK_B)  # blocks b
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    dx = tl.load(disp_ptr + pair * 3, mask=pairs_in, other=0.0) * one
    dy = tl.load(disp_ptr + pair * 3 + 1, mask=pairs_in, other=0.0) * one
    dz = tl.load(disp_ptr + pair * 3 + 2, mask=pairs_in, other=0.0) * one
    scale = tl.load(scale_ptr + b3, mask=b3 < NB, other=0.0) * one
    ux, uy, uz, cos, sin, versine = _rodrigues_terms(dx, dy, dz, scale)
    mask = pairs_in & (b3 < NB)
    vx = tl.load(x_ptr + rows * C + 3 * b3, mask=mask, other=0.0) * one
    vy = tl.load(x_ptr + rows * C + 3 * b3 + 1, mask=mask, other=0.0) * one
    vz = tl.load(x_ptr + rows * C + 3 * b3 + 2, mask=mask, other=0.0) * one
    along = versine * (ux * vx + uy * vy + uz * vz)
    r = cos * vx + sin * (uy * vz - uz * vy) + along * ux
    _linear_store(r, m3, pair, 3 * b3, mask, q_ptr, delta_ptr, out_ptr, C, HAS_DELTA, one)
    r = cos * vy + sin * (uz * vx - ux * vz) + along * uy
    _linear_store(r, m3, pair, 3 * b3 + 1, mask, q_ptr, delta_ptr, out_ptr, C, HAS_DELTA, one)
    r = cos * vz + sin * (ux * vy - uy * vx) + along * uz
    _linear_store(r, m3, pair, 3 * b3 + 2, mask, q_ptr, delta_ptr, out_ptr, C, HAS_DELTA, one)
    p3 = 3 * NB + tl.arange(0, 4)[None, None, :]                                     # pass-through channels
    limit = C * (1 - tl.minimum(tl.program_id(1), 1))                               # C in block tile 0, else 0
    rest = pairs_in & (p3 < limit)
    r = tl.load(x_ptr + rows * C + p3, mask=rest, other=0.0) * one
    _linear_store(r, m3, pair, p3, rest, q_ptr, delta_ptr, out_ptr, C, HAS_DELTA, one)


@triton.jit
def linear_backward(g_ptr, idx_ptr, disp_ptr, scale_ptr, gx_ptr, gq_ptr, N, K, C, NB, GRAD_X: tl.constexpr,
                    GRAD_Q: tl.constexpr, F64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                    BLOCK_B: tl.constexpr):
    """``gx[idx[i, j]] += R(k_b d_ij)^T g_ij`` (Rodrigues with ``-sin``; atomics) and ``gq_i = -sum_j g_ij``,
    on the blocks and (programs of block tile 0) the pass-through channels."""
    m, b, m3, b3, pairs_in, _, pair, one = _pair_tile(N, K, NB, F64, BLOCK_M, BLOCK_K, BLOCK_B)  # blocks b
    rows = tl.load(idx_ptr + pair, mask=pairs_in, other=0).to(tl.int64)
    mask = pairs_in & (b3 < NB)
    gx_ = tl.load(g_ptr + pair * C + 3 * b3, mask=mask, other=0.0) * one
    gy_ = tl.load(g_ptr + pair * C + 3 * b3 + 1, mask=mask, other=0.0) * one
    gz_ = tl.load(g_ptr + pair * C + 3 * b3 + 2, mask=mask, other=0.0) * one
    p3 = 3 * NB + tl.arange(0, 4)[None, None, :]                                     # pass-through channels
    limit = C * (1 - tl.minimum(tl.program_id(1), 1))                               # C in block tile 0, else 0
    rest = pairs_in & (p3 < limit)
    gp = tl.load(g_ptr + pair * C + p3, mask=rest, other=0.0) * one
    if GRAD_Q:
        q_mask = (m3 < N) & (b3 < NB)
        _store_rows(gq_ptr, m3, C, 3 * b3, -tl.reduce(gx_, 1, _add)[:, None, :], q_mask)
        _store_rows(gq_ptr, m3, C, 3 * b3 + 1, -tl.reduce(gy_, 1, _add)[:, None, :], q_mask)
        _store_rows(gq_ptr, m3, C, 3 * b3 + 2, -tl.reduce(gz_, 1, _add)[:, None, :], q_mask)
        _store_rows(gq_ptr, m3, C, p3, -tl.reduce(gp, 1, _add)[:, None, :], (m3 < N) & (p3 < limit))
    if GRAD_X:
        dx = tl.load(disp_ptr + pair * 3, mask=pairs_in, other=0.0) * one
        dy = tl.load(disp_ptr + pair * 3 + 1, mask=pairs_in, other=0.0) * one
        dz = tl.load(disp_ptr + pair * 3 + 2, mask=pairs_in, other=0.0) * one
        ux, uy, uz, cos, sin, versine = _rodrigues_terms(dx, dy, dz,
                                                         tl.load(scale_ptr + b3, mask=b3 < NB, other=0.0) * one)
        sin = -sin                                                                   # R^T = R(-phi)
        along = versine * (ux * gx_ + uy * gy_ + uz * gz_)
        base = gx_ptr + rows * C
        tl.atomic_add(base + 3 * b3, (cos * gx_ + sin * (uy * gz_ - uz * gy_) + along * ux).to(gx_ptr.dtype.element_ty),
                      mask=mask)
        tl.atomic_add(base + 3 * b3 + 1, (cos * gy_ + sin * (uz * gx_ - ux * gz_) + along * uy).to(
            gx_ptr.dtype.element_ty), mask=mask)
        tl.atomic_add(base + 3 * b3 + 2, (cos * gz_ + sin * (ux * gy_ - uy * gx_) + along * uz).to(
            gx_ptr.dtype.element_ty), mask=mask)
        tl.atomic_add(base + p3, gp.to(gx_ptr.dtype.element_ty), mask=rest)


@triton.jit
def _store_rows(ptr, m3, C, col, value, mask):
    """``ptr[m, col] = value`` for per-query tiles ``(BM, 1, width)``."""
    tl.store(ptr + m3 * C + col, value.to(ptr.dtype.element_ty), mask=mask)
