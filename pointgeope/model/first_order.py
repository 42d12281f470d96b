"""First-order-only backward passes: a loud, named refusal of second derivatives where they are not implemented.

The memory-lean autograd Functions of the network (rotations, RoPE, the Triton attention and batch-norm kernels)
compute their backward with kernels, in-place scatters or recomputed intermediates: differentiated again
(``create_graph=True``: gradient penalties, Hessian-vector products, MAML), such a backward would be silently
wrong or fail on an internal op's name. :func:`first_order_only` marks it as torch's ``once_differentiable``
does (run without a graph; the outputs raise when differentiated again, and only then), with a message that
names the Function and the way that works. Unlike ``once_differentiable`` the outputs are tied to the real
graph (the incoming gradients and the saved inputs that need a gradient), not to fresh leaves: a second
``torch.autograd.grad(..., inputs)`` reaches the refusal instead of silently missing the Function's terms. GeoPE's own
rotations of data positions (``pointgeope.geope``, ``pointgeope.nn``) are twice differentiable instead.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch

__all__ = ["first_order_only", "ROTATION_WAY", "KERNEL_WAY", "GRID_WAY"]

ROTATION_WAY = ("make the positions require grad (coord.requires_grad_()): the rotations then run under plain "
                "autograd, which is twice differentiable")
KERNEL_WAY = "set POINTGEOPE_KERNELS=torch (torch's ops, twice differentiable) and make coord require grad"
GRID_WAY = (ROTATION_WAY + "; but PointROPE's (pe='pointrope') angles are grid cells, constants that no input "
            "makes require grad: use another encoding (geope, rope3d) where it needs second derivatives")


class _Refuse(torch.autograd.Function):
    """The outputs of a first-order backward, tied to what they depend on (the incoming gradients, the saved
    inputs): a second backward that reaches them raises ``message``, one that does not is untouched."""

    @staticmethod
    def forward(ctx, message: str, outputs: tuple, *anchors):
        ctx.message = message
        return tuple(None if o is None else o.clone() for o in outputs)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def first_order_only(way: str, exact: Callable[..., bool] | None = None) -> Callable:
    """Decorator of a ``torch.autograd.Function.backward`` that is first-order only: a plain call when the
    backward is not differentiated (no cost), else (``create_graph``) the same call without a graph, whose
    outputs raise ``RuntimeError("second derivatives (create_graph=True) through pointgeope's <Function> are not
    implemented ...: <way>")`` if a second backward reaches them. ``exact(*grads)``, where given, says when the
    backward is written in differentiable torch ops on these gradients (e.g. off its kernel's device): it then
    runs as it is, differentiated. Under ``torch.compile`` the backward is left to the compiler as it is."""
    def mark(backward: Callable) -> Callable:
        message = (f"second derivatives (create_graph=True) through pointgeope's "
                   f"{backward.__qualname__.rsplit('.', 1)[0]} are not implemented (its backward is first-order "
                   f"only): {way}")

        @functools.wraps(backward)
        def run(ctx, *grads):
            if not torch.is_grad_enabled() or torch.compiler.is_compiling() or (exact is not None and exact(*grads)):
                return backward(ctx, *grads)
            with torch.no_grad():
                outputs = backward(ctx, *grads)
            anchors = [t for t in (*grads, *ctx.saved_tensors) if isinstance(t, torch.Tensor) and t.requires_grad]
            if not anchors:                                    # a constant gradient: its derivative is 0, exactly
                return outputs
            many = isinstance(outputs, tuple)
            marked = _Refuse.apply(message, outputs if many else (outputs,), *anchors)
            return marked if many else marked[0]
        return run
    return mark
