"""Batch norm with its ReLU as one op, :class:`BatchNormReLU` (a ``BatchNorm1d`` whose output is ``relu``'d),
and without it, :class:`BatchNorm` (a ``BatchNorm1d``), on the same Triton kernels.

Point Transformer's ``Linear-BN-ReLU`` runs over ``(N, C)`` point rows and, in the attention's MLPs, over the
``(N k, C)`` pair rows (``N k`` = 20M at the recipe's 16 x 80k batch). Per channel ``c`` over the rows::

    y = max(0, w_c (x - mean_c) / sqrt(var_c + eps) + b_c)        (N, C) -> (N, C), in x's dtype

(without ``max(0, .)`` for :class:`BatchNorm`: the PTv1 block's third norm, whose ReLU follows the residual
add) with the batch's mean and biased variance in training (the running buffers move by ``momentum`` towards
the mean and the unbiased variance, as torch's) and the running ones in eval. On the Triton path
(``triton_norm.py``) that is two launches forward in training (the statistics, then the normalisation), one in
eval (the normalisation makes its scale and shift from the running buffers: the bits of the two launches it
replaced) and two backward, statistics and sums in float32 (float64 for float64 inputs) whatever the input's
type, reduced in a fixed order without float atomics (deterministic; an int32 ticket,
:mod:`~pointgeope.model.norm_tickets`, picks the program that finishes); a bf16 input is read as bf16 (torch's
bf16 batch norm was slower than its float32 one on an H200, ``docs/gpu.md``).

**Same module, same checkpoints.** Both subclass ``nn.BatchNorm1d``: the same
parameters and buffers (``weight``, ``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked``),
so state dicts are unchanged; where the ReLU was a module of an ``nn.Sequential``, an ``nn.Identity`` keeps its
index. Where the kernel does not run (the CPU, ``POINTGEOPE_KERNELS=torch``, inputs it does not take: not
2-D, no affine parameters, other dtypes) the forward is exactly ``relu_(BatchNorm1d.forward(x))``
(:class:`BatchNorm`: ``BatchNorm1d.forward(x)``).

**Which path.** The kernel is registered (:mod:`pointgeope.model.kernels`, ``batch_norm_relu``) as a CUDA default,
as the other Triton kernels are: on an H200 (GPU run 6) it took the published 16 x 80k step to 0.91-0.92x its time
with torch's batch norm and ReLU, and 0.94-0.95x its peak memory, float32 and bf16, ``rpe`` and ``geope``; run 8 the
same in float32, in bf16 0.93x ``geope`` and 1.01x ``rpe`` (``docs/gpu.md``). The plain norm is registered beside it
(``batch_norm``, its own ``info --check`` case), the same kernels with the activation a compile-time flag, and is a
CUDA default in padded batches only (``cuda_default``: a :class:`~pointgeope.model.kernels.DefaultWhere` asking
:func:`pointgeope.model.padding.padded` at each call); elsewhere it is opt-in (``POINTGEOPE_KERNELS=triton``) and
torch's ``BatchNorm1d`` runs. Unpadded, torch's ``BatchNorm1d`` (2 to 3 passes over the rows) was faster: on an
H200 (GPU run 8, ``bench/bench_norm.py``'s plain cases) the kernel took 1.03-2.21x its time at the recipe batch's
rows and widths, forward + backward, bf16 and float32. Padded, the torch path is not ``BatchNorm1d`` but the
prefix statistics on torch ops (:func:`~pointgeope.model.prefix_norm.prefix_batch_norm`: about 11 passes forward
and 15 backward, where the kernel makes 2 and 3), so there the kernel is the default; that choice rests on the
pass counts and is not yet measured on a GPU (the GPU check's ``graphs`` and ``graphs16`` steps time both,
``bench/bench_graphs.py``). ``POINTGEOPE_KERNELS=torch`` turns both kernels off; CPU tensors take them under the
interpreter (``POINTGEOPE_KERNELS=triton``). A kernel that fails falls back to the torch path. The functions
(:func:`batch_norm_relu`, :func:`batch_norm`) refuse what ``F.batch_norm`` refuses, in one line before any kernel
(:func:`check_arguments`: shapes, dtypes, devices, one row in training), and hand what the kernel does not take to
torch as the modules do (:func:`~pointgeope.model.norm_arguments.kernel_takes`): a caller's mistake never turns the
kernel off.

**Padded batches.** :class:`BatchNorm` (torch's ``BatchNorm1d``, no ReLU) and :class:`BatchNormReLU` take their
training statistics over a padded batch's real rows inside :func:`pointgeope.model.padding.batch_rows`: what
the CUDA-graph step runs (``engine/graphs.py``). Both do it on the kernels where they run (on CUDA by default:
inside :func:`~pointgeope.model.padding.batch_rows` both kernels are defaults; the real row count read on the
device: the statistics' reductions stop there, and only those rows take the statistics' part of the gradient),
else on torch ops (:func:`~pointgeope.model.prefix_norm.prefix_batch_norm`; also for ``momentum=None``, whose step
is a tensor).

**DDP.** The engine keeps batch norm per process (as published). For synchronised statistics use
:func:`convert_sync_batchnorm`: torch's ``nn.SyncBatchNorm.convert_sync_batchnorm`` would turn a
:class:`BatchNormReLU` into a plain ``SyncBatchNorm`` and lose its ReLU.
"""
from __future__ import annotations

from functools import partial
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pointgeope.model import kernels, norm_tickets, padding
from pointgeope.model.attention_reference import torch_grads
from pointgeope.model.first_order import KERNEL_WAY, first_order_only
from pointgeope.model.kernel_choice import kernel_module
from pointgeope.model.norm_arguments import check_arguments, kernel_takes
from pointgeope.model.norm_check import check_cases
from pointgeope.model.prefix_norm import prefix_batch_norm

# check_arguments (norm_arguments) and prefix_batch_norm (prefix_norm) stay importable from here.
__all__ = ["BatchNorm", "BatchNormReLU", "prefix_batch_norm", "SyncBatchNormReLU", "batch_norm_relu", "batch_norm",
           "reference", "plain_reference", "check_arguments", "convert_sync_batchnorm", "tiles", "KERNEL",
           "PLAIN_KERNEL"]

WARPS = 4
MAX_PARTIALS = 1024        # programs along the rows of the reductions (their partials: a (T, C) buffer)


def triton_kernels() -> ModuleType:
    """``triton_norm``, its kernels decorated in the mode ``TRITON_INTERPRET`` asks for now."""
    return kernel_module("pointgeope.model.triton_norm")


def tiles(channels: int, f64: bool = False) -> tuple[int, int, int]:
    """(BLOCK_R, BLOCK_C, BLOCK_T): rows and channels of a tile (about 2048 elements, 1024 for float64, so
    that no kernel spills: ``bench/triton_compile_check.py``) and partials per step of the reductions' last program."""
    import triton

    block_c = min(64, triton.next_power_of_2(channels))
    budget = 1024 if f64 else 2048
    return max(16, budget // block_c), block_c, max(16, budget // block_c)


def partition(rows: int, block_r: int) -> tuple[int, int]:
    """(ROWS, T): rows per program of the reductions (a multiple of ``block_r``) and their number ``T``,
    at most :data:`MAX_PARTIALS`."""
    blocks = -(-rows // block_r)
    per = block_r * -(-blocks // MAX_PARTIALS)
    return per, -(-rows // per)


def _launch(kernel, grid: tuple[int, ...], *args, device: torch.device, **meta) -> None:
    with kernels.launch_device(device):
        kernel[grid](*args, num_warps=WARPS, **meta)


def plain_reference(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
                    running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float,
                    valid: Tensor | None = None, count: Tensor | None = None) -> Tensor:
    """torch's ``batch_norm(x)`` with ``F.batch_norm``'s arguments: the plain norm's torch path and fallback;
    with ``valid`` (a padded batch's real rows) the statistics of those rows (:func:`prefix_batch_norm`);
    ``count`` (a module's ``num_batches_tracked``, which the kernel path counts in ``normalize``) plus one."""
    if count is not None:
        count.add_(1)
    if valid is not None:
        return prefix_batch_norm(x, valid, weight, bias, running_mean, running_var, momentum, eps)
    return F.batch_norm(x, running_mean, running_var, weight, bias, batch_stats, momentum, eps)


def reference(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
              batch_stats: bool, momentum: float, eps: float, valid: Tensor | None = None,
              count: Tensor | None = None) -> Tensor:
    """torch's ``relu(batch_norm(x))``, :func:`plain_reference` and ``relu_``: the torch path and the fallback."""
    return torch.relu_(plain_reference(x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid,
                                       count))


def _statistics(x: Tensor, weight: Tensor, bias: Tensor, eps: float, acc: torch.dtype,
                valid: Tensor | None = None) -> Tensor:
    """The ``(5, C)`` statistics (``triton_norm``: mean, invstd, scale, shift, unbiased variance) of the
    batch's rows (the first ``valid`` of them where given): training's first launch."""
    (r, c), f64 = x.shape, acc == torch.float64
    block_r, block_c, block_t = tiles(c, f64)
    rows, t = partition(r, block_r)
    blocks, dev = -(-c // block_c), x.device
    stats = torch.empty(5, c, dtype=acc, device=dev)
    partials = torch.empty(2, t, c, dtype=acc, device=dev)
    with norm_tickets.taken(dev, blocks) as ticket:
        _launch(triton_kernels().statistics, (t, blocks), x, partials[0], partials[1], weight, bias, stats,
                _count(valid, stats), ticket, r, c, t, rows, eps, PREFIX=valid is not None, F64=f64,
                BLOCK_R=block_r, BLOCK_T=block_t, BLOCK_C=block_c, device=dev)
    return stats


def _count(valid: Tensor | None, unused: Tensor) -> Tensor:
    """The kernels' ``valid_ptr``: the real row count, or (no ``PREFIX``) any tensor, which they do not read."""
    return unused if valid is None else valid


def _kernel(relu: bool) -> kernels.Kernel:
    """The registered kernel of the norm with its ReLU (:data:`KERNEL`) or without it (:data:`PLAIN_KERNEL`)."""
    return KERNEL if relu else PLAIN_KERNEL


def normalized(x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
               running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float, valid: Tensor | None,
               count: Tensor | None, relu: bool, residual: bool) -> tuple[Tensor, Tensor]:
    """The forward's launches, shared by this file's op and the blocks' tail (``residual_norm``): in training the
    statistics launch, then ``normalize`` (``y = x scale + shift [+ identity] [relu]``, the running buffers and the
    batch count updated there); in eval ``normalize`` alone, making scale and shift from the running buffers (and
    storing them). ``x``, ``identity`` contiguous ``(R, C)``; returns ``y`` (``R, C``) and the ``(5, C)``
    statistics a backward reads."""
    (r, c), f64 = x.shape, torch.float64 in (x.dtype, weight.dtype)
    acc = torch.float64 if f64 else torch.float32
    stats = _statistics(x, weight, bias, eps, acc, valid) if batch_stats else torch.empty(5, c, dtype=acc,
                                                                                           device=x.device)
    update = batch_stats and running_mean is not None
    block_r, block_c, _ = tiles(c, f64)
    y = torch.empty_like(x)
    _launch(triton_kernels().normalize, (-(-r // block_r), -(-c // block_c)), x, stats, y, identity,
            running_mean if update or not batch_stats else stats,
            running_var if update or not batch_stats else stats, stats if count is None else count, weight, bias,
            r, c, momentum, eps, RUNNING=not batch_stats, UPDATE=update, COUNT=count is not None, RELU=relu,
            RESIDUAL=residual, F64=f64, BLOCK_R=block_r, BLOCK_C=block_c, device=x.device)
    return y, stats


class _FusedBatchNorm(torch.autograd.Function):
    """The op on the Triton kernels: ``relu(batch_norm(x))`` with ``relu`` (:data:`KERNEL`'s), ``batch_norm(x)``
    without (:data:`PLAIN_KERNEL`'s); saves ``x``, the parameters and the ``(5, C)`` statistics (no normalised
    copy of ``x``: the backward recomputes it)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
                running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float,
                valid: Tensor | None, relu: bool, count: Tensor | None = None) -> Tensor:
        x = x.contiguous()
        y, stats = normalized(x, x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid,
                              count, relu=relu, residual=False)
        ctx.save_for_backward(x, weight, bias, stats, valid)
        ctx.batch_stats, ctx.eps, ctx.relu = batch_stats, eps, relu
        return y

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        x, weight, bias, stats, valid = ctx.saved_tensors
        needs = list(ctx.needs_input_grad[:3])
        batch, eps, relu = ctx.batch_stats, ctx.eps, ctx.relu
        kernel = _kernel(relu)

        def torch_path(a, w, b):        # batch statistics again, or the forward's running ones (rows 0 and 4)
            return kernel.torch(a, w, b, None if batch else stats[0], None if batch else stats[4], batch, 0.0, eps,
                                valid)
        grads = kernel.dispatch(x.device, lambda: _backward(x, g.contiguous(), stats, weight, bias, batch, needs,
                                                            valid, relu),
                                lambda: torch_grads(torch_path, [x, weight, bias], needs, g),
                                decided=True)       # this forward ran Triton: the backward follows it
        return (*grads, None, None, None, None, None, None, None, None)


def _backward(x: Tensor, g: Tensor, stats: Tensor, weight: Tensor, bias: Tensor, batch_stats: bool,
              needs: list[bool], valid: Tensor | None = None, relu: bool = True, out: Tensor | None = None,
              gm: Tensor | None = None) -> tuple:
    """``(dx, dw, db)`` by the Triton kernels (``None`` where ``needs`` says no); ``valid``: the statistics were
    the first ``valid`` rows' (a padded batch); ``relu``: the forward's activation. The blocks' tail
    (``residual_norm``) gives its saved output ``out``, whose ReLU mask both kernels apply to ``g`` (``RESIDUAL``),
    and ``gm`` (``g``'s shape and type, or ``None``), where ``grad_input`` stores the masked gradient."""
    (r, c), f64, dev = x.shape, stats.dtype == torch.float64, x.device
    block_r, block_c, block_t = tiles(c, f64)
    rows, t = partition(r, block_r)
    k, masks = triton_kernels(), x if out is None else out         # masks: read only with RESIDUAL
    sums = torch.empty(2, c, dtype=stats.dtype, device=dev)   # grad_sums stores all of it; read only where it ran
    if batch_stats or needs[1] or needs[2]:
        partials = torch.empty(2, t, c, dtype=stats.dtype, device=dev)
        with norm_tickets.taken(dev, -(-c // block_c)) as ticket:
            _launch(k.grad_sums, (t, -(-c // block_c)), x, g, masks, stats, partials[0], partials[1], sums, ticket, r,
                    c, t, rows, RELU=relu, RESIDUAL=out is not None, F64=f64, BLOCK_R=block_r, BLOCK_T=block_t,
                    BLOCK_C=block_c, device=dev)
    dx = None
    if needs[0] or gm is not None:
        dx = torch.empty_like(x)
        _launch(k.grad_input, (-(-r // block_r), -(-c // block_c)), x, g, masks, dx if gm is None else gm, stats,
                sums, dx, _count(valid, sums), r, c, BATCH=batch_stats, PREFIX=valid is not None, RELU=relu,
                RESIDUAL=out is not None, F64=f64, BLOCK_R=block_r, BLOCK_C=block_c, device=dev)
    return (dx if needs[0] else None, sums[1].to(weight.dtype) if needs[1] else None,
            sums[0].to(bias.dtype) if needs[2] else None)


def batch_norm_relu(x: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None = None,
                    running_var: Tensor | None = None, batch_stats: bool = True, momentum: float = 0.1,
                    eps: float = 1e-5, valid: Tensor | None = None) -> Tensor:
    """``relu(F.batch_norm(x, running_mean, running_var, weight, bias, batch_stats, momentum, eps))`` for
    ``x (R, C)``, on the path :data:`KERNEL` chooses (module docstring); with ``valid`` (0-dim int64 on ``x``'s
    device) the training statistics of the first ``valid`` rows (a padded batch, :func:`prefix_batch_norm`).
    Only ``(R, C)`` rows are taken (``F.batch_norm``'s ``(N, C, L)`` is not); arguments torch refuses are refused
    here too, before any kernel (:func:`check_arguments`)."""
    return _functional(True, x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid)


def batch_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None = None,
               running_var: Tensor | None = None, batch_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5,
               valid: Tensor | None = None) -> Tensor:
    """:func:`batch_norm_relu` without the ReLU (``F.batch_norm``'s value), on the path :data:`PLAIN_KERNEL`
    chooses: the same kernels with the activation compiled out (a CUDA default inside
    :func:`~pointgeope.model.padding.batch_rows` only: a ``valid`` given outside it takes the torch ops there)."""
    return _functional(False, x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid)


def _functional(relu: bool, x: Tensor, weight: Tensor | None, bias: Tensor | None, *rest) -> Tensor:
    """The functions' one body: the arguments checked, then the kernel where it takes them
    (:func:`~pointgeope.model.norm_arguments.kernel_takes`), else the torch path (as the modules do)."""
    running_mean, running_var, batch_stats = rest[:3]
    check_arguments(x, weight, bias, running_mean, running_var, batch_stats)
    kernel = _kernel(relu)
    if not kernel_takes(x, weight, bias, batch_stats):
        kernel.ran.add("torch")
        return kernel.torch(x, weight, bias, *rest)
    return kernel(x.device, x, weight, bias, *rest)


class BatchNorm(nn.BatchNorm1d):
    """torch's ``BatchNorm1d`` (the same arguments, parameters, buffers and outputs) on the Triton kernels where
    :data:`PLAIN_KERNEL` runs (module docstring), and that, in training inside
    :func:`pointgeope.model.padding.batch_rows`, takes its statistics over a padded batch's real rows only.
    Shapes: ``(R, C) -> (R, C)`` (other shapes: torch's path)."""

    relu = False                # BatchNormReLU: True; the kernel is _kernel(relu)
    sync: type | None = None    # what convert_sync_batchnorm makes of it (None: torch's plain SyncBatchNorm)

    def forward(self, x: Tensor) -> Tensor:
        return self._forward(x, _kernel(self.relu), (), torch.relu_ if self.relu else lambda y: y)

    def _forward(self, x: Tensor, kernel: kernels.Kernel, extra: tuple, after) -> Tensor:
        """The forward on ``kernel`` (``F.batch_norm``'s arguments and ``valid``, ``extra`` after ``x``: the
        residual norm's identity) where it runs and takes ``x``, else ``after`` of the torch path's norm."""
        batch_stats = self.training or self.running_mean is None
        valid = padding.valid_rows(x.shape[0]) if self.training else None
        cumulative = valid is not None and self.momentum is None   # its step a tensor: torch ops, no host read
        if cumulative or not (kernel.enabled(x.device) and kernel_takes(x, self.weight, self.bias, batch_stats)):
            return after(self._torch_forward(x, valid))
        count = self.num_batches_tracked if self.momentum is not None and self._counts() else None
        factor = self._factor() if count is None else self.momentum      # count: + 1 in the kernel (or its fallback)
        if isinstance(factor, Tensor):
            factor = float(factor)
        keep = not self.training or self.track_running_stats
        return kernel(x.device, x, *extra, self.weight, self.bias, self.running_mean if keep else None,
                      self.running_var if keep else None, batch_stats, factor, self.eps, valid, count)

    def _torch_forward(self, x: Tensor, valid: Tensor | None) -> Tensor:
        """torch's ``BatchNorm1d.forward``, or with ``valid`` (a padded batch in training) the statistics of
        the first ``valid`` rows (:func:`prefix_batch_norm`)."""
        if valid is None:
            return super().forward(x)
        keep = self.track_running_stats
        return prefix_batch_norm(x, valid, self.weight, self.bias, self.running_mean if keep else None,
                                 self.running_var if keep else None, self._factor(), self.eps)

    def _factor(self) -> float | Tensor:
        """The running buffers' step, counting this batch (as torch's ``_BatchNorm.forward``): ``momentum``, or
        ``1 / num_batches_tracked`` (a tensor: no host read) for a cumulative average."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self._counts():
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / self.num_batches_tracked
        return factor

    def _counts(self) -> bool:
        """Whether this forward counts a batch in ``num_batches_tracked`` (as torch's ``_BatchNorm.forward``)."""
        return self.training and self.track_running_stats and self.num_batches_tracked is not None


class SyncBatchNormReLU(nn.SyncBatchNorm):
    """``relu(SyncBatchNorm(x))``, torch's path: what :func:`convert_sync_batchnorm` makes of a
    :class:`BatchNormReLU` (the same parameters and buffers)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu_(super().forward(x))


class BatchNormReLU(BatchNorm):
    """``relu(BatchNorm1d(x))`` in one op where the kernel runs (module docstring); ``BatchNorm1d``'s
    arguments, parameters and buffers. Shapes: ``(R, C) -> (R, C)`` (other shapes: torch's path)."""

    relu = True
    sync = SyncBatchNormReLU


def convert_sync_batchnorm(module: nn.Module, process_group=None) -> nn.Module:
    """torch's ``nn.SyncBatchNorm.convert_sync_batchnorm`` that keeps what a :class:`BatchNorm` does after its
    norm: one whose ``sync`` names a ``SyncBatchNorm`` of its own becomes that, sharing its parameters and buffers
    (:class:`BatchNormReLU` a :class:`SyncBatchNormReLU`, a block's ``residual_norm.BatchNormAddReLU``, whose forward
    takes the identity, a ``SyncBatchNormAddReLU``); other batch norms as torch converts them."""
    out = module
    sync = module.sync if isinstance(module, BatchNorm) else None
    if sync is not None:
        out = sync(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                   process_group)
        if module.affine:
            out.weight, out.bias = module.weight, module.bias
        out.running_mean, out.running_var = module.running_mean, module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.train(module.training)
    elif isinstance(module, nn.modules.batchnorm._BatchNorm):
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    for name, child in module.named_children():
        out.add_module(name, convert_sync_batchnorm(child, process_group))
    return out


def _fused(relu: bool):
    """The Triton function of the norm with (``relu``) or without its ReLU: ``F.batch_norm``'s arguments and
    ``valid``, by :class:`_FusedBatchNorm`."""
    def run(x: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
            batch_stats: bool, momentum: float, eps: float, valid: Tensor | None = None,
            count: Tensor | None = None) -> Tensor:
        return _FusedBatchNorm.apply(x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid,
                                     relu, count)
    return run


# A CUDA default since GPU run 6 (module docstring): 0.91-0.92x the recipe's step.
KERNEL = kernels.register("batch_norm_relu", _fused(relu=True), reference, atomics=False,
                          check=partial(check_cases, True))
# The same kernels without the ReLU (a block's third norm): a CUDA default in padded batches only (module docstring:
# there its torch path is the prefix statistics' ~11 + 15 passes, against the kernel's 2 + 3; not yet timed on a GPU);
# unpadded opt-in, 1.03-2.21x torch's BatchNorm1d in GPU run 8.
PLAIN_KERNEL = kernels.register("batch_norm", _fused(relu=False), plain_reference, atomics=False,
                                check=partial(check_cases, False),
                                cuda_default=kernels.DefaultWhere("in padded batches", padding.padded))
