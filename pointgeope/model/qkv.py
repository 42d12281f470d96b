"""Queries, keys and values of one input in two products and one backward (PTv1's ``linear_q``, ``_k``, ``_v``).

For three ``nn.Linear(C_in, C)`` of the same input ``x (N, C_in)``, with the weights stacked ``W (3, C, C_in)`` and
the biases ``b (3, C)``, forward::

    qk[i] = x W[i]^T + b[i]        i = 0, 1  ->  q, k                  one baddbmm, qk (2, N, C)
    v     = x W[2]^T + b[2]                                            one addmm, v (N, C) in its own memory

(q and k contiguous ``(N, C)`` views, as the Triton attention kernels read them: a ``(N, 3C)`` product would hand
them strided rows to copy). ``v`` is not a third batch of the product: the fused aggregation saves ``v`` for its
backward and the relations save neither ``q`` nor ``k``, so a ``v`` sharing their memory would keep all three
alive until the backward (``2 N C`` more a layer: about 1.7 GiB in float32 at 16 x 80k points). Backward, with
the incoming gradients interleaved per row ``g (N, 3C) = [g_q | g_k | g_v]``::

    dx = g W.view(3C, C_in)      one mm          (three Linears: three mm and two adds)
    dW = g^T x  (3C, C_in)       one mm          (three mm)
    db = sum_n g[n]  (3C,)       one sum         (three sums)

so a layer's products launch 8 kernels with their backward where three ``nn.Linear`` launch 14: the two stacks of
the parameters and the two products, then the stack of ``g`` and the three above. The parameters' gradients are
rows of ``dW`` and ``db``: contiguous views (autograd's own backward of a batched product would hand the weights
transposed views, each copied once more into the parameter's layout). The backward is written in torch ops on
the saved inputs: it differentiates again (``create_graph=True``, ``gradgradcheck``). Under autocast the
products run in autocast's dtype, as ``nn.Linear`` would. ``q`` and ``k`` are views of one tensor made inside an
autograd Function: changing one in place is refused by autograd (nothing in the network does). Without a backward
(evaluation: no grad mode, or nothing requires grad) they are three ``F.linear``: 3 launches where the stacks and
products take 4, and half the host time (CPU, tiny N: 12 us against 27 us).

Why three parameters stacked at each forward and not one fused ``(3C, C_in)`` parameter (which would save the two
stacks, 2 of the 8): the parameters stay those of three ``nn.Linear``. The state dict keeps the authors' keys
(``linear_q.weight``, ...) with no hook, the optimiser's state of a training checkpoint keeps one momentum buffer
per tensor in the same order (so checkpoints written before resume, and those written now resume with earlier
code), weight decay and the parameter groups see the same tensors under the same names, and ``layer.linear_q``
stays the module it was (``pointgeope.nn``'s tests map it onto PyG's ``lin_dst``).

Numerics: the forward is the same products as three ``F.linear`` (each batch of the product is one matrix
product), usually the same bits on the CPU in float32 and float64; torch may take another kernel for the batched
product than for one, and then ``q`` and ``k`` differ by an ulp (``v``, one ``addmm``, stays equal): 1 of 200
random cases of 32 to 256 channels and 3 to 1000 rows, about a third of those of 1 or 2 rows or a few channels.
The backward's sums run in another order (``dx`` adds its three terms
inside one product), within float rounding of three Linears' (measured in the CHANGELOG).
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["qkv_product"]


def qkv_product(x: Tensor, linears: tuple[nn.Linear, nn.Linear, nn.Linear]) -> tuple[Tensor, Tensor, Tensor]:
    """``(linears[0](x), linears[1](x), linears[2](x))`` in two products (module docstring), each ``(N, C)``.

    Args:
        x: ``(N, C_in)``, the input of all three.
        linears: three ``nn.Linear(C_in, C)`` with biases (anything with ``weight`` and ``bias``).

    Returns:
        three contiguous ``(N, C)``: ``q`` and ``k`` views of one ``(2, N, C)`` tensor, ``v`` in its own memory.
    """
    if any(lin.bias is None for lin in linears):
        raise ValueError("expected three nn.Linear with biases, got one without (bias=False)")
    weights, biases = [lin.weight for lin in linears], [lin.bias for lin in linears]
    if x.dim() != 2:        # both paths alike: the batched product takes rows only (F.linear would take more)
        raise ValueError(f"expected x of shape (N, C_in), got {tuple(x.shape)}")
    kind = x.device.type
    cast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind) and x.dtype != torch.float64
    if not cast and any(t.dtype != x.dtype for t in (*weights, *biases)):   # F.linear's refusal (autocast casts)
        name, t = next((f"linears[{i}].{n}", t) for i, lin in enumerate(linears)
                       for n, t in (("weight", lin.weight), ("bias", lin.bias)) if t.dtype != x.dtype)
        raise TypeError(f"expected the weights and biases in x's dtype {x.dtype} (as nn.Linear), got {name} in "
                        f"{t.dtype}")
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (x, *weights, *biases)):
        return tuple(F.linear(x, w, b) for w, b in zip(weights, biases, strict=True))   # no backward: 3 launches
    return _Product.apply(x, *weights, *biases)


def _work_dtype(x: Tensor) -> torch.dtype:
    """The dtype ``nn.Linear`` computes in for ``x``: autocast's where it is on and casts ``x`` (a floating dtype
    other than float64, as autocast's rule), else ``x``'s (also on devices without autocast: ``meta``)."""
    kind = x.device.type
    if x.is_floating_point() and x.dtype != torch.float64 and torch.amp.is_autocast_available(kind) \
            and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return x.dtype


class _Product(torch.autograd.Function):
    """``x (N, C_in)``, weights ``W_q, W_k, W_v (C, C_in)``, biases ``b_q, b_k, b_v (C,)`` -> ``q, k, v (N, C)``."""

    @staticmethod
    def forward(ctx, x, wq, wk, wv, bq, bk, bv):
        dtype = _work_dtype(x)
        xc = x.to(dtype)
        weight = torch.stack((wq, wk, wv)).to(dtype)                          # (3, C, C_in)
        bias = torch.stack((bq, bk, bv)).to(dtype)                            # (3, C)
        with torch.autocast(x.device.type, enabled=False) if dtype != x.dtype else contextlib.nullcontext():
            qk = torch.baddbmm(bias[:2].unsqueeze(1), xc.expand(2, *x.shape), weight[:2].transpose(1, 2))
            v = torch.addmm(bias[2], xc, weight[2].t())                       # its own memory (module docstring)
        ctx.save_for_backward(x, wq, wk, wv, xc, weight)
        return *qk.unbind(0), v

    @staticmethod
    def backward(ctx, gq, gk, gv):
        x, wq, wk, wv, xc, weight = ctx.saved_tensors
        if torch.is_grad_enabled():      # create_graph: the same sums, on tensors tied to the inputs' graph
            xc, weight = x.to(xc.dtype), torch.stack((wq, wk, wv)).to(weight.dtype)
        three, c, c_in = weight.shape
        g = torch.stack((gq, gk, gv), dim=1).view(-1, three * c).to(weight.dtype)   # (N, 3C): [g_q | g_k | g_v]
        need = ctx.needs_input_grad
        dx = g @ weight.view(three * c, c_in) if need[0] else None                # (N, C_in)
        dw = (g.t() @ xc).view(three, c, c_in).unbind(0) if any(need[1:4]) else (None,) * 3
        db = g.sum(0).view(three, c).unbind(0) if any(need[4:]) else (None,) * 3
        return dx, *dw, *db
