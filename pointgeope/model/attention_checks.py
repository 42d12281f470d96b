"""The argument checks of the fused attention's public ops (:mod:`pointgeope.model.fused_attention`), made
before the dispatch: the kernels check nothing and read past a tensor's end where a shape or an index is
wrong, and an error inside the dispatch would count as a failure of the kernel and turn it off.

What each op takes (``N`` queries, ``k`` neighbours, ``N_s`` source rows, ``C`` channels)::

    source rows (N_s, C)   key / x / v, floating point
    idx         (N, k)     int64 (the kNN's rows), every entry in [0, N_s)
    q           (N, C)     delta (N, k, C) or None           relation, frame_relation, linear_relation
    w           (N, k, G)  C = G share_planes                 aggregate
    tables      (5, N, C)  N = N_s (self-attention)           frame_relation
    disp        (N, k, 3)  block_scale (n,), 3 n <= C          linear_relation

every tensor on the source rows' device. A wrong one raises
:class:`~pointgeope.model.kernels.KernelArgumentError` (a ``ValueError``), one line naming the argument, the
shape expected and the shape given.

**Cost.** The shapes, dtypes and devices are metadata: no pass over the data. The range of ``idx`` is one pass
over it (``aminmax``) and, on CUDA, one host read (a sync per call): ``check_index=False`` skips it where the
indices are known to lie in range, as the attention layer's do (the kNN's rows of the same cloud); it is
skipped too where the values cannot be read: meta tensors, ``torch.compile`` and TorchScript, a CUDA graph's
capture. Measured once on the shared CPU (one thread, best of 21) at
2 x 80k queries, k = 16, C = 64: the shapes a few microseconds, the range 1.2 ms, against 0.97 s of the
``relation`` call and 1.45 s of the ``aggregate`` call on their torch paths (the CPU's default).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.kernels import KernelArgumentError

__all__ = ["check_pairs", "check_aggregate", "check_frame", "check_linear"]


def _readable(idx: Tensor) -> bool:
    """Whether ``idx``'s values can be read on the host here: not a meta tensor (no data), not while compiling
    or scripting (a read breaks the graph, as :func:`pointgeope.model.ops.checks.check_finite` skips), not
    during a CUDA graph's capture (a host read is illegal there). Where not, the range check is skipped."""
    if idx.is_meta or torch.jit.is_scripting() or torch.compiler.is_compiling():
        return False
    return not (idx.is_cuda and torch.cuda.is_current_stream_capturing())


def _expect(op: str, name: str, t: Tensor | None, shape: tuple[int, ...], device: torch.device) -> None:
    """Refuse ``t`` (where given) unless it has ``shape``, a floating dtype and lies on ``device``."""
    if t is not None and (tuple(t.shape) != shape or not t.is_floating_point() or t.device != device):
        raise KernelArgumentError(f"{op}: expected {name} of shape {shape}, floating, on {device}, got "
                                  f"{tuple(t.shape)} {t.dtype} on {t.device}")


def check_pairs(op: str, name: str, source: Tensor, idx: Tensor, q: Tensor | None = None,
                delta: Tensor | None = None, check_index: bool = True) -> tuple[int, int, int]:
    """Check the source rows ``source (N_s, C)`` (called ``name``), ``idx (N, k)``, ``q (N, C)`` and ``delta
    (N, k, C)`` of ``op`` (module docstring), ``idx``'s range unless ``check_index`` is False; ``(N, k, C)``."""
    if source.dim() != 2 or not source.is_floating_point():
        raise KernelArgumentError(f"{op}: expected {name} of shape (N_s, C), floating, got {tuple(source.shape)} "
                                  f"{source.dtype}")
    (rows, c), device = source.shape, source.device
    if idx.dim() != 2 or idx.dtype != torch.int64 or idx.device != device:
        raise KernelArgumentError(f"{op}: expected idx of shape (N, k), int64 (the kNN's rows: idx.long()), on "
                                  f"{device}, got {tuple(idx.shape)} {idx.dtype} on {idx.device}")
    n, k = idx.shape
    _expect(op, "q", q, (n, c), device)
    _expect(op, "delta", delta, (n, k, c), device)
    if check_index and idx.numel() and _readable(idx):
        lo, hi = (int(v) for v in torch.aminmax(idx))          # one pass; on CUDA one host read
        if lo < 0 or hi >= rows:
            raise KernelArgumentError(f"{op}: expected idx in [0, {rows}) (rows of {name}), got values in "
                                      f"[{lo}, {hi}]; check_index=False skips this check for indices known valid")
    return n, k, c


def check_aggregate(w: Tensor, v: Tensor, idx: Tensor, delta: Tensor | None, share_planes: int,
                    check_index: bool = True) -> None:
    """``aggregate``'s arguments: :func:`check_pairs` of ``v`` and ``delta``, the logits ``w (N, k, G)`` with
    ``C = G share_planes``."""
    n, k, c = check_pairs("aggregate", "v", v, idx, None, delta, check_index)
    if w.dim() != 3 or w.shape[:2] != idx.shape:
        raise KernelArgumentError(f"aggregate: expected w of shape ({n}, {k}, G) (idx's (N, k)), got "
                                  f"{tuple(w.shape)}")
    _expect("aggregate", "w", w, (n, k, w.shape[2]), v.device)
    if c != w.shape[2] * share_planes:
        raise KernelArgumentError(f"aggregate: expected v of {w.shape[2] * share_planes} channels (w's "
                                  f"{w.shape[2]} x share_planes {share_planes}), got {c}")


def check_frame(x: Tensor, idx: Tensor, tables: Tensor, q: Tensor, delta: Tensor | None,
                check_index: bool = True) -> None:
    """``frame_relation``'s arguments: :func:`check_pairs` of ``x``, ``q``, ``delta``, self-attention (``idx``
    of ``x``'s rows), the rotation tables ``(5, N, C)``."""
    if x.dim() == 2 and (idx.dim() < 1 or idx.shape[0] != x.shape[0]):
        raise KernelArgumentError(f"frame_relation: expected self-attention: idx ({x.shape[0]}, k) for x of "
                                  f"{x.shape[0]} rows, got {tuple(idx.shape)}")
    n, _, c = check_pairs("frame_relation", "x", x, idx, q, delta, check_index)
    _expect("frame_relation", "tables", tables, (5, n, c), x.device)


def check_linear(x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, q: Tensor, delta: Tensor | None,
                 check_index: bool = True) -> None:
    """``linear_relation``'s arguments: :func:`check_pairs` of ``x``, ``q``, ``delta``, the displacements
    ``disp (N, k, 3)`` and the block scales ``(n,)`` of ``n`` blocks of 3 channels, ``3 n <= C``."""
    n, k, c = check_pairs("linear_relation", "x", x, idx, q, delta, check_index)
    _expect("linear_relation", "disp", disp, (n, k, 3), x.device)
    if block_scale.dim() != 1 or 3 * block_scale.shape[0] > c:
        raise KernelArgumentError(f"linear_relation: expected block_scale of shape (n,) with 3 n <= {c} (x's "
                                  f"channels), got {tuple(block_scale.shape)}")
    _expect("linear_relation", "block_scale", block_scale, tuple(block_scale.shape), x.device)
