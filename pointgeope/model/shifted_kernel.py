"""``rotation.apply_shifted`` in one Triton launch: which calls it takes, its launch, its autograd.

``apply_shifted(x, tables, minus, transpose, out)`` is ``R x - m`` (``R^T x - m``) of channel rows by shift tables
(``rotation.shift_tables``; ``triton_rotation.py`` has the formula). On torch's path it is five kernels (a
product and four multiply-adds into slices); :func:`shifted` runs it as one (``triton_rotation.shifted``) where
:mod:`pointgeope.model.kernels` says Triton runs (kernel ``apply_shifted``: a CUDA default; the CPU keeps its
cache-blocked torch path) and the call is one the kernel takes (:func:`takes`): output in the accumulation type
(float32 or float64: the tables' dtype promoted with ``x``'s and ``minus``'s, every caller's), at most three
leading dimensions, every tensor ``C`` channels wide, tables without gradient. Anything else stays on torch.

Gradients (``x`` and ``minus``, the tables are constants): ``R`` is linear in ``x`` with adjoint ``R^T``, so
``dx = R^T g`` (``R g`` for the transposed apply) summed to ``x``'s shape where it broadcast, ``dm = -g`` summed
to ``minus``'s; the backward is the same kernel, transposed (:class:`_Shifted`), itself differentiable again.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from pointgeope.model import kernels
from pointgeope.model.kernel_choice import forced, kernel_module

__all__ = ["shifted", "takes", "tables_take", "build_tables", "check_cases", "tables_cases", "register"]

# Tiles (rows, channels) and warps: 4 outputs a thread for apply_shifted, 2 for the tables. At 16 (32 x 64, 4 warps)
# the int64 addresses of an output's ten loads spilled on sm_80, as float64's sin and cos did at 4 (no spill at these:
# bench/triton_compile_check.py)
BLOCK_R, BLOCK_C, WARPS = 16, 64, 8
TABLE_R, TABLE_C = 16, 32


def takes(x: Tensor, tables: Tensor, minus: Tensor | None, out: Tensor | None) -> bool:
    """Whether the kernel computes this call as torch would (module docstring): the result's dtype is the
    accumulation type, at most three leading dimensions, ``C`` channels everywhere, constant tables. Calls torch's
    path refuses stay there, to raise its own error with the kernel still on (a caller's mistake, not the
    kernel's failure: ``kernels.py``): a tensor on another device than ``x``, an ``out`` while ``x`` or ``minus``
    needs a gradient, an ``out`` whose rows overlap (a broadcast ``out``, stride 0)."""
    try:
        dtype, rows = _result(x, tables, minus)
    except RuntimeError:
        return False                                        # torch's path raises its own error
    width = x.shape[-1]
    grads = torch.is_grad_enabled() and (x.requires_grad or (minus is not None and minus.requires_grad))
    return (dtype in (torch.float32, torch.float64) and len(rows) <= 3
            and tables.shape[0] == 5 and tables.shape[-1] == width and (minus is None or minus.shape[-1] == width)
            and (out is None or (out.dtype == dtype and out.shape == (*rows, width) and not grads
                                 and all(s != 0 or n < 2 for s, n in zip(out.stride(), out.shape, strict=True))))
            and all(t.device == x.device for t in (tables, minus, out) if t is not None)
            and not (torch.is_grad_enabled() and tables.requires_grad))


def _result(x: Tensor, tables: Tensor, minus: Tensor | None) -> tuple[torch.dtype, torch.Size]:
    """The result's dtype (the tables' promoted with ``x``'s and ``minus``'s) and its leading dims (the broadcast
    of ``x``'s, the tables' rows and ``minus``'s; ``RuntimeError`` where they do not broadcast)."""
    dtype = torch.promote_types(tables.dtype, x.dtype)
    dtype = dtype if minus is None else torch.promote_types(dtype, minus.dtype)
    shapes = [x.shape[:-1], tables.shape[1:-1]] + ([] if minus is None else [minus.shape[:-1]])
    return dtype, torch.broadcast_shapes(*shapes)


def _strides(t: Tensor, rows: torch.Size) -> list[int]:
    """``t``'s strides of the three row dimensions (0 where it broadcasts) and of the channels."""
    full = t.expand(*rows, t.shape[-1])
    s = list(full.stride())
    return [0] * (4 - len(s)) + s


def _launch(x: Tensor, tables: Tensor, minus: Tensor | None, transpose: bool, out: Tensor | None) -> Tensor:
    """``apply_shifted`` by one launch of ``triton_rotation.shifted`` (no autograd)."""
    import triton

    (dtype, rows), width = _result(x, tables, minus), x.shape[-1]
    if out is None:
        out = torch.empty(*rows, width, dtype=dtype, device=x.device)
    dims = [1] * (3 - len(rows)) + list(rows)
    count = dims[0] * dims[1] * dims[2]
    if count == 0 or width == 0:
        return out
    table_rows = _strides(tables[0], rows)
    m = x if minus is None else minus
    kernel = kernel_module("pointgeope.model.triton_rotation").shifted
    grid = (triton.cdiv(count, BLOCK_R), triton.cdiv(width, BLOCK_C))
    with kernels.launch_device(x.device):
        kernel[grid](x, tables, m, out, count, dims[1], dims[2], width, *_strides(x, rows), *table_rows,
                     tables.stride(0), *_strides(m, rows), *_strides(out, rows), HAS_MINUS=minus is not None,
                     TRANSPOSE=transpose, F64=dtype == torch.float64, BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
                     num_warps=WARPS)
    return out


class _Shifted(torch.autograd.Function):
    """The kernel with gradients for ``x`` and ``minus`` (module docstring); the tables are constants."""

    @staticmethod
    def forward(ctx, x: Tensor, tables: Tensor, minus: Tensor | None, transpose: bool) -> Tensor:
        ctx.save_for_backward(tables)
        ctx.transpose, ctx.x_shape, ctx.x_dtype = transpose, x.shape, x.dtype
        ctx.minus = None if minus is None else (minus.shape, minus.dtype)
        return _launch(x, tables, minus, transpose, None)

    @staticmethod
    def backward(ctx, g: Tensor):
        (tables,) = ctx.saved_tensors
        gx = gm = None
        if ctx.needs_input_grad[0]:
            gx = _adjoint(g, tables, not ctx.transpose).sum_to_size(ctx.x_shape).to(ctx.x_dtype)
        if ctx.minus is not None and ctx.needs_input_grad[2]:
            gm = (-g).sum_to_size(ctx.minus[0]).to(ctx.minus[1])
        return gx, None, gm, None


def _adjoint(g: Tensor, tables: Tensor, transpose: bool) -> Tensor:
    """``R^T g`` (``R g`` with ``transpose``) in a backward whose forward ran the kernel: the kernel again (a new
    specialisation, ``TRANSPOSE`` flipped, compiled here), through the registered entry, so that a failure to
    compile or launch falls back to torch's ops as the forward's would (``Kernel.dispatch``, ``decided``)."""
    from pointgeope.model import rotation

    entry = rotation.KERNEL
    return entry.dispatch(g.device, lambda: _Shifted.apply(g, tables, None, transpose),
                          lambda: entry.torch(g, tables, None, transpose, None), decided=True)


def shifted(x: Tensor, tables: Tensor, minus: Tensor | None, transpose: bool, out: Tensor | None) -> Tensor:
    """``apply_shifted`` by the kernel (a call :func:`takes`): differentiable where ``x`` or ``minus`` needs a
    gradient (``out`` then is refused as torch refuses it: :func:`takes` leaves such calls to torch's path), else
    one launch into ``out`` (or a new tensor)."""
    grads = torch.is_grad_enabled() and (x.requires_grad or (minus is not None and minus.requires_grad))
    if not grads:
        return _launch(x, tables, minus, transpose, out)
    if out is not None:
        raise RuntimeError("apply_shifted: out= arguments don't support automatic differentiation, but one of "
                           "the arguments requires grad")
    return _Shifted.apply(x, tables, minus, transpose)


def tables_take(pos: Tensor, block_scale: Tensor, channels: int) -> bool:
    """Whether the tables' kernel builds ``rotation_tables(pos, block_scale, channels)``: positions ``(N, 3)``
    in float32 or float64, the scales (of at most ``channels // 3`` blocks) in their dtype and on their device,
    no gradient."""
    grads = torch.is_grad_enabled() and (pos.requires_grad or block_scale.requires_grad)
    return (pos.dim() == 2 and pos.shape[1] == 3 and pos.dtype in (torch.float32, torch.float64)
            and block_scale.dim() == 1 and 3 * block_scale.shape[0] <= channels and block_scale.device == pos.device
            and block_scale.dtype == pos.dtype
            and not grads)


def build_tables(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """``rotation_tables`` ``(5, N, C)`` in ``pos``'s dtype by one launch of ``triton_rotation.tables`` (a call
    :func:`tables_take`: ``block_scale`` already in ``pos``'s dtype, float32 or float64)."""
    import triton

    pos, scale = pos.contiguous(), block_scale.contiguous()
    out = torch.empty(5, pos.shape[0], channels, dtype=pos.dtype, device=pos.device)
    if out.numel() == 0:
        return out
    kernel = kernel_module("pointgeope.model.triton_rotation").tables
    grid = (triton.cdiv(pos.shape[0], TABLE_R), triton.cdiv(channels, TABLE_C))
    with kernels.launch_device(pos.device):
        kernel[grid](pos, scale, out, pos.shape[0], channels, scale.shape[0], F64=pos.dtype == torch.float64,
                     BLOCK_R=TABLE_R, BLOCK_C=TABLE_C, num_warps=WARPS)
    return out


def check_cases(device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    """``info --check``: the points' turn of a GeoPE layer (``R x``, then ``R^T`` of its gradient) on ``pairs``
    rows of width 64 in float32, and the queries' turn back of their ``(N, 16, 64)`` pairs minus the query
    (tables ``(5, N, 1, C)``), outputs and gradients against torch's path."""
    from pointgeope.model import rotation
    from pointgeope.model.kernel_check import _grads

    g = torch.Generator().manual_seed(3)
    coord = (torch.rand(pairs, 3, generator=g) * 4).to(device)
    scale = torch.tensor([1.0, 2.0, 4.0] * 7, device=device)
    with forced("torch"):       # the input by torch's path: the tables' kernel has its own row (tables_cases)
        tables, entry = rotation.rotation_tables(coord, scale, 64), rotation.KERNEL
    x, m = torch.randn(pairs, 64, generator=g).to(device), torch.randn(pairs, 64, generator=g).to(device)
    pairs_x = torch.randn(pairs, 16, 64, generator=g).to(device)

    def compare(got, want):
        return max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True)), f"rows={pairs} width=64"
    cases = []
    for label, fn, inputs in (("points fwd+bwd", lambda a: (a, tables, None, False, None), [x]),
                              ("pairs - q fwd+bwd", lambda a, b: (a, tables.unsqueeze(-2), b.unsqueeze(1), True,
                                                                  None), [pairs_x, m])):
        cases.append(kernels.CheckCase(label, lambda f=fn, i=inputs: _grads(lambda *a: entry(device, *f(*a)), i),
                                       lambda f=fn, i=inputs: _grads(lambda *a: entry.torch(*f(*a)), i),
                                       compare, 1e-5))
    return cases


def tables_cases(device: torch.device, points: int, pairs: int) -> list[kernels.CheckCase]:
    """``info --check``: the tables of ``points`` positions in a 10 x 8 x 3 m crop at the S3DIS recipe's first
    scales (grid 0.04 m: phases up to hundreds of radians), width 64, float32, against torch's path; the
    difference is that of the phases' rounding (``cos`` and ``sin`` of angles known to ``2^-24`` of their size)."""
    from pointgeope.geope import frequencies
    from pointgeope.model import rotation

    g = torch.Generator().manual_seed(4)
    coord = (torch.rand(points, 3, generator=g) * torch.tensor([10.0, 8.0, 3.0])).to(device)
    scale = (frequencies(64) * 25.0 / 3).to(device, torch.float32)        # the layers' scales: the positions' dtype
    entry = rotation.TABLES_KERNEL

    def compare(got, want):
        return float((got - want).abs().max()), f"points={points} width=64"
    return [kernels.CheckCase("float32", lambda: entry(device, coord, scale, 64),
                              lambda: entry.torch(coord, scale, 64), compare, 1e-4)]


def register(torch_fn: Callable[..., Tensor], torch_tables: Callable[..., Tensor]) -> tuple[kernels.Kernel,
                                                                                             kernels.Kernel]:
    """The kernels' entries in :mod:`pointgeope.model.kernels` (``apply_shifted``, ``rotation_tables``: CUDA
    defaults), with ``rotation``'s torch paths of the same arguments, and their ``info --check`` cases."""
    return (kernels.register("apply_shifted", triton=shifted, torch=torch_fn, check=check_cases),
            kernels.register("rotation_tables", triton=build_tables, torch=torch_tables, check=tables_cases))
