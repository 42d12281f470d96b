r"""Standard GeoPE's $R(t_i)^\top$ on every edge, with the trigonometry done once per target node.

The layer turns each source once, $k_j \leftarrow R(t_j)\, W_2 x_j$, and each edge $(j \to i)$ then needs
$R(t_i)^\top k_j$. Its coefficients depend on the target only: with $a = \tau(p_i)$, $u = a / |a|$ and the angle
$\varphi_b = k_b |a|$ of block $b$ (`pointgeope.geope`), Rodrigues' formula for the inverse rotation is

$$R(t_i)^\top v = \cos\varphi_b\, v - \sin\varphi_b\, (u \times v) + (1 - \cos\varphi_b)(u \cdot v)\, u$$

so [`target_coefficients`][pointgeope.nn.target_frame.target_coefficients] computes $(\cos, \sin, 1 - \cos, u)$
once a node and an edge only gathers them and does multiply-adds. On CPU tensors that is one compiled pass over
the edges (`pointgeope/nn/frame_numba.py`, the default where numba is installed). The torch path here (CUDA,
other dtypes, no numba) keeps the keys *plane-major*, one contiguous plane per component,
gathered chunk by chunk of edges, so every operation runs over contiguous, cache-sized memory (the `(E, n, 3)`
views of the interleaved layout are strided by 3):

    # key planes (3, N_s, n): [ x_0 .. x_{n-1} ] [ y_0 .. y_{n-1} ] [ z_0 .. z_{n-1} ]
    # output (E, 3n + r):     [ x_0 y_0 z_0 | x_1 y_1 z_1 | ... | pass-through ]   (the layer's channel layout)

Positions and frequencies get no gradient here (the layer takes this path only then); the keys' gradient
is the forward rotation $R(t_i)\, g$ of the output's, written the same way.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope import phase_vector, rotation_terms
from pointgeope.model.ops.backends import available

__all__ = ["target_coefficients", "to_planes", "turn_into_targets", "frame_backend"]


def target_coefficients(pos: Tensor, block_scale: Tensor) -> Tensor:
    """`(N, 3n + 3)` per node: `[cos phi_b | sin phi_b | 1 - cos phi_b | u]` of the rotation $R(t(p))$
    (`pos (N, A)`, `block_scale (n,)`; computed in their dtype, no gradient)."""
    with torch.no_grad():
        u, cos, sin, versine = rotation_terms(phase_vector(pos), block_scale)   # geope's one Rodrigues rule
        return torch.cat([cos, sin, versine, u], dim=-1)


def to_planes(x: Tensor, blocks: int) -> Tensor:
    """The blocks of `x (N, C)` as planes `(3, N, n)` (one copy)."""
    return x[:, : 3 * blocks].unflatten(-1, (blocks, 3)).permute(2, 0, 1).contiguous()


def _turn(planes: Tensor, coef: Tensor, sign: float) -> list[Tensor]:
    """`R^T v` (`sign = -1`) or `R v` (`sign = 1`) of planes `(3, E, n)` with per-edge coefficients `coef
    (E, 3n + 3)`; returns the three output planes `(E, n)`."""
    n = planes.shape[-1]
    cos, sin, vers, u = coef[:, :n], coef[:, n:2 * n], coef[:, 2 * n:3 * n], coef[:, 3 * n:]
    ux, uy, uz = u[:, 0:1], u[:, 1:2], u[:, 2:3]
    vx, vy, vz = planes.unbind(0)
    along = vx * ux
    along.addcmul_(vy, uy).addcmul_(vz, uz).mul_(vers)                   # (1 - cos) (u . v)
    out = []
    for vc, uc, u1, v1, u2, v2 in ((vx, ux, uy, vz, uz, vy), (vy, uy, uz, vx, ux, vz), (vz, uz, ux, vy, uy, vx)):
        cross = v1 * u1
        cross.addcmul_(v2, u2, value=-1)                                  # (u x v)_c
        o = vc * cos
        out.append(o.addcmul_(cross, sin, value=sign).addcmul_(along, uc))
    return out


# Edges per chunk on one thread: the ~20 passes of `_turn` then run over cache-sized planes (2048 x 21 float32 =
# 172 KiB), and their temporaries are reused by the allocator instead of being mapped afresh for every operation
# (1.9x faster than whole planes, fwd + bwd at 340k edges). With more threads each operation runs over all the
# edges, parallel (chunks would make every small operation a parallel region: 2-4x the CPU time on 2 threads).
_CHUNK = 2048


def _chunk(edges: int) -> int:
    """Edges per chunk: `_CHUNK` on one thread, all of them on more or while compiling (inductor fuses the
    passes itself)."""
    if torch.compiler.is_compiling() or torch.get_num_threads() > 1:
        return max(edges, 1)
    return _CHUNK


class _TurnIntoTargets(torch.autograd.Function):
    """`R(t_i)^T k_j` of every edge `(j -> i)`, gathered chunk by chunk from the sources' key planes
    `(3, N_s, n)` and the targets' coefficients `(N_t, 3n + 3)`, followed by the pass-through channels
    `rest (N_s, r)` -> `(E, 3n + r)`. The gradient of the keys is scattered back chunk by chunk, so no
    `(E, C)` copy of the keys or of their gradient exists besides the output."""

    @staticmethod
    def forward(ctx, planes: Tensor, rest: Tensor, coef: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        ctx.save_for_backward(coef, src, dst)
        ctx.sources = planes.shape[1]
        edges, blocks = src.shape[0], planes.shape[2]
        out = planes.new_empty(edges, 3 * blocks + rest.shape[1])
        out[:, 3 * blocks:] = rest.index_select(0, src)
        turned, coef = out[:, : 3 * blocks].unflatten(-1, (blocks, 3)), coef.to(planes.dtype)
        step = _chunk(edges)
        for start in range(0, edges, step):
            part = slice(start, start + step)
            keys, here = planes.index_select(1, src[part]), coef.index_select(0, dst[part])
            for c, plane in enumerate(_turn(keys, here, -1.0)):
                turned[part, :, c] = plane
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        coef, src, dst = ctx.saved_tensors
        if torch.is_grad_enabled():                          # create_graph: the adjoint as a Function of its own
            return (*_AddIntoSources.apply(grad, coef, src, dst, ctx.sources), None, None, None)
        return (*_add_into_sources(grad, coef, src, dst, ctx.sources), None, None, None)


def _add_into_sources(grad: Tensor, coef: Tensor, src: Tensor, dst: Tensor, sources: int) -> tuple[Tensor, Tensor]:
    """`_TurnIntoTargets`' adjoint: `sum_{e: src[e] = j} R(t_{dst[e]}) g_e` of the gradient `grad (E, 3n + r)`
    as key planes `(3, N_s, n)` and pass-through rows `(N_s, r)`, scattered chunk by chunk."""
    edges, blocks = grad.shape[0], coef.shape[1] // 3 - 1
    blocked, coef = grad[:, : 3 * blocks].unflatten(-1, (blocks, 3)), coef.to(grad.dtype)
    grad_planes = grad.new_zeros(3, sources, blocks)
    grad_rest = grad.new_zeros(sources, grad.shape[1] - 3 * blocks).index_add_(0, src, grad[:, 3 * blocks:])
    step = _chunk(edges)
    for start in range(0, edges, step):
        part = slice(start, start + step)
        turned = _turn(blocked[part].permute(2, 0, 1), coef.index_select(0, dst[part]), 1.0)
        for plane, grad_plane in zip(grad_planes, turned, strict=True):
            plane.index_add_(0, src[part], grad_plane)
    return grad_planes, grad_rest


class _AddIntoSources(torch.autograd.Function):
    """`_add_into_sources` as a Function, used only when `_TurnIntoTargets`' backward is itself differentiated:
    linear in the gradient, its own adjoint is `_TurnIntoTargets` again, so every higher derivative in the
    keys is exact."""

    @staticmethod
    def forward(ctx, grad: Tensor, coef: Tensor, src: Tensor, dst: Tensor, sources: int):
        ctx.save_for_backward(coef, src, dst)
        return _add_into_sources(grad, coef, src, dst, sources)

    @staticmethod
    def backward(ctx, grad_planes: Tensor, grad_rest: Tensor):
        coef, src, dst = ctx.saved_tensors
        return _TurnIntoTargets.apply(grad_planes, grad_rest, coef, src, dst), None, None, None, None


def turn_into_targets(keys: Tensor, coef: Tensor, src: Tensor, dst: Tensor, backend: str | None = None) -> Tensor:
    r"""$R(t_i)^\top k_j$ of every edge `src[e] = j -> dst[e] = i`: the sources' keys `(N_s, 3n + r)` in the
    layer's interleaved channel layout (blocks of three, then `r` pass-through channels), the targets'
    coefficients `(N_t, 3n + 3)` ([`target_coefficients`][pointgeope.nn.target_frame.target_coefficients])
    -> `(E, 3n + r)`, differentiable in the keys.

    `backend`: `"numba"` (one compiled pass over the edges, `pointgeope/nn/frame_numba.py`), `"torch"` (chunks
    of plane-major keys, above) or `None`: numba where it runs (CPU float32/float64 tensors, numba installed; a
    custom op, which `torch.compile` calls as it is), else torch."""
    backend = backend or frame_backend(keys)
    if backend == "numba":
        from pointgeope.nn.frame_numba import turn_edges
        return turn_edges(keys, coef, src, dst, -1.0, False)
    if backend != "torch":
        raise ValueError(f"expected backend 'numba', 'torch' or None, got {backend!r}")
    blocks = coef.shape[1] // 3 - 1
    return _TurnIntoTargets.apply(to_planes(keys, blocks), keys[:, 3 * blocks:], coef, src, dst)


def frame_backend(keys: Tensor) -> str:
    """The default backend of [`turn_into_targets`][pointgeope.nn.target_frame.turn_into_targets] for `keys`."""
    if keys.device.type != "cpu" or keys.dtype not in (torch.float32, torch.float64):
        return "torch"
    return "numba" if available("numba") else "torch"
