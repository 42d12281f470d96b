"""The PTv1 block's tail, its third batch norm (no ReLU), the residual add and the ReLU, as one op in eval mode:
:class:`BatchNormAddReLU` (a :class:`~pointgeope.model.norm.BatchNorm`, so a ``BatchNorm1d``, whose forward
takes the identity too). Per channel ``c`` of ``x, identity (R, C)``, with the running buffers::

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
is eval. Gradients in eval (a frozen-statistics fine-tune) go through the ReLU's mask (``out > 0``, torch's
``threshold_backward`` rule) to the identity and to the norm's fixed-statistics backward, on the norm's kernels
(``grad_sums``, ``grad_input``) as the eval norm's backward runs.

**Training** is ``BatchNorm``'s forward (its kernels where they run: ``norm.PLAIN_KERNEL``, a CUDA default in padded
batches), then the add and the ReLU, as before; so is every call the kernel does not take (the CPU,
``POINTGEOPE_KERNELS=torch``, no affine parameters or no running buffers, an identity of another shape, dtype or
device, a kernel that failed): exactly ``relu_(BatchNorm.forward(x) + identity)``. Same parameters and buffers as
``BatchNorm1d``, so state dicts are unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pointgeope.model import kernels
from pointgeope.model.attention_reference import torch_grads
from pointgeope.model.first_order import KERNEL_WAY, first_order_only
from pointgeope.model.norm import BatchNorm, _backward, _launch, tiles, triton_kernels
from pointgeope.model.norm_arguments import kernel_takes
from pointgeope.model.norm_check import residual_cases

__all__ = ["BatchNormAddReLU", "eval_reference", "takes", "EVAL_KERNEL"]


def eval_reference(x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor,
                   running_var: Tensor, eps: float) -> Tensor:
    """torch's ``relu(batch_norm(x) + identity)`` in eval mode (the running buffers): the torch path and fallback."""
    return torch.relu_(F.batch_norm(x, running_mean, running_var, weight, bias, False, 0.0, eps) + identity)


def takes(x: Tensor, identity: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
          running_var: Tensor | None) -> bool:
    """Whether the eval kernel takes the call: what the norm's kernel takes in eval
    (:func:`~pointgeope.model.norm_arguments.kernel_takes`), running buffers, and an identity of ``x``'s shape,
    dtype and device (else torch's add, which broadcasts and promotes)."""
    return (running_mean is not None and running_var is not None and kernel_takes(x, weight, bias, False)
            and identity.shape == x.shape and identity.dtype == x.dtype and identity.device == x.device)


class _EvalResidual(torch.autograd.Function):
    """:func:`eval_reference` on the Triton kernels: one ``normalize`` launch forward (``RUNNING``, ``RELU``,
    ``RESIDUAL``); saves ``x``, the parameters, the ``(5, C)`` statistics it stored and the output (the ReLU's
    mask)."""

    @staticmethod
    def forward(ctx, x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor,
                running_var: Tensor, eps: float) -> Tensor:
        x, identity = x.contiguous(), identity.contiguous()
        (r, c), f64 = x.shape, torch.float64 in (x.dtype, weight.dtype)
        stats = torch.empty(5, c, dtype=torch.float64 if f64 else torch.float32, device=x.device)
        block_r, block_c, _ = tiles(c, f64)
        out = torch.empty_like(x)
        _launch(triton_kernels().normalize, (-(-r // block_r), -(-c // block_c)), x, stats, out, identity,
                running_mean, running_var, stats, weight, bias, r, c, 0.0, eps, RUNNING=True, UPDATE=False,
                COUNT=False, RELU=True, RESIDUAL=True, F64=f64, BLOCK_R=block_r, BLOCK_C=block_c, device=x.device)
        ctx.save_for_backward(x, weight, bias, stats, out)
        ctx.eps = eps
        return out

    @staticmethod
    @first_order_only(KERNEL_WAY)
    def backward(ctx, g: Tensor):
        x, weight, bias, stats, out = ctx.saved_tensors
        gm = torch.where(out > 0, g, 0)             # the ReLU's mask (torch's threshold_backward): d identity
        needs = [ctx.needs_input_grad[0], *ctx.needs_input_grad[2:4]]

        def torch_path(a, w, b):                    # the forward's running statistics (rows 0 and 4)
            return F.batch_norm(a, stats[0], stats[4], w, b, False, 0.0, ctx.eps)
        dx, dw, db = EVAL_KERNEL.dispatch(
            x.device, lambda: _backward(x, gm.contiguous(), stats, weight, bias, False, needs, relu=False),
            lambda: torch_grads(torch_path, [x, weight, bias], needs, gm), decided=True)
        return dx, gm if ctx.needs_input_grad[1] else None, dw, db, None, None, None


class BatchNormAddReLU(BatchNorm):
    """``relu(BatchNorm1d(x) + identity)``: ``forward(x, identity)``, one launch in eval where
    :data:`EVAL_KERNEL` runs (module docstring), else ``BatchNorm``'s forward, the add and the ReLU. Shapes:
    ``x (R, C)``, ``identity`` broadcastable to it (``(R, C)`` for the kernel) -> ``(R, C)``."""

    def forward(self, x: Tensor, identity: Tensor) -> Tensor:
        if (not self.training and EVAL_KERNEL.enabled(x.device)
                and takes(x, identity, self.weight, self.bias, self.running_mean, self.running_var)):
            return EVAL_KERNEL(x.device, x, identity, self.weight, self.bias, self.running_mean, self.running_var,
                               self.eps)
        return torch.relu_(super().forward(x) + identity)


def _fused_eval(x: Tensor, identity: Tensor, weight: Tensor, bias: Tensor, running_mean: Tensor,
                running_var: Tensor, eps: float) -> Tensor:
    """:func:`eval_reference`'s arguments, by :class:`_EvalResidual`."""
    return _EvalResidual.apply(x, identity, weight, bias, running_mean, running_var, eps)


# A CUDA default: the eval norm's one launch with the add and the ReLU folded in (module docstring).
EVAL_KERNEL = kernels.register("batch_norm_add_relu_eval", _fused_eval, eval_reference, atomics=False,
                               check=residual_cases)
