r"""Standard GeoPE's $R(t_i)^\top$ on every edge, with the trigonometry done once per target node.

The layer turns each source once, $k_j \leftarrow R(t_j)\, W_2 x_j$, and each edge $(j \to i)$ then needs
$R(t_i)^\top k_j$. Its coefficients depend on the target only: with $a = \tau(p_i)$, $u = a / |a|$ and the angle
$\varphi_b = k_b |a|$ of block $b$ (`pointgeope.geope`), Rodrigues' formula for the inverse rotation is

$$R(t_i)^\top v = \cos\varphi_b\, v - \sin\varphi_b\, (u \times v) + (1 - \cos\varphi_b)(u \cdot v)\, u$$

so [`target_coefficients`][pointgeope.nn.target_frame.target_coefficients] computes $(\cos, \sin, 1 - \cos, u)$
once a node and an edge only gathers them and does multiply-adds. The edge's keys arrive *plane-major*, one
contiguous plane per component (PyG's gather of a `(3, N, n)` tensor along its node dim), so every operation
runs over contiguous memory (the `(E, n, 3)` views of the interleaved layout are strided by 3):

    # key planes (3, E, n):  [ x_0 .. x_{n-1} ] [ y_0 .. y_{n-1} ] [ z_0 .. z_{n-1} ]
    # output (E, 3n):        [ x_0 y_0 z_0 | x_1 y_1 z_1 | ... ]    (the layer's channel layout)

Positions and frequencies get no gradient here (the layer takes this path only then); the keys' gradient
is the forward rotation $R(t_i)\, g$ of the output's, written the same way.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope import phase_vector

__all__ = ["target_coefficients", "to_planes", "turn_into_targets"]


def target_coefficients(pos: Tensor, block_scale: Tensor) -> Tensor:
    """`(N, 3n + 3)` per node: `[cos phi_b | sin phi_b | 1 - cos phi_b | u]` of the rotation $R(t(p))$
    (`pos (N, A)`, `block_scale (n,)`; computed in their dtype, no gradient)."""
    with torch.no_grad():
        axis = phase_vector(pos)
        radius = axis.norm(dim=-1, keepdim=True)
        u = axis / radius.clamp_min(torch.finfo(axis.dtype).tiny)       # u = 0 at the origin: R = I exactly
        phi = radius * block_scale
        cos = phi.cos()
        return torch.cat([cos, phi.sin(), 1 - cos, u], dim=-1)


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


# Edges per chunk: the ~20 passes of `_turn` then run over cache-sized planes (2048 x 21 float32 = 172 KiB),
# and their temporaries are reused by the allocator instead of being mapped afresh for every operation.
_CHUNK = 2048


def _chunk(edges) -> int:
    """Edges per chunk: `_CHUNK` eagerly, all of them while compiling (inductor fuses the passes itself)."""
    return edges if torch.compiler.is_compiling() else _CHUNK


class _TurnIntoTargets(torch.autograd.Function):
    """`R(t_i)^T k` of key planes `(3, E, n)`, followed by the pass-through channels `rest (E, r)` ->
    `(E, 3n + r)`; gradient for the keys only, in chunks of edges."""

    @staticmethod
    def forward(ctx, planes: Tensor, rest: Tensor, coef: Tensor) -> Tensor:
        ctx.save_for_backward(coef)
        edges, blocks = planes.shape[1], planes.shape[2]
        out = planes.new_empty(edges, 3 * blocks + rest.shape[1])
        out[:, 3 * blocks:] = rest
        turned, coef = out[:, : 3 * blocks].unflatten(-1, (blocks, 3)), coef.to(planes.dtype)
        for start in range(0, edges, _chunk(edges)):
            part = slice(start, start + _chunk(edges))
            for c, plane in enumerate(_turn(planes[:, part], coef[part], -1.0)):
                turned[part, :, c] = plane
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (coef,) = ctx.saved_tensors
        edges, blocks = grad.shape[0], coef.shape[1] // 3 - 1
        blocked, coef = grad[:, : 3 * blocks].unflatten(-1, (blocks, 3)), coef.to(grad.dtype)
        out = grad.new_empty(3, edges, blocks)
        for start in range(0, edges, _chunk(edges)):
            part = slice(start, start + _chunk(edges))
            for plane, turned in zip(out[:, part], _turn(blocked[part].permute(2, 0, 1), coef[part], 1.0)):
                plane.copy_(turned)
        return out, grad[:, 3 * blocks:], None


def turn_into_targets(planes: Tensor, rest: Tensor, coef: Tensor) -> Tensor:
    """`R(t_i)^T k_j` of every edge: key planes `(3, E, n)`, the keys' pass-through channels `rest (E, r)` and
    the edges' target coefficients `(E, 3n + 3)` (`target_coefficients` gathered by target) -> `(E, 3n + r)` in
    the interleaved channel layout."""
    return _TurnIntoTargets.apply(planes, rest, coef)
