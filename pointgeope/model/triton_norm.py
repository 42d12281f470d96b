"""Triton kernels of batch norm, with its ReLU or without, over the rows of ``x (R, C)`` (``norm.py`` launches them).

Per channel ``c``, over the ``R`` rows (the points ``N``, or the pairs ``N k`` of the attention's MLPs)::

    mean_c = sum_r x[r, c] / R              var_c = sum_r (x[r, c] - mean_c)^2 / R        (biased)
    xhat   = (x - mean_c) invstd_c          invstd_c = 1 / sqrt(var_c + eps)
    y      = max(0, x scale_c + shift_c)    scale_c = w_c invstd_c,  shift_c = b_c - mean_c scale_c
                                            (``RELU``; without it ``y = x scale_c + shift_c``)
    y      = max(0, x scale_c + shift_c + identity)       (``RESIDUAL``, :func:`normalize` only: PTv1's block tail)

and the adjoint, with ``gm = g [not x scale + shift <= 0]`` (the ReLU's mask, torch's: NaN passes ``g``; ``gm = g``
without ``RELU``; with ``RESIDUAL`` the mask of the tail's saved output, ``gm = g [not y <= 0]``, and
:func:`grad_input` stores ``gm``, the identity's gradient)::

    db_c = sum_r gm                         dw_c = sum_r gm xhat
    dx   = scale_c (gm - db_c / R - xhat dw_c / R)     (batch statistics; with fixed ones dx = scale_c gm)

Statistics and sums are kept in float32 (float64 for float64 inputs) whatever the input's type (bfloat16
reads half the bytes). The reductions are deterministic, without float atomics, in one launch each:
program ``(t, b)`` of :func:`statistics` (and :func:`grad_sums`) reduces its own ``ROWS`` rows of channel
block ``b`` to one partial row of a ``(T, C)`` buffer, then takes an int32 ticket of its channel block (an
atomic add after a barrier of its threads, acquire-release: :func:`_last`); the program whose ticket is
``T - 1`` stored the last partial and reduces the ``T`` of them in a fixed order (read past L1), so the result
is the same bits whichever program comes last. That program sets the ticket back to 0: a launch leaves the
tickets (``norm_tickets.py``: one zeroed buffer per device and stream, kept) as it found them.
The mean and variance are combined by Chan's formula (count ``n``, mean ``m``, centred sum of squares ``M2``)::

    n = n_a + n_b     d = m_b - m_a     m = m_a + d n_b / n     M2 = M2_a + M2_b + d^2 n_a n_b / n

so no ``E[x^2] - E[x]^2`` cancels. The statistics live in one ``(5, C)`` buffer: rows mean, invstd, scale,
shift and the unbiased variance ``M2 / (R - 1)`` (for the running variance); in eval (the running buffers the
statistics) :func:`normalize` alone makes and stores them, the forward's one launch. The running buffers change in
the last launch (:func:`normalize`, its first row block; so does the module's batch count), so a kernel that
fails to compile or launch leaves them for the torch path that replaces it.

As ``triton_attention.py``: decorated in the mode ``TRITON_INTERPRET`` asks for at import (``INTERPRET``;
``norm.triton_kernels`` reloads), sums by ``tl.reduce`` with ``triton_attention``'s combine function ``_add``
(taken from its owner, decorated in this same mode), zeros by ``tl.full``; row offsets int64 (``R C`` passes
2^31 at 20M pairs of 128 channels), the partials' int32 (``T <= 1024``). The activation is a compile-time flag
(``RELU``) of the three kernels that apply it (:func:`normalize`, :func:`grad_sums`, :func:`grad_input`): one
set of kernels for both norms.
"""
import triton
import triton.language as tl

from pointgeope.model.kernel_choice import current, kernel_module

INTERPRET = current().interpret     # the project's reading of TRITON_INTERPRET (Triton reads it itself too)
_add = kernel_module("pointgeope.model.triton_attention")._add      # the reductions' combine function


@triton.jit
def _merge(count, mean, m2, nb, mb, m2b):
    """Chan's merge of (count, mean, M2) with a block's (nb, mb, m2b), per channel (module docstring)."""
    n = count + nb
    delta = mb - mean
    w = nb / tl.maximum(n, 1.0)
    return n, mean + delta * w, m2 + m2b + delta * delta * count * w


@triton.jit
def _last(ticket_ptr, T):
    """Whether this program, having stored its partial row, is the last of the ``T`` of its channel block
    (``program_id(1)``) to do so: its int32 ticket (an atomic add, acquire-release after a barrier of its
    threads) is ``T - 1``. That program sets the ticket back to 0 for the next launch. The callers run the
    reduction in every program, its steps ``tl.where(last, T, 0)`` and its stores masked by ``last``: an
    ``if last`` branch spilled a register in :func:`grad_sums` on sm_80 (``bench/triton_compile_check.py``). The
    mask is ``cols < where(last, C, 0)``, not ``cmask & last``: the interpreter makes the latter int32.

    On a GPU (programs at once, which the interpreter never runs) the compiled order is, in PTX's memory model:
    every thread's partial stores, a barrier of the CTA, one thread's ``atom.gpu.acq_rel`` (its release covers
    what the barrier ordered before it), its value broadcast through shared memory and a barrier (what the
    acquire sees, every thread sees), then the last program's loads of the partials, past L1 (``.cg``): the
    CUDA samples' last-block reduction, with no fence left out (``tests/model/test_triton_compile.py`` reads it
    in the PTX). A launch sees the reset of the one before it on the same stream (the kernel boundary)."""
    tl.debug_barrier()                  # every thread's stores of the partial before the ticket
    ticket = tl.atomic_add(ticket_ptr + tl.program_id(1), 1, sem="acq_rel")
    last = ticket == T - 1
    tl.store(ticket_ptr + tl.program_id(1), 0, mask=last)
    return last


@triton.jit
def _partial_stats(x_ptr, mean_ptr, m2_ptr, counted, cols, cmask, C, ROWS, F64: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Mean and M2 of rows ``[t ROWS, (t + 1) ROWS)`` (``t = program_id(0)``; only those before ``counted``)
    of channels ``cols`` into row ``t`` of ``mean_ptr``, ``m2_ptr`` (T, C), combined block by block of
    ``BLOCK_R`` rows."""
    acc = tl.float64 if F64 else tl.float32
    start = tl.program_id(0).to(tl.int64) * ROWS
    count = tl.full([BLOCK_C], 0.0, acc)
    mean = tl.full([BLOCK_C], 0.0, acc)
    m2 = tl.full([BLOCK_C], 0.0, acc)
    r0, end = start, start + ROWS
    while r0 < end:                   # while, not range: Triton 3.6's interpreter takes no runtime range bound
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < counted)[:, None] & cmask[None, :]
        x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=mask, other=0.0).to(acc)
        nb = tl.reduce(tl.where(mask, 1.0, 0.0).to(acc), 0, _add)
        mb = tl.reduce(x, 0, _add) / tl.maximum(nb, 1.0)
        d = tl.where(mask, x - mb[None, :], 0.0)
        count, mean, m2 = _merge(count, mean, m2, nb, mb, tl.reduce(d * d, 0, _add))
        r0 += BLOCK_R
    t = tl.program_id(0).to(tl.int64) * C
    tl.store(mean_ptr + t + cols, mean, mask=cmask)
    tl.store(m2_ptr + t + cols, m2, mask=cmask)


@triton.jit
def _finish_stats(mean_ptr, m2_ptr, counted, cols, cmask, C, T, steps, ROWS, F64: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """(mean, biased variance, unbiased variance) of channels ``cols`` from the ``T`` partials, in a fixed
    order (partial ``t`` holds ``min(ROWS, counted - t ROWS)`` rows, none below 0), ``steps`` of them (``T``,
    or 0: no step); read past L1 (``.cg``): the other programs stored them in this launch."""
    acc = tl.float64 if F64 else tl.float32
    count = tl.full([BLOCK_C], 0.0, acc)
    mean = tl.full([BLOCK_C], 0.0, acc)
    m2 = tl.full([BLOCK_C], 0.0, acc)
    t0 = tl.program_id(0) * 0       # int32: T <= 1024, the lanes that count stay below R (int64 spilled at fp64)
    while t0 < steps:
        ts = t0 + tl.arange(0, BLOCK_T)
        mask = (ts < T)[:, None] & cmask[None, :]
        nt = tl.where(mask, tl.maximum(tl.minimum(ROWS, counted - ts * ROWS), 0)[:, None].to(acc), 0.0)
        offs = ts[:, None] * C + cols[None, :]
        mt = tl.load(mean_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg")
        nb = tl.reduce(nt, 0, _add)
        mb = tl.reduce(nt * mt, 0, _add) / tl.maximum(nb, 1.0)
        d = tl.where(mask, mt - mb[None, :], 0.0)
        m2b = tl.reduce(tl.load(m2_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg") + nt * d * d, 0, _add)
        count, mean, m2 = _merge(count, mean, m2, nb, mb, m2b)
        t0 += BLOCK_T
    return mean, m2 / counted, m2 / tl.maximum(counted - 1, 1)


@triton.jit
def _affine(w_ptr, b_ptr, mean, var, eps, cols, cmask, F64: tl.constexpr):
    """(invstd, scale, shift) of channels ``cols`` from their mean and (biased) variance (module docstring)."""
    acc = tl.float64 if F64 else tl.float32
    invstd = 1.0 / tl.sqrt(var + eps)
    scale = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(acc) * invstd
    shift = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(acc) - mean * scale
    return invstd, scale, shift


@triton.jit
def _store_stats(stat_ptr, mean, invstd, scale, shift, unbiased, cols, cmask, C):
    """The ``(5, C)`` statistics of channels ``cols`` (module docstring)."""
    tl.store(stat_ptr + cols, mean, mask=cmask)
    tl.store(stat_ptr + C + cols, invstd, mask=cmask)
    tl.store(stat_ptr + 2 * C + cols, scale, mask=cmask)
    tl.store(stat_ptr + 3 * C + cols, shift, mask=cmask)
    tl.store(stat_ptr + 4 * C + cols, unbiased, mask=cmask)


@triton.jit
def statistics(x_ptr, mean_ptr, m2_ptr, w_ptr, b_ptr, stat_ptr, valid_ptr, ticket_ptr, R, C, T, ROWS, eps,
               PREFIX: tl.constexpr, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr,
               BLOCK_C: tl.constexpr):
    """Program (t, b) of grid ``(T, B)``, channels ``b BLOCK_C + [0, BLOCK_C)``: its partial row ``t``
    (:func:`_partial_stats`; with ``PREFIX`` of the rows before ``*valid_ptr`` only, else of all ``R``), and the
    last program of the channel block to store its partial (:func:`_last`) reduces the ``T`` partials into the
    ``(5, C)`` statistics. Training only: in eval :func:`normalize` takes the running buffers itself."""
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    counted = R
    if PREFIX:      # int32 as R (an int64 count made the reduction's tile int64: a spill in Triton 3.6)
        counted = tl.load(valid_ptr).to(tl.int32)
    _partial_stats(x_ptr, mean_ptr, m2_ptr, counted, cols, cmask, C, ROWS, F64, BLOCK_R, BLOCK_C)
    last = _last(ticket_ptr, T)     # the reduction's steps and stores in the last program only
    mean, var, unbiased = _finish_stats(mean_ptr, m2_ptr, counted, cols, cmask, C, T, tl.where(last, T, 0),
                                        ROWS, F64, BLOCK_T, BLOCK_C)
    stored = cols < tl.where(last, C, 0)
    invstd, scale, shift = _affine(w_ptr, b_ptr, mean, var, eps, cols, stored, F64)
    _store_stats(stat_ptr, mean, invstd, scale, shift, unbiased, cols, stored, C)


@triton.jit
def normalize(x_ptr, stat_ptr, y_ptr, id_ptr, rm_ptr, rv_ptr, count_ptr, w_ptr, b_ptr, R, C, momentum, eps,
              RUNNING: tl.constexpr, UPDATE: tl.constexpr, COUNT: tl.constexpr, RELU: tl.constexpr,
              RESIDUAL: tl.constexpr, F64: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Program (r, b): ``y = max(0, x scale + shift)`` (``RELU``, else ``x scale + shift``; with ``RESIDUAL``
    ``max(0, x scale + shift + identity)``, ``identity`` read at ``id_ptr`` in ``x``'s layout: the PTv1 block's
    tail, ``residual_norm.py``) on its
    ``(BLOCK_R, BLOCK_C)`` tile, stored in ``y``'s type, ``scale`` and ``shift`` read from the ``(5, C)``
    statistics (training: :func:`statistics` stored them), or with ``RUNNING`` (eval: the one launch of the
    forward) made from the running buffers, ``weight``, ``bias`` and ``eps`` by every program (:func:`_affine`,
    as :func:`statistics` makes them), the programs of row block 0 storing them in the ``(5, C)`` statistics
    for the backward (the running variance as the unbiased row). With ``UPDATE`` the programs of row block 0 also
    move the running buffers by ``momentum`` towards the batch's mean and unbiased variance; with ``COUNT``
    program (0, 0) adds one to the int64 at ``count_ptr`` (the module's ``num_batches_tracked``: no launch of its
    own)."""
    acc = tl.float64 if F64 else tl.float32
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = (rows < R)[:, None] & cmask[None, :]
    if RUNNING:
        mean = tl.load(rm_ptr + cols, mask=cmask, other=0.0).to(acc)
        var = tl.load(rv_ptr + cols, mask=cmask, other=1.0).to(acc)
        invstd, scale, shift = _affine(w_ptr, b_ptr, mean, var, eps, cols, cmask, F64)
        if tl.program_id(0) == 0:
            _store_stats(stat_ptr, mean, invstd, scale, shift, var, cols, cmask, C)
    else:
        scale = tl.load(stat_ptr + 2 * C + cols, mask=cmask, other=0.0)
        shift = tl.load(stat_ptr + 3 * C + cols, mask=cmask, other=0.0)
    offs = rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(acc)
    y = x * scale[None, :] + shift[None, :]
    if RESIDUAL:        # in the accumulator's type: one rounding to y's type, after the add
        y = y + tl.load(id_ptr + offs, mask=mask, other=0.0).to(acc)
    if RELU:
        y = tl.where(y < 0.0, 0.0, y)       # torch's relu: NaN stays NaN (tl.maximum would return the 0)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if UPDATE:
        if tl.program_id(0) == 0:
            mean = tl.load(stat_ptr + cols, mask=cmask, other=0.0)
            unbiased = tl.load(stat_ptr + 4 * C + cols, mask=cmask, other=0.0)
            rm = tl.load(rm_ptr + cols, mask=cmask, other=0.0).to(acc)
            rv = tl.load(rv_ptr + cols, mask=cmask, other=0.0).to(acc)
            tl.store(rm_ptr + cols, ((1.0 - momentum) * rm + momentum * mean).to(rm_ptr.dtype.element_ty), mask=cmask)
            tl.store(rv_ptr + cols, ((1.0 - momentum) * rv + momentum * unbiased).to(rv_ptr.dtype.element_ty),
                     mask=cmask)
    if COUNT:
        if tl.program_id(0) == 0:
            if tl.program_id(1) == 0:
                tl.store(count_ptr, tl.load(count_ptr) + 1)


@triton.jit
def _masked(x, g_ptr, out_ptr, offs, mask, scale, shift, RELU: tl.constexpr, RESIDUAL: tl.constexpr,
            F64: tl.constexpr):
    """``gm`` of a tile (``acc``): ``g`` at ``g_ptr``, where the forward's ReLU let it through, by torch's
    ``threshold_backward`` rule (0 where the output ``<= 0``: a NaN output passes ``g``); the output
    ``x scale + shift`` recomputed (``RELU``), or read at ``out_ptr`` (``RESIDUAL``: the tail's ``relu(x scale +
    shift + identity)`` as stored, in its type, so the mask is that of torch's saved output); ``g`` without
    either."""
    acc = tl.float64 if F64 else tl.float32
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(acc)
    if RELU:
        g = tl.where(x * scale + shift <= 0.0, 0.0, g)
    if RESIDUAL:
        g = tl.where(tl.load(out_ptr + offs, mask=mask, other=0.0).to(acc) <= 0.0, 0.0, g)
    return g


@triton.jit
def grad_sums(x_ptr, g_ptr, out_ptr, stat_ptr, sg_ptr, sgx_ptr, sums_ptr, ticket_ptr, R, C, T, ROWS,
              RELU: tl.constexpr, RESIDUAL: tl.constexpr, F64: tl.constexpr, BLOCK_R: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """Program (t, b): ``sum gm`` and ``sum gm xhat`` of rows ``[t ROWS, (t + 1) ROWS)`` into row ``t`` of
    ``sg_ptr``, ``sgx_ptr`` (T, C); the last program of the channel block to store its partial (:func:`_last`)
    sums the ``T`` partials in order into ``sums (2, C)``: ``db`` (row 0), ``dw`` (row 1). With ``RESIDUAL`` (the
    block's tail, ``residual_norm.py``) the mask is the saved output's at ``out_ptr`` (:func:`_masked`)."""
    acc = tl.float64 if F64 else tl.float32
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    mean = tl.load(stat_ptr + cols, mask=cmask, other=0.0)[None, :]
    invstd = tl.load(stat_ptr + C + cols, mask=cmask, other=0.0)[None, :]
    scale = tl.load(stat_ptr + 2 * C + cols, mask=cmask, other=0.0)[None, :]
    shift = tl.load(stat_ptr + 3 * C + cols, mask=cmask, other=0.0)[None, :]
    start = tl.program_id(0).to(tl.int64) * ROWS
    sg = tl.full([BLOCK_C], 0.0, acc)
    sgx = tl.full([BLOCK_C], 0.0, acc)
    r0, end = start, start + ROWS
    while r0 < end:
        rows = r0 + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None] & cmask[None, :]
        offs = rows[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(acc)
        gm = _masked(x, g_ptr, out_ptr, offs, mask, scale, shift, RELU, RESIDUAL, F64)  # 0 outside the tile
        sg += tl.reduce(gm, 0, _add)
        sgx += tl.reduce(gm * ((x - mean) * invstd), 0, _add)
        r0 += BLOCK_R
    t = tl.program_id(0).to(tl.int64) * C
    tl.store(sg_ptr + t + cols, sg, mask=cmask)
    tl.store(sgx_ptr + t + cols, sgx, mask=cmask)
    last = _last(ticket_ptr, T)
    _finish_sums(sg_ptr, sgx_ptr, sums_ptr, cols, cols < tl.where(last, C, 0), C, T, tl.where(last, T, 0), F64,
                 BLOCK_T, BLOCK_C)


@triton.jit
def _finish_sums(sg_ptr, sgx_ptr, sums_ptr, cols, cmask, C, T, steps, F64: tl.constexpr, BLOCK_T: tl.constexpr,
                 BLOCK_C: tl.constexpr):
    """The ``T`` partials of channels ``cols`` summed in order into ``sums (2, C)``, ``steps`` of them (``T``, or
    0), read past L1 (as :func:`_finish_stats`)."""
    acc = tl.float64 if F64 else tl.float32
    sg = tl.full([BLOCK_C], 0.0, acc)
    sgx = tl.full([BLOCK_C], 0.0, acc)
    t0 = tl.program_id(0) * 0       # int32, as in _finish_stats
    while t0 < steps:
        ts = t0 + tl.arange(0, BLOCK_T)
        mask = (ts < T)[:, None] & cmask[None, :]
        offs = ts[:, None] * C + cols[None, :]
        sg += tl.reduce(tl.load(sg_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg"), 0, _add)
        sgx += tl.reduce(tl.load(sgx_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg"), 0, _add)
        t0 += BLOCK_T
    tl.store(sums_ptr + cols, sg, mask=cmask)
    tl.store(sums_ptr + C + cols, sgx, mask=cmask)


@triton.jit
def grad_input(x_ptr, g_ptr, out_ptr, gm_ptr, stat_ptr, sums_ptr, dx_ptr, valid_ptr, R, C, BATCH: tl.constexpr,
               PREFIX: tl.constexpr, RELU: tl.constexpr, RESIDUAL: tl.constexpr, F64: tl.constexpr,
               BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Program (r, b): ``dx`` of its tile (module docstring), stored in ``dx``'s type. With ``PREFIX`` the
    statistics are the first ``n = *valid_ptr`` rows': ``db`` and ``dw`` (sums over every row) divide by
    ``n``, and only those rows move the statistics (the others get ``scale gm``). With ``RESIDUAL`` (the block's
    tail) the mask is the saved output's at ``out_ptr`` (:func:`_masked`) and ``gm``, the identity's gradient, is
    stored at ``gm_ptr`` too (in ``g``'s type: ``g`` or 0, the bits of torch's ``threshold_backward``)."""
    acc = tl.float64 if F64 else tl.float32
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = (rows < R)[:, None] & cmask[None, :]
    scale = tl.load(stat_ptr + 2 * C + cols, mask=cmask, other=0.0)[None, :]
    shift = tl.load(stat_ptr + 3 * C + cols, mask=cmask, other=0.0)[None, :]
    offs = rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(acc)
    gm = _masked(x, g_ptr, out_ptr, offs, mask, scale, shift, RELU, RESIDUAL, F64)
    if RESIDUAL:
        tl.store(gm_ptr + offs, gm.to(gm_ptr.dtype.element_ty), mask=mask)
    if BATCH:
        mean = tl.load(stat_ptr + cols, mask=cmask, other=0.0)[None, :]
        invstd = tl.load(stat_ptr + C + cols, mask=cmask, other=0.0)[None, :]
        counted = R
        if PREFIX:
            counted = tl.load(valid_ptr)
        db = tl.load(sums_ptr + cols, mask=cmask, other=0.0)[None, :] / counted
        dw = tl.load(sums_ptr + C + cols, mask=cmask, other=0.0)[None, :] / counted
        gm = gm - tl.where((rows < counted)[:, None], db + (x - mean) * invstd * dw, 0.0)
    tl.store(dx_ptr + offs, (scale * gm).to(dx_ptr.dtype.element_ty), mask=mask)
