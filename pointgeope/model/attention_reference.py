"""Point Transformer's vector attention in plain torch ops: the formulas the layer runs on the torch path
(``attention.PointTransformerLayer``) and the references of the fused Triton kernels (``fused_attention``), which
a kernel that fails hands its op to. Per query ``i``, neighbour ``j`` (``C`` channels in ``s`` groups of
``G = C / s``)::

    aggregate  y[i, g G + h] = sum_j softmax_j(w_ij)[h] value_ij[g G + h]      value_ij = v[idx_ij] (+ delta_ij)
    relation   r_ij = k[idx_ij] - q_i (+ delta_ij)                            (or turned by GeoPE, ``geope_pairs``)

Outputs take the promoted dtype of the inputs (:func:`out_dtype`); the references accumulate in float32, or
float64 for float64 inputs (:func:`acc_dtype`).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from pointgeope.model import geope_pairs
from pointgeope.model.rotation import apply_shifted

__all__ = ["grouped_sum", "out_dtype", "acc_dtype", "ref_aggregate", "ref_relation", "ref_frame", "ref_linear",
           "torch_grads"]


def grouped_sum(value: Tensor, weight: Tensor, share_planes: int) -> Tensor:
    """``y[i, g G + h] = sum_j weight[i, j, h] value[i, j, g G + h]``: ``value (N, k, C)``, ``weight (N, k, G)``
    with ``G = C / share_planes`` -> ``(N, C)``."""
    n, k, c = value.shape
    # y[i, g*(C/s) + h] = sum_j value[i, j, g*(C/s) + h] * weight[i, j, h]
    return torch.einsum("nkgh,nkh->ngh", value.view(n, k, share_planes, c // share_planes), weight).reshape(n, c)


def out_dtype(*tensors: Tensor | None) -> torch.dtype:
    """The promoted dtype of the given tensors (``None`` skipped), the output's."""
    dtypes = [t.dtype for t in tensors if t is not None]
    out = dtypes[0]
    for dtype in dtypes[1:]:
        out = torch.promote_types(out, dtype)
    return out


def acc_dtype(*tensors: Tensor | None) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def ref_aggregate(w: Tensor, v: Tensor, idx: Tensor, delta: Tensor | None, share_planes: int) -> Tensor:
    acc = acc_dtype(w, v, delta)
    value = (v[idx] if delta is None else v[idx] + delta).to(acc)
    return grouped_sum(value, torch.softmax(w.to(acc), dim=1), share_planes).to(out_dtype(v, delta))


def ref_relation(key: Tensor, idx: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
    out = key[idx] - q.unsqueeze(1)
    return (out if delta is None else out + delta).to(out_dtype(key, q, delta))


def ref_frame(x: Tensor, idx: Tensor, tables: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
    out = geope_pairs.frame_pairs(apply_shifted(x, tables), idx, tables, q)
    return (out if delta is None else out + delta).to(out_dtype(x, q, delta))


def ref_linear(x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, q: Tensor, delta: Tensor | None) -> Tensor:
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = geope_pairs.relative_pairs(x, idx, disp.to(work), block_scale.to(work), q)
    return (out if delta is None else out + delta).to(out_dtype(x, q, delta))


def torch_grads(ref: Callable[..., Tensor], inputs: list[Tensor | None], needs: list[bool], grad: Tensor) -> tuple:
    """The gradients of ``ref(*inputs)`` against ``grad`` for the inputs flagged in ``needs`` (``None`` for
    the others), by autograd: the backward of a fused op on its torch path."""
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(n) if x is not None and n else x
                  for x, n in zip(inputs, needs, strict=True)]
        wanted = [x for x, n in zip(leaves, needs, strict=True) if x is not None and n]
        grads = iter(torch.autograd.grad(ref(*leaves), wanted, grad) if wanted else ())
    return tuple(next(grads) if x is not None and n else None for x, n in zip(leaves, needs, strict=True))
