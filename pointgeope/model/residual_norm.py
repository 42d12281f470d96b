"""The PTv1 block's tail, its third batch norm (no ReLU), the residual add and the ReLU, as one op (one launch in
eval, a CUDA default; two in training, opt-in): :class:`BatchNormAddReLU` (a :class:`~pointgeope.model.norm.BatchNorm`,
so a ``BatchNorm1d``, whose forward takes the identity too). Per channel ``c`` of ``x, identity (R, C)``, in eval
(training: the batch's statistics)::

    out = max(0, w_c (x - running_mean_c) / sqrt(running_var_c + eps) + b_c + identity)     (R, C), x's dtype

**Eval: one launch.** On CUDA torch's path is ``BatchNorm1d``'s eval forward (three device operations for
``(R, C)`` rows: a copy of the running mean, the inverse deviation, the normalisation), the add and the ReLU: 5
launches a block. The Triton path is the eval norm's one launch (``triton_norm.normalize`` on the running buffers,
as :mod:`~pointgeope.model.norm` runs it) with the identity added to ``x scale + shift`` before the ReLU, in the
same float32 (float64) arithmetic: the same computation as that launch and the two elementwise ops, fewer
launches and fewer bytes (``x`` and ``identity`` read once, ``out`` written once; torch writes and reads the norm's
output and the sum). In float32 and float64 it is the bits of the norm's launch followed by torch's add and ReLU;
in bf16 and float16 the sum is rounded once to the output's type, where torch rounds the norm's output first
(so the kernel's result is within one rounding of the intermediate of torch's). It is registered as a CUDA default
(:data:`EVAL_KERNEL`, ``batch_norm_add_relu_eval``, with its ``info --check`` rows): the published test's forward
is eval. Gradients in eval (a frozen-statistics fine-tune) go through the ReLU's mask (``g`` unless ``out <= 0``:
torch's ``threshold_backward`` rule, so a NaN output passes ``g``) to the identity and to the norm's
fixed-statistics backward, on the norm's kernels (``grad_sums``, ``grad_input``, the mask applied in both from the
saved output, as in training).

**Training** on the kernels (:data:`KERNEL`, ``batch_norm_add_relu``) is the norm's two launches with the add and the
ReLU in the second: the statistics (``triton_norm.statistics``, of a padded batch's real rows too), then
``normalize`` with the identity, the running buffers and the batch count moved there as the norm's; backward the
norm's two (``grad_sums``, ``grad_input`` with ``RESIDUAL``: each applies the ReLU's mask, read from the saved
output, to ``g``, and ``grad_input`` also stores the masked gradient, the identity's), where torch's path
(``BatchNorm1d``, the add, the ReLU) makes the norm, the add and the ReLU forward and the ReLU's and the norm's
backward. It is opt-in (``POINTGEOPE_KERNELS=triton``):
unpadded it runs the plain norm's kernels, which took 1.03-2.21x torch's ``BatchNorm1d`` on an H200 (GPU run 8,
``norm.py``), and no GPU has timed it against torch's norm, add and ReLU yet (``bench/bench_norm.py``'s ``residual``
cases, the GPU check's ``norm_op`` step, will). Without it, training is ``BatchNorm``'s forward (its own kernel
where that runs: ``norm.PLAIN_KERNEL``, a CUDA default in padded batches), then the add and the ReLU, as before;
so is every call the kernels do not take (the CPU, ``POINTGEOPE_KERNELS=torch``, no affine parameters, an
identity of another shape, dtype or device, a kernel that failed): exactly ``relu_(BatchNorm.forward(x) +
identity)``. Same parameters and buffers as ``BatchNorm1d``, so state dicts are unchanged; for synchronised
statistics ``norm.convert_sync_batchnorm`` makes it a :class:`SyncBatchNormAddReLU` (torch's path, the identity kept).
"""
from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from pointgeope.model import kernels
from pointgeope.model.attention_reference import torch_grads
from pointgeope.model.first_order import KERNEL_WAY, first_order_only
from pointgeope.model.norm import BatchNorm, _backward, normalized, plain_reference
from pointgeope.model.norm_check import residual_cases

__all__ = ["BatchNormAddReLU", "SyncBatchNormAddReLU", "reference", "EVAL_KERNEL", "KERNEL"]


def reference(x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
              running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float, valid: Tensor | None = None,
              count: Tensor | None = None) -> Tensor:
    """torch's ``relu(batch_norm(x) + identity)`` (``F.batch_norm``'s arguments; ``valid`` and ``count`` as
    :func:`~pointgeope.model.norm.plain_reference` takes them): the torch path and the fallback."""
    return torch.relu_(plain_reference(x, weight, bias, running_mean, running_var, batch_stats, momentum, eps, valid,
                                       count) + identity)


class _FusedResidual(torch.autograd.Function):
    """:func:`reference` on the Triton kernels: in training the norm's statistics launch, then ``normalize`` with
    ``RESIDUAL`` and ``RELU`` (the running buffers and the batch count moved there, as the norm's); in eval that
    launch alone, on the running buffers. Saves ``x``, the parameters, the ``(5, C)`` statistics and the output
    (the ReLU's mask). Backward: ``gm = g [not out <= 0]`` (torch's ``threshold_backward`` rule: NaN passes ``g``)
    is the identity's gradient and the norm's upstream one; the norm's two backward kernels apply the mask
    themselves from ``out`` (``RESIDUAL``), ``grad_input`` storing ``gm`` too: two launches, no pass of the mask's
    own (the torch fallback makes ``gm`` by ``torch.where`` and the norm's gradients by autograd)."""

    @staticmethod
    def forward(ctx, x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
                running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float, valid: Tensor | None,
                count: Tensor | None) -> Tensor:
        x, identity = x.contiguous(), identity.contiguous()
        out, stats = normalized(x, identity, weight, bias, running_mean, running_var, batch_stats, momentum, eps,
                                valid, count, relu=True, residual=True)
        ctx.save_for_backward(x, weight, bias, stats, valid, out)
        ctx.batch_stats, ctx.eps = batch_stats, eps
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        x, weight, bias, stats, valid, out = ctx.saved_tensors
        g, needs = g.contiguous(), [ctx.needs_input_grad[0], *ctx.needs_input_grad[2:4]]
        gm = torch.empty_like(g) if ctx.needs_input_grad[1] else None     # the identity's: the masked g
        batch, eps = ctx.batch_stats, ctx.eps

        def torch_path(a, w, b):        # batch statistics again, or the forward's running ones (rows 0 and 4)
            return plain_reference(a, w, b, None if batch else stats[0], None if batch else stats[4], batch, 0.0,
                                   eps, valid)

        def on_torch():                 # the ReLU's mask (NaN passes g), then the norm's backward by autograd
            masked = torch.where(out <= 0, 0, g)
            return *torch_grads(torch_path, [x, weight, bias], needs, masked), masked if gm is not None else None
        dx, dw, db, did = _kernel(batch).dispatch(
            x.device, lambda: (*_backward(x, g, stats, weight, bias, batch, needs, valid, relu=False, out=out, gm=gm),
                               gm), on_torch, decided=True)
        return dx, did, dw, db, None, None, None, None, None, None, None


def _kernel(batch_stats: bool) -> kernels.Kernel:
    """The registered kernel of training (batch statistics: :data:`KERNEL`) or of eval (:data:`EVAL_KERNEL`)."""
    return KERNEL if batch_stats else EVAL_KERNEL


class SyncBatchNormAddReLU(nn.SyncBatchNorm):
    """``relu(SyncBatchNorm(x) + identity)``, torch's path: what :func:`~pointgeope.model.norm.convert_sync_batchnorm`
    makes of a :class:`BatchNormAddReLU` (the same parameters and buffers; its forward takes the identity too)."""

    def forward(self, x: Tensor, identity: Tensor) -> Tensor:
        return torch.relu_(super().forward(x) + identity)


class BatchNormAddReLU(BatchNorm):
    """``relu(BatchNorm1d(x) + identity)``: ``forward(x, identity)`` on :data:`EVAL_KERNEL` in eval and
    :data:`KERNEL` in training where they run and take the call (module docstring), else ``BatchNorm``'s forward
    (its own kernel where that runs), the add and the ReLU. Shapes: ``x (R, C)``, ``identity`` broadcastable to it
    (``(R, C)``, ``x``'s dtype and device for the kernels) -> ``(R, C)``."""

    sync = SyncBatchNormAddReLU

    def forward(self, x: Tensor, identity: Tensor) -> Tensor:
        kernel = _kernel(self.training or self.running_mean is None)
        if (kernel.enabled(x.device) and identity.shape == x.shape and identity.dtype == x.dtype
                and identity.device == x.device):
            return self._forward(x, kernel, (identity,), lambda y: torch.relu_(y + identity))
        return torch.relu_(super().forward(x) + identity)


def _fused(x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor | None,
           running_var: Tensor | None, batch_stats: bool, momentum: float, eps: float, valid: Tensor | None = None,
           count: Tensor | None = None) -> Tensor:
    """:func:`reference`'s arguments, by :class:`_FusedResidual`."""
    return _FusedResidual.apply(x, identity, weight, bias, running_mean, running_var, batch_stats, momentum, eps,
                                valid, count)


# A CUDA default: the eval norm's one launch with the add and the ReLU folded in (module docstring).
EVAL_KERNEL = kernels.register("batch_norm_add_relu_eval", _fused, reference, atomics=False,
                               check=partial(residual_cases, False))
# Training: opt-in (POINTGEOPE_KERNELS=triton), as the plain norm is outside padded batches (module docstring).
KERNEL = kernels.register("batch_norm_add_relu", _fused, reference, atomics=False, check=partial(residual_cases, True),
                          cuda_default=False)
