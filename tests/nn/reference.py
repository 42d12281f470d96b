"""Independent references for the tests of ``pointgeope.nn``, written from the definitions in
``docs/GEOPE_SPEC.md`` and the papers, one edge and one channel block at a time in float64. They share no
code with ``pointgeope``: GeoPE is a quaternion sandwich ``r p r*`` (not Rodrigues' formula), RoPE a 2x2
rotation per channel pair, the attention a softmax over each target's list of edges.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def quat_mul(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product of quaternions ``(w, x, y, z)``."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return torch.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def rotor(phases: Tensor) -> Tensor:
    """``r = exp(u)``, ``u = (1/A) sum_a (t_a / 2) e_a`` with the axes on (i, j, k) / (j, k) / j."""
    axes = phases.shape[0]
    units = {3: (1, 2, 3), 2: (2, 3), 1: (2,)}[axes]
    u = torch.zeros(4, dtype=phases.dtype)
    for t, unit in zip(phases, units, strict=True):
        u[unit] = u[unit] + t / (2 * axes)
    norm = u.norm()
    if norm == 0:
        return torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=phases.dtype)
    return torch.cat([norm.cos().view(1), norm.sin() * u[1:] / norm])


def sandwich(r: Tensor, v: Tensor) -> Tensor:
    """The 3-vector ``v`` rotated by the unit quaternion ``r``: ``r (0, v) r*``."""
    conj = r * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=r.dtype)
    return quat_mul(quat_mul(r, torch.cat([v.new_zeros(1), v])), conj)[1:]


def block_phases(pos: Tensor, block: int, blocks: int, base: float, pos_scale: float) -> Tensor:
    """``t_b = pos_scale * w_b * p`` with ``w_b = base ** (-2 b / (3 n))``."""
    return pos_scale * base ** (-2.0 * block / (3 * blocks)) * pos


def geope_turn(v: Tensor, pos_i: Tensor, pos_j: Tensor, base: float, pos_scale: float, linear: bool) -> Tensor:
    """``R(t_i)^T R(t_j) v`` (``R(t_j - t_i) v`` if ``linear``) per block of ``v (C,)``, the rest unchanged."""
    out, blocks = v.clone(), v.shape[0] // 3
    for b in range(blocks):
        t_i, t_j = (block_phases(p, b, blocks, base, pos_scale) for p in (pos_i, pos_j))
        part = v[3 * b: 3 * b + 3]
        if linear:
            out[3 * b: 3 * b + 3] = sandwich(rotor(t_j - t_i), part)
        else:                                                    # R(t)^T is the rotation by r*
            r_i = rotor(t_i) * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=v.dtype)
            out[3 * b: 3 * b + 3] = sandwich(r_i, sandwich(rotor(t_j), part))
    return out


def pair_turn(v: Tensor, disp: Tensor, freq: Tensor) -> Tensor:
    """Channel pair ``p`` (channels ``2p, 2p+1``) turned by ``theta_p = f_p . disp``, the rest unchanged."""
    out = v.clone()
    for p in range(freq.shape[0]):
        theta = float(freq[p] @ disp)
        a, b = v[2 * p], v[2 * p + 1]
        out[2 * p], out[2 * p + 1] = (a * math.cos(theta) - b * math.sin(theta),
                                      a * math.sin(theta) + b * math.cos(theta))
    return out


def axial_freq(channels: int, base: float, pos_scale: float) -> Tensor:
    """rope3d: pair ``3 j + a`` turns along axis ``a`` at GeoPE's block scale ``k_2j = pos_scale w_2j / 3``."""
    blocks, rows = channels // 3, []
    for j in range(channels // 6):
        k = pos_scale * base ** (-2.0 * (2 * j) / (3 * blocks)) / 3
        rows += [[k * (a == axis) for axis in range(3)] for a in range(3)]
    return torch.tensor(rows, dtype=torch.float64)


def pointrope_freq(channels: int) -> Tensor:
    """LitePT's PointROPE: pair ``3 q + a`` turns by ``100 ** (-q / Q)`` per grid cell along axis ``a``."""
    per_axis = channels // 6
    return torch.tensor([[100.0 ** (-q / per_axis) * (a == axis) for axis in range(3)]
                         for q in range(per_axis) for a in range(3)], dtype=torch.float64)


def sinusoids(pos: Tensor, freq: Tensor, channels: int) -> Tensor:
    """``e(p)``: ``(cos theta_p, sin theta_p)`` on channel pair ``p``, zero on the rest."""
    out = torch.zeros(channels, dtype=torch.float64)
    for p in range(freq.shape[0]):
        theta = float(freq[p] @ pos)
        out[2 * p], out[2 * p + 1] = math.cos(theta), math.sin(theta)
    return out
