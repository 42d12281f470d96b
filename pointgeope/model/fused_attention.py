"""The fused (Triton) path of Point Transformer's vector attention: relation and aggregation in one pass each.

``attention.PointTransformerLayer`` runs, per query ``i`` and neighbour ``j`` (``C`` channels, ``s`` groups of
``G = C / s``)::

    relation   r_ij = k[idx_ij] - q_i (+ delta_ij)                          (N, k, C), rotation "none"
               r_ij = R_i^T R_j k[idx_ij] - q_i (+ delta_ij)                standard GeoPE
               r_ij = R(k_b d_ij) k[idx_ij] - q_i (+ delta_ij)              linear GeoPE, per block b
    aggregate  y[i, g G + h] = sum_j softmax_j(w_ij)[h] value_ij[g G + h]   value_ij = v[idx_ij] (+ delta_ij)

Today's torch path does each as a chain of gathers, subtractions, a softmax, an einsum, each a pass over
``(N, k, C)`` pairs in memory (and on the GPU a kernel launch); here each is one Triton kernel
(``triton_attention.py``) forward and one backward, both recomputing the gathered values and the softmax
from ``v``, ``idx``, ``delta`` and the logits ``w (N, k, G)`` instead of saving ``(N, k, C)`` pairs. The
gradients of ``k`` and ``v`` are summed into their rows with float32 atomic adds (the default, and linear
GeoPE's always: the order of the sums is not deterministic, as with torch's ``index_add_`` on CUDA), or by
source point from the kNN lists' transpose (``gather_backward.py``: the same bits in every run; the default
under ``torch.use_deterministic_algorithms(True)``, ``gather_backward.SCATTER``). Inputs may be float32, bfloat16 or
float16 (accumulated in float32) or float64 (in float64, for ``gradcheck``).

Which path runs is :mod:`pointgeope.model.kernels`' decision (``POINTGEOPE_KERNELS``; unset: Triton on CUDA, torch
on the CPU, whose torch kernels are cache-blocked and measured faster; torch for an op that sums with atomics
where ``torch.use_deterministic_algorithms(True)`` asks for reproducible sums): the layer asks :func:`enabled`
per op.
Each public op checks its arguments first (``attention_checks.py``: shapes, dtypes, devices, idx's range,
which ``check_index=False`` skips; the layer passes it for its kNN's rows): a wrong one is one line, on either
path, and never a kernel's failure. A kernel that fails to compile or launch hands its op to the torch
reference of the same formula (``attention_reference.ref_*``, autograd through torch ops), forward or backward,
and the op stays on torch for the rest of the process.

What is fused, per preset: ``rpe``, ``none``, ``ape`` (rotation ``none``): relation and aggregation; ``geope``,
``geope+rpe`` (standard GeoPE with fixed frequencies): relation (``frame_relation``: the points turned once by
``rotation.apply_shifted``, then gather, turn back by the query's tables, subtract and add in one kernel; or,
with ``POINTGEOPE_FRAME_FOLD=1``, every pair turned by both rotations in that kernel, ``frame_fold.py``) and
aggregation; ``lingeope``, ``lingeope+rpe`` with fixed frequencies: relation (``linear_relation``: Rodrigues per
pair and block) and aggregation; ``rope3d``, ``rope-mixed`` and learnable GeoPE frequencies: the
aggregation only, their relations stay on today's kernels (``rope.py``, ``rotation.py``,
``linear_rotation.py``; compiled on CUDA by ``geope_pairs.py``), as does a ``geope`` value term (then nothing is
fused after the weight MLP).
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
from torch import Tensor

from pointgeope.model import attention_checks, frame_fold, gather_backward, kernels
from pointgeope.model.attention_reference import (
    acc_dtype,
    out_dtype,
    ref_aggregate,
    ref_frame,
    ref_linear,
    ref_relation,
    torch_grads,
)
from pointgeope.model.first_order import KERNEL_WAY, first_order_only
from pointgeope.model.kernel_choice import kernel_module
from pointgeope.model.rotation import apply_shifted

__all__ = ["enabled", "triton_kernels", "relation", "frame_relation", "linear_relation", "aggregate", "KERNELS"]


def enabled(op: str, device: torch.device) -> bool:
    """Whether the fused ``op`` (a name of :data:`KERNELS`) runs in Triton for tensors on ``device``."""
    return KERNELS[op].enabled(device)


def triton_kernels(name: str = "triton_attention") -> ModuleType:
    """The kernel module ``pointgeope.model.<name>`` (``triton_attention``, or ``triton_gather``: the backward
    by source point), its kernels decorated in the mode ``TRITON_INTERPRET`` asks for now."""
    return kernel_module(f"pointgeope.model.{name}")


WARPS = 8    # every attention kernel (at Triton's default 4, aggregate's backward and the GeoPE relations spill)


def tiles(op: str, k: int, width: int, backward: bool = False, f64: bool = False) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_K, BLOCK_width) of ``op``'s kernels: powers of two holding ``k`` and ``width``, about
    a budget of elements a tile: 4096 (linear GeoPE and the folded frame, per block: 2048), a quarter for
    aggregate's backward, half for their backward and for float64,
    so that no kernel spills registers at :data:`WARPS` (``bench/triton_compile_check.py`` checks every recipe
    width and k on sm_80 and sm_90, Triton 3.6 and current)."""
    per_block = op in ("linear_relation", frame_fold.NAME)                  # tiles of 3-channel blocks
    budget = (2048 if per_block else 4096) // (4 if backward and op == "aggregate" else
                                                2 if backward and per_block else 1)
    budget //= 2 if f64 else 1
    import triton

    block_k, block_w = triton.next_power_of_2(k), triton.next_power_of_2(width)
    return max(1, min(64, budget // (block_k * block_w))), block_k, block_w


def _launch(kernel, grid: list[tuple[int, int]], *args, device: torch.device, **meta) -> None:
    """``kernel`` on the grid of ``ceil(size / block)`` programs per ``(size, block)`` of ``grid``."""
    import triton

    with kernels.launch_device(device):
        kernel[tuple(triton.cdiv(size, block) for size, block in grid)](*args, num_warps=WARPS, **meta)


def _guarded_backward(op: str, device: torch.device, kernel: Callable[[], tuple], ref: Callable[..., Tensor],
                      inputs: Callable[[], list[Tensor | None]], needs: list[bool], grad: Tensor) -> tuple:
    """The Triton backward ``kernel()`` under ``op``'s entry in :mod:`pointgeope.model.kernels`, following its
    forward, which ran in Triton (these Functions are the kernels' Triton paths), not the switch; where ``op``
    failed since, or sums with atomics under deterministic algorithms, or if it fails now, the gradients of
    ``ref(*inputs())`` for the inputs flagged in ``needs``, by autograd (``inputs`` is called on that path only)."""
    return KERNELS[op].dispatch(device, kernel, lambda: torch_grads(ref, inputs(), needs, grad), decided=True)


def _zero_inputs(g: Tensor, rows: int, dtypes: tuple) -> Callable[[], list[Tensor | None]]:
    """The torch fallback's inputs of a relation's backward, made only if it runs: zeros of the shapes and
    ``dtypes`` of its source rows ``(rows, C)``, ``q (N, C)`` and ``delta (N, k, C)`` (or ``None``), from the
    incoming ``g (N, k, C)``. The relations are linear in them, so their values are unused."""
    (n, k, c), (source, q, delta) = g.shape, dtypes
    return lambda: [g.new_zeros(rows, c, dtype=source), g.new_zeros(n, c, dtype=q),
                    None if delta is None else g.new_zeros(n, k, c, dtype=delta)]


def frame_backward(op: str, ctx, g: Tensor, kernel: Callable[..., tuple]) -> tuple:
    """The backward of a frame relation's Function (``frame_relation``, ``frame_fold.FoldedFrame``): ``(gx, None,
    None, gq, gdelta)`` for its inputs ``(x, idx, tables, q, delta)``, by ``kernel(idx, tables, g, needs)`` under
    :func:`_guarded_backward` (``ref_frame``'s gradients where ``op`` falls back), ``None`` where not needed."""
    idx, tables = ctx.saved_tensors
    g, delta_dtype = g.contiguous(), ctx.dtypes[2]
    needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[3], delta_dtype is not None and ctx.needs_input_grad[4]]
    gx, gq, gdelta = _guarded_backward(op, g.device, lambda: kernel(idx, tables, g, needs),
                                       lambda a, b, d: ref_frame(a, idx, tables, b, d),
                                       _zero_inputs(g, tables.shape[1], ctx.dtypes), needs, g)
    return gx, None, None, gq, gdelta


class _Aggregate(torch.autograd.Function):
    """``y = sum_j softmax_j(w) (v[idx] + delta)`` per channel group; saves ``w``, ``v``, ``idx``, ``delta``."""

    @staticmethod
    def forward(ctx, w: Tensor, v: Tensor, idx: Tensor, delta: Tensor | None, share_planes: int) -> Tensor:
        w, v, idx = w.contiguous(), v.contiguous(), idx.contiguous()
        delta = None if delta is None else delta.contiguous()
        ctx.save_for_backward(w, v, idx, delta)
        ctx.share_planes = share_planes
        (n, k), c = idx.shape, v.shape[1]
        y = torch.empty(n, c, dtype=out_dtype(v, delta), device=v.device)
        f64 = acc_dtype(w, v, delta) == torch.float64
        bm, bk, bg = tiles("aggregate", k, c // share_planes, f64=f64)
        _launch(triton_kernels().aggregate_forward, [(n, bm)], w, v, idx, v if delta is None else delta, y,
                n, k, c, c // share_planes, S=share_planes, HAS_DELTA=delta is not None, F64=f64,
                BLOCK_M=bm, BLOCK_K=bk, BLOCK_G=bg, device=v.device)
        return y

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, gy: Tensor):
        w, v, idx, delta = ctx.saved_tensors
        s = ctx.share_planes
        needs = [True, ctx.needs_input_grad[1], delta is not None and ctx.needs_input_grad[3]]
        gw, gv, gdelta = _guarded_backward("aggregate", v.device, lambda: _aggregate_backward(w, v, idx, delta, gy, s,
                                                                                               needs),
                                           lambda a, b, d: ref_aggregate(a, b, idx, d, s), lambda: [w, v, delta],
                                           needs, gy)
        return gw, gv, None, gdelta, None


def _aggregate_backward(w: Tensor, v: Tensor, idx: Tensor, delta: Tensor | None, gy: Tensor, s: int,
                        needs: list[bool]) -> tuple:
    """``(gw, gv, gdelta)`` of ``aggregate`` by its Triton kernel (``None`` where ``needs`` says no)."""
    (n, k), c = idx.shape, v.shape[1]
    acc = acc_dtype(w, v, delta)
    _, grad_v, grad_delta = needs
    by_source = grad_v and gather_backward.sorted_backward()      # gv summed by source row from the weights p
    gw, gy = torch.empty_like(w), gy.contiguous()
    gv = torch.zeros(v.shape, dtype=acc, device=v.device) if grad_v and not by_source else gw
    probs = torch.empty(n, k, c // s, dtype=acc, device=v.device) if by_source else gw
    gdelta = torch.empty_like(delta) if grad_delta else gw
    bm, bk, bg = tiles("aggregate", k, c // s, backward=True, f64=acc == torch.float64)
    _launch(triton_kernels().aggregate_backward, [(n, bm)], w, v, idx, v if delta is None else delta,
            gy, gw, gv, gdelta, probs, n, k, c, c // s, S=s, HAS_DELTA=delta is not None,
            GRAD_V=grad_v and not by_source, GRAD_DELTA=grad_delta, STORE_P=by_source, F64=acc == torch.float64,
            BLOCK_M=bm, BLOCK_K=bk, BLOCK_G=bg, device=v.device)
    if by_source:
        gv = gather_backward.aggregate_value_grad(probs, gy, idx, v.shape[0])
    return gw, gv.to(v.dtype) if grad_v else None, gdelta if grad_delta else None


class _Relation(torch.autograd.Function):
    """``r = key[idx] - q (+ delta)``; saves ``idx`` only (the gradient of ``delta`` is the incoming one)."""

    @staticmethod
    def forward(ctx, key: Tensor, idx: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
        key, idx, q = key.contiguous(), idx.contiguous(), q.contiguous()
        delta = None if delta is None else delta.contiguous()
        ctx.save_for_backward(idx)
        ctx.rows, ctx.dtypes = key.shape[0], (key.dtype, q.dtype, None if delta is None else delta.dtype)
        (n, k), c = idx.shape, key.shape[1]
        out = torch.empty(n, k, c, dtype=out_dtype(key, q, delta), device=key.device)
        bm, bk, bc = tiles("relation", k, min(c, 64), f64=acc_dtype(key, q, delta) == torch.float64)
        _launch(triton_kernels().relation_forward, [(n, bm), (c, bc)], key, idx, q,
                key if delta is None else delta, out, n, k, c, HAS_DELTA=delta is not None,
                F64=acc_dtype(key, q, delta) == torch.float64, BLOCK_M=bm, BLOCK_K=bk, BLOCK_C=bc,
                device=key.device)
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        (idx,) = ctx.saved_tensors
        g, delta_dtype = g.contiguous(), ctx.dtypes[2]
        needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[2], delta_dtype is not None and ctx.needs_input_grad[3]]
        gkey, gq, gdelta = _guarded_backward("relation", g.device, lambda: _relation_backward(ctx, idx, g, needs),
                                             lambda a, b, d: ref_relation(a, idx, b, d),
                                             _zero_inputs(g, ctx.rows, ctx.dtypes), needs, g)
        return gkey, None, gq, gdelta


def _relation_backward(ctx, idx: Tensor, g: Tensor, needs: list[bool]) -> tuple:
    """``(gkey, gq, gdelta)`` of ``relation`` by its Triton kernel (``None`` where ``needs`` says no)."""
    key_dtype, q_dtype, delta_dtype = ctx.dtypes
    (n, k), c = idx.shape, g.shape[-1]
    acc = torch.float64 if g.dtype == torch.float64 else torch.float32
    grad_key, grad_q, grad_delta = needs
    by_source = grad_key and gather_backward.sorted_backward()      # gkey summed by source row, no atomics
    gkey = (gather_backward.relation_key_grad(g, idx, ctx.rows) if by_source else
            torch.zeros(ctx.rows, c, dtype=acc, device=g.device) if grad_key else g)
    gq = torch.empty(n, c, dtype=q_dtype, device=g.device) if grad_q else g
    bm, bk, bc = tiles("relation", k, min(c, 64), backward=True, f64=acc == torch.float64)
    if (grad_key and not by_source) or grad_q:
        _launch(triton_kernels().relation_backward, [(n, bm), (c, bc)], g, idx, gkey, gq,
                n, k, c, GRAD_KEY=grad_key and not by_source, GRAD_Q=grad_q, F64=acc == torch.float64, BLOCK_M=bm,
                BLOCK_K=bk, BLOCK_C=bc, device=g.device)
    return (gkey.to(key_dtype) if grad_key else None, gq if grad_q else None,
            g.to(delta_dtype) if grad_delta else None)


class _FrameRelation(torch.autograd.Function):
    """Standard GeoPE's relation ``R_i^T R_j x[idx] - q (+ delta)`` for constant rotations (``tables``, the
    points' ``rotation.rotation_tables (5, N, C)``): the points are turned once in torch (``R_j x_j``, ``N`` rows),
    the pairs turned back, the query subtracted, ``delta`` added in one kernel. Backward: ``R_i g`` summed into
    the points' rows (by source point, or atomics), ``R_j^T`` once per row in torch, ``-sum_j g`` for ``q``.
    Saves ``idx`` and the tables (``5 N C`` values, no ``(N, k, C)`` pairs)."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, tables: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
        idx, tables, q = idx.contiguous(), tables.contiguous(), q.contiguous()
        delta = None if delta is None else delta.contiguous()
        ctx.save_for_backward(idx, tables)
        ctx.dtypes = (x.dtype, q.dtype, None if delta is None else delta.dtype)
        points = apply_shifted(x, tables).contiguous()                          # R_j x_j in the tables' dtype
        (n, k), c = idx.shape, x.shape[1]
        out = torch.empty(n, k, c, dtype=out_dtype(x, q, delta), device=x.device)
        bm, bk, bc = tiles("frame_relation", k, min(c, 64), f64=tables.dtype == torch.float64)
        _launch(triton_kernels().frame_forward, [(n, bm), (c, bc)], points, idx, tables, q,
                q if delta is None else delta, out, n, k, c, HAS_DELTA=delta is not None,
                F64=tables.dtype == torch.float64, BLOCK_M=bm, BLOCK_K=bk, BLOCK_C=bc, device=x.device)
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        return frame_backward("frame_relation", ctx, g, lambda *args: _frame_backward(ctx, *args))


def _frame_backward(ctx, idx: Tensor, tables: Tensor, g: Tensor, needs: list[bool]) -> tuple:
    """``(gx, gq, gdelta)`` of ``frame_relation`` by its Triton kernel (``None`` where ``needs`` says no)."""
    x_dtype, q_dtype, delta_dtype = ctx.dtypes
    (n, k), c = idx.shape, g.shape[-1]
    grad_x, grad_q, grad_delta = needs
    by_source = grad_x and gather_backward.sorted_backward()        # R_i g summed by source point, no atomics
    turn_first = by_source and gather_backward.FRAME_TURN_FIRST     # (N, k, C) turned pairs, then the plain sum
    gpoints = (gather_backward.frame_point_grad(g, idx, tables) if by_source and not turn_first else
               torch.zeros(tables.shape[1], c, dtype=tables.dtype, device=g.device) if grad_x and not by_source else g)
    gq = torch.empty(n, c, dtype=q_dtype, device=g.device) if grad_q else g
    turned = torch.empty(n, k, c, dtype=tables.dtype, device=g.device) if turn_first else g
    bm, bk, bc = tiles("frame_relation", k, min(c, 64), backward=True, f64=tables.dtype == torch.float64)
    if (grad_x and not by_source) or grad_q or turn_first:
        _launch(triton_kernels().frame_backward, [(n, bm), (c, bc)], g, idx, tables, gpoints, gq, turned, n, k, c,
                GRAD_POINTS=grad_x and not by_source, GRAD_Q=grad_q, STORE_TURNED=turn_first,
                F64=tables.dtype == torch.float64, BLOCK_M=bm, BLOCK_K=bk, BLOCK_C=bc, device=g.device)
    if turn_first:
        gpoints = gather_backward.relation_key_grad(turned, idx, n)
    gx = apply_shifted(gpoints, tables, transpose=True).to(x_dtype) if grad_x else None   # R_j^T per row
    return gx, gq if grad_q else None, g.to(delta_dtype) if grad_delta else None


def frame_relation(x: Tensor, idx: Tensor, tables: Tensor, q: Tensor, delta: Tensor | None = None, *,
                   check_index: bool = True) -> Tensor:
    """Standard GeoPE's relation ``R(t_i)^T R(t_j) x[idx[i, j]] - q[i] (+ delta[i, j])``, ``(N, k, C)``, from
    ``x (N, C)``, ``idx (N, k)``, the points' ``rotation_tables (5, N, C)`` (constant: fixed frequencies),
    ``q (N, C)``, ``delta (N, k, C)`` or ``None``; the same relation as ``rotation.query_frame``. Arguments
    checked first (``attention_checks``; ``check_index=False`` skips idx's range: one pass, a sync on CUDA).
    With ``frame_fold.folds()`` (``POINTGEOPE_FRAME_FOLD=1``), the points' turn runs in the relation's kernel
    (``frame_relation_fold``): one launch each way, not two."""
    attention_checks.check_frame(x, idx, tables, q, delta, check_index)
    fold = frame_fold.folds() and not gather_backward.sorted_backward() and enabled(frame_fold.NAME, x.device)
    return KERNELS[frame_fold.NAME if fold else "frame_relation"](x.device, x, idx, tables, q, delta)


class _LinearRelation(torch.autograd.Function):
    """Linear GeoPE's relation ``R(k_b d_ij) x[idx_ij] - q_i (+ delta_ij)`` for constant displacements and block
    scales: Rodrigues per pair and block in one kernel each way (``R^T g`` summed into ``x``'s rows by
    atomics); saves ``idx``, ``disp (N, k, 3)`` and the scales, as ``linear_rotation._RelativeFrame``."""

    @staticmethod
    def forward(ctx, x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, q: Tensor,
                delta: Tensor | None) -> Tensor:
        x, idx, q = x.contiguous(), idx.contiguous(), q.contiguous()
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        disp, block_scale = disp.to(work).contiguous(), block_scale.to(work).contiguous()
        delta = None if delta is None else delta.contiguous()
        ctx.save_for_backward(idx, disp, block_scale)
        ctx.rows, ctx.dtypes = x.shape[0], (x.dtype, q.dtype, None if delta is None else delta.dtype)
        (n, k), c, blocks = idx.shape, x.shape[1], block_scale.shape[0]
        out = torch.empty(n, k, c, dtype=out_dtype(x, q, delta), device=x.device)
        bm, bk, bb = tiles("linear_relation", k, min(blocks, 32), f64=work == torch.float64)
        _launch(triton_kernels().linear_forward, [(n, bm), (blocks, bb)], x, idx, disp, block_scale, q,
                q if delta is None else delta, out, n, k, c, blocks, HAS_DELTA=delta is not None,
                F64=work == torch.float64, BLOCK_M=bm, BLOCK_K=bk, BLOCK_B=bb, device=x.device)
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        idx, disp, block_scale = ctx.saved_tensors
        g, delta_dtype = g.contiguous(), ctx.dtypes[2]
        needs = [ctx.needs_input_grad[0], ctx.needs_input_grad[4], delta_dtype is not None and ctx.needs_input_grad[5]]
        gx, gq, gdelta = _guarded_backward("linear_relation", g.device,
                                           lambda: _linear_backward(ctx, idx, disp, block_scale, g, needs),
                                           lambda a, b, d: ref_linear(a, idx, disp, block_scale, b, d),
                                           _zero_inputs(g, ctx.rows, ctx.dtypes), needs, g)
        return gx, None, None, None, gq, gdelta


def _linear_backward(ctx, idx: Tensor, disp: Tensor, block_scale: Tensor, g: Tensor, needs: list[bool]) -> tuple:
    """``(gx, gq, gdelta)`` of ``linear_relation`` by its Triton kernel (``None`` where ``needs`` says no)."""
    x_dtype, q_dtype, delta_dtype = ctx.dtypes
    (n, k), c, blocks = idx.shape, g.shape[-1], block_scale.shape[0]
    grad_x, grad_q, grad_delta = needs
    gx = torch.zeros(ctx.rows, c, dtype=disp.dtype, device=g.device) if grad_x else g
    gq = torch.empty(n, c, dtype=q_dtype, device=g.device) if grad_q else g
    bm, bk, bb = tiles("linear_relation", k, min(blocks, 32), backward=True, f64=disp.dtype == torch.float64)
    if grad_x or grad_q:
        _launch(triton_kernels().linear_backward, [(n, bm), (blocks, bb)], g, idx, disp, block_scale, gx, gq,
                n, k, c, blocks, GRAD_X=grad_x, GRAD_Q=grad_q, F64=disp.dtype == torch.float64, BLOCK_M=bm,
                BLOCK_K=bk, BLOCK_B=bb, device=g.device)
    return gx.to(x_dtype) if grad_x else None, gq if grad_q else None, g.to(delta_dtype) if grad_delta else None


def linear_relation(x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, q: Tensor,
                    delta: Tensor | None = None, *, check_index: bool = True) -> Tensor:
    """Linear GeoPE's relation ``R(k_b d_ij) x[idx[i, j]] - q[i] (+ delta[i, j])``, ``(N, k, C)``: ``x (N_s, C)``,
    ``idx (N, k)``, ``disp (N, k, 3)`` (``p_j - p_i``), ``block_scale (n,)`` (``k_b``), constant; the same
    relation as ``linear_rotation.relative_frame``, angles and products in float32 (float64 for float64 x).
    Arguments checked first, as :func:`frame_relation`'s."""
    attention_checks.check_linear(x, idx, disp, block_scale, q, delta, check_index)
    return KERNELS["linear_relation"](x.device, x, idx, disp, block_scale, q, delta)


def relation(key: Tensor, idx: Tensor, q: Tensor, delta: Tensor | None = None, *, check_index: bool = True) -> Tensor:
    """``key[idx[i, j]] - q[i] (+ delta[i, j])``, ``(N, k, C)``, from ``key (N_s, C)``, ``idx (N, k)``,
    ``q (N, C)``, ``delta (N, k, C)`` or ``None``: one Triton kernel forward, one backward. Arguments checked
    first, as :func:`frame_relation`'s."""
    attention_checks.check_pairs("relation", "key", key, idx, q, delta, check_index)
    return KERNELS["relation"](key.device, key, idx, q, delta)


def aggregate(w: Tensor, v: Tensor, idx: Tensor, delta: Tensor | None, share_planes: int, *,
              check_index: bool = True) -> Tensor:
    """``y[i, g G + h] = sum_j softmax_j(w[i, :, h])[j] (v[idx[i, j], g G + h] (+ delta[i, j, g G + h]))``,
    ``(N, C)``, from the logits ``w (N, k, G)``, ``v (N_s, C)``, ``idx (N, k)``, ``delta (N, k, C)`` or
    ``None``, ``G = C / share_planes``: softmax and grouped weighted sum in one Triton kernel each way.
    Arguments checked first, as :func:`frame_relation`'s."""
    attention_checks.check_aggregate(w, v, idx, delta, share_planes, check_index)
    return KERNELS["aggregate"](v.device, w, v, idx, delta, share_planes)


def _check(name: str):
    """``info --check``'s cases of the attention kernel ``name`` (:mod:`pointgeope.model.kernel_check`)."""
    def cases(device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
        from pointgeope.model.kernel_check import attention_cases

        return attention_cases(name, device, pairs)
    return cases


# The fused ops in the kernel registry: Triton forward (whose backward dispatches under the same name) and the
# torch reference of the same formula; their backward sums gradients into source rows with atomics, or (but
# linear GeoPE's) by source point (gather_backward.SCATTER: under deterministic algorithms by default). The folded
# frame relation runs only where frame_fold.folds() asks for it (off: not yet timed on a GPU), with atomics.
KERNELS = {name: kernels.register(name, fn, ref, atomics=atomics, check=_check(name)) for name, fn, ref, atomics in (
    ("relation", _Relation.apply, ref_relation, gather_backward.atomics),
    ("frame_relation", _FrameRelation.apply, ref_frame, gather_backward.atomics),
    (frame_fold.NAME, frame_fold.FoldedFrame.apply, ref_frame, True),
    ("linear_relation", _LinearRelation.apply, ref_linear, True),
    ("aggregate", _Aggregate.apply, ref_aggregate, gather_backward.atomics))}
