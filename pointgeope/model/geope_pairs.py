"""The pair kernels of the fused GeoPE relations as single expressions, compiled for CUDA by ``torch.compile``.

On a GPU the eager kernels (``rotation.apply_shifted``, ``linear_rotation._turn_planes``) launch one kernel
per multiply-add, each a pass over the ``(N, k, C)`` pairs in memory. Written as one expression of the
gathered rows, Inductor (Triton) fuses gather, rotation and subtraction into one pass. The math is the
eager kernels' (tests compare them):

- standard GeoPE, per pair ``(i, j)`` and channel ``c`` (``T_o`` the query's shift tables of ``R_i``,
  ``rotation.shift_tables``)::

      out[i, j, c] = sum_{o=-2..2} T_{-o}[i, c + o] * p[idx[i, j], c + o] - m[i, c]     (R_i^T p_j - m_i)

  and its adjoint ``sum_o T_o[i, c] g[i, j, c + o]`` (``R_i g``) for the backward pass;
- linear GeoPE, Rodrigues per pair and block with ``u = d / |d|``, ``phi_b = k_b |d|`` (``k_b`` the block
  scale, ``block_scale``)::

      R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi)) (u . v) u

Compilation is attempted once per process, on the first CUDA call, with dynamic shapes (the point counts
change every batch); if it fails (no Triton, an unsupported build) the eager kernels run instead, with one
warning, and ``pointgeope info`` says so (:mod:`pointgeope.model.kernels`, kernel ``geope_pairs``).
``POINTGEOPE_COMPILE=0`` (or ``off``, :mod:`pointgeope.model.kernel_choice`) turns it off, as
``POINTGEOPE_KERNELS=torch`` does with every Triton kernel. The CPU always runs the eager kernels:
there, Inductor's code measured slower than the cache-blocked eager kernels and takes a minute to compile.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from pointgeope.geope import rotation_terms
from pointgeope.model import kernels
from pointgeope.model.kernel_choice import current

__all__ = ["shifted_sum", "frame_pairs", "turn_pairs", "rodrigues_rows", "relative_pairs", "active", "on_device",
           "status"]


def shifted_sum(x: Tensor, tables: Tensor, transpose: bool) -> Tensor:
    """``sum_o T_o[c] x[c + o]`` (``R x``), or with ``transpose`` ``sum_o T_{-o}[c + o] x[c + o]`` (``R^T x``),
    for ``x (..., C)`` and ``tables (5, ..., C)`` broadcasting against it; channels outside ``0..C-1`` read 0."""
    channels = x.shape[-1]
    if transpose:
        terms = [F.pad(tables[2 - o] * x, (2, 2))[..., 2 + o: 2 + o + channels] for o in range(-2, 3)]
    else:
        padded = F.pad(x, (2, 2))
        terms = [tables[2 + o] * padded[..., 2 + o: 2 + o + channels] for o in range(-2, 3)]
    return terms[0] + terms[1] + terms[2] + terms[3] + terms[4]


def frame_pairs(points: Tensor, idx: Tensor, tables: Tensor, minus: Tensor | None,
                dtype: torch.dtype | None = None) -> Tensor:
    """``R_i^T points[idx[i, j]] - minus_i``: ``points (N_s, C)`` already turned by ``R_j``, ``idx (N, k)``,
    ``tables (5, N, C)`` of the queries, ``minus (N, C)`` or ``None`` -> ``(N, k, C)`` in the tables' dtype,
    or that rounded once to ``dtype`` (bf16 pairs: the relation within one bf16 rounding, tested)."""
    out = shifted_sum(points[idx].to(tables.dtype), tables.unsqueeze(-2), transpose=True)
    out = out if minus is None else out - minus.unsqueeze(1)
    return out if dtype is None else out.to(dtype)


def turn_pairs(grad: Tensor, tables: Tensor) -> Tensor:
    """``R_i g_ij`` for ``grad (N, k, C)`` and the queries' ``tables (5, N, C)``, in the tables' dtype."""
    return shifted_sum(grad.to(tables.dtype), tables.unsqueeze(-2), transpose=False)


def rodrigues_rows(rows: Tensor, disp: Tensor, block_scale: Tensor) -> Tensor:
    """``R(k_b d) v_b`` of every block ``b`` of ``rows (M, C)`` (pass-through channels kept) with per-row
    displacements ``disp (M, 3)`` and the block scales ``block_scale (n,)`` holding ``k_b``, in ``disp``'s dtype."""
    blocks = block_scale.shape[0]
    v = rows[:, : 3 * blocks].to(disp.dtype).unflatten(-1, (blocks, 3))          # (M, n, 3)
    u, cos, sin, versine = rotation_terms(disp, block_scale)                      # (M, 3), 3 x (M, n)
    u = u.unsqueeze(1)                                                            # (M, 1, 3)
    cos, sin, versine = cos.unsqueeze(-1), sin.unsqueeze(-1), versine.unsqueeze(-1)  # (M, n, 1)
    ux, uy, uz = u[..., 0:1], u[..., 1:2], u[..., 2:3]
    vx, vy, vz = v[..., 0:1], v[..., 1:2], v[..., 2:3]
    cross = torch.cat([uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx], dim=-1)
    turned = cos * v + sin * cross + versine * (ux * vx + uy * vy + uz * vz) * u
    return torch.cat([turned.flatten(1), rows[:, 3 * blocks:].to(disp.dtype)], dim=1)


def relative_pairs(x: Tensor, idx: Tensor, disp: Tensor, block_scale: Tensor, minus: Tensor | None,
                   dtype: torch.dtype | None = None) -> Tensor:
    """Linear GeoPE's relation ``R(k_b d_ij) x[idx[i, j]] - minus_i`` per block: ``x (N_s, C)``, ``idx (N, k)``,
    ``disp (N, k, 3)`` in the geometry's dtype -> ``(N, k, C)`` in that dtype, or that rounded once to
    ``dtype``."""
    queries, k = idx.shape
    out = rodrigues_rows(x[idx.reshape(-1)], disp.reshape(-1, 3), block_scale).view(queries, k, -1)
    out = out if minus is None else out - minus.unsqueeze(1)
    return out if dtype is None else out.to(dtype)


_compiled: dict[str, Callable] = {}


def _compiled_call(fn: Callable, *args):
    """``fn(*args)`` through its ``torch.compile`` (made on the first call of ``fn``)."""
    if fn.__name__ not in _compiled:
        _compiled[fn.__name__] = torch.compile(fn, dynamic=True)
    return _compiled[fn.__name__](*args)


# The kernels' entry in pointgeope.model.kernels (switch, fallback): compiled, or the same expression eagerly.
KERNEL = kernels.register("geope_pairs", triton=_compiled_call, torch=lambda fn, *args: fn(*args))


def active(device: torch.device) -> bool:
    """Whether the compiled kernels serve this device (CUDA, where ``kernels`` lets Triton run: not turned off
    by ``POINTGEOPE_KERNELS=torch`` or ``POINTGEOPE_COMPILE=0``, not failed); where they do not, callers keep
    their eager kernels (a single expression run eagerly costs more memory)."""
    return (device.type == "cuda" and current().compile and hasattr(torch, "compile") and KERNEL.enabled(device))


def on_device(fn: Callable, *args):
    """``fn(*args)`` compiled (see the module docstring); if the compilation fails, ``fn(*args)`` eagerly,
    one warning (``kernels.Kernel``), and ``active`` is False from then on."""
    return KERNEL(args[0].device, fn, *args)


def status() -> str:
    """One line for ``pointgeope info``."""
    try:
        choice = current()
    except kernels.KernelChoiceError:          # an invalid value: kernels.status says so
        return "eager (invalid switch)"
    if not choice.compile:
        return "eager (POINTGEOPE_COMPILE off)"
    failed = kernels.failures().get(KERNEL.name)
    if failed:
        return f"eager (torch.compile failed: {failed})"
    if choice.path == "torch":
        return "eager (POINTGEOPE_KERNELS=torch)"
    return "torch.compile on CUDA (Triton), eager on the CPU"
