"""The independent references of the rotary encodings' tests (test_qk_encodings.py, test_qk_kernels.py,
test_qk_lingeope.py), written from their authors' definitions (quaternion sandwiches, complex products,
matrix exponentials of per-pair rotation vectors), and the inputs they share."""
from __future__ import annotations

import math

import torch

from pointgeope.model.qk_encodings import ROTARY_HEAD_DIM

ROTARY = ("geope", "rope3d", "point3drope", "pointrope")          # one rotation per token
F64 = torch.float64


def inputs(b=2, h=3, length=11, d=ROTARY_HEAD_DIM, dtype=F64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, length, d, generator=g, dtype=dtype).to(device) for _ in range(3))
    coord_dtype = F64 if dtype == F64 else torch.float32
    coord = (torch.rand(b, length, 3, generator=g, dtype=F64) * 4 - 1).to(device, coord_dtype)
    grid = torch.randint(0, 200, (b, length, 3), generator=g).to(device)
    return q, k, v, coord, grid


# ---- references, from the definitions ---------------------------------------------------------------------

def quat_mul(a, b):
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def geope_reference(x, coord, base=100.0, pos_scale=50.0):
    """GeoPE (docs/GEOPE_SPEC.md): block b turns by r v r*, r = exp(u), u = (1/3) sum_a (t_a / 2) e_a,
    t = pos_scale base^(-2b/(3n)) p; the last D mod 3 channels pass through."""
    n = x.shape[-1] // 3
    out = x.clone()
    for b in range(n):
        t = pos_scale * base ** (-2 * b / (3 * n)) * coord.unsqueeze(1)                   # (B, 1, L, 3)
        u = t / 6
        half = u.norm(dim=-1, keepdim=True)
        r = torch.cat([half.cos(), torch.sinc(half / math.pi) * u], -1)                 # sin|u| u/|u|
        r_conj = r * torch.tensor([1.0, -1, -1, -1], dtype=r.dtype, device=r.device)
        vec = torch.cat([torch.zeros_like(x[..., :1]), x[..., 3 * b: 3 * b + 3]], -1)
        out[..., 3 * b: 3 * b + 3] = quat_mul(quat_mul(r, vec), r_conj)[..., 1:]
    return out


def complex_turn(x, first, second, angles):
    """Turn channel pairs (first[p], second[p]) of x by angles[..., p]: (u + iv) e^{i angle}."""
    out = x.clone()
    z = torch.complex(x[..., first], x[..., second]) * torch.polar(torch.ones_like(angles), angles)
    out[..., first], out[..., second] = z.real, z.imag
    return out


def rope3d_reference(x, coord, base=100.0, pos_scale=50.0):
    """Axial RoPE at GeoPE's frequencies (docs/positional-encodings.md): pair p = 3j + a is channels (2p, 2p+1)
    and turns by k_{2j} p_a, k_b = pos_scale base^(-2b/(3n)) / 3, n = D // 3."""
    d = x.shape[-1]
    n, m = d // 3, d // 6
    pairs = [(3 * j + a, j, a) for j in range(m) for a in range(3)]
    angles = torch.stack([pos_scale * base ** (-4 * j / (3 * n)) / 3 * coord[..., a] for _, j, a in pairs], -1)
    return complex_turn(x, [2 * p for p, _, _ in pairs], [2 * p + 1 for p, _, _ in pairs], angles.unsqueeze(1))


def thirds_reference(x, pos, base):
    """Point3DRoPE / PointROPE: thirds of 2Q channels (Q = D // 6), channel 2Qa + q with 2Qa + Q + q, angle
    p_a base^(-q/Q)."""
    big_q = x.shape[-1] // 6
    cells = [(a, q) for a in range(3) for q in range(big_q)]
    angles = torch.stack([pos[..., a].to(x.dtype) * base ** (-q / big_q) for a, q in cells], -1)
    return complex_turn(x, [2 * big_q * a + q for a, q in cells], [2 * big_q * a + big_q + q for a, q in cells],
                         angles.unsqueeze(1))


def lingeope_reference(q, k, v, coord, base=100.0, pos_scale=50.0):
    """softmax(q_i^T R(k_b d_ij) k_j / sqrt(D)) v with R = matrix_exp([k_b d]_x) per pair and block."""
    d_model = q.shape[-1]
    n = d_model // 3
    disp = coord.unsqueeze(1) - coord.unsqueeze(2)                                         # [i, j] = p_j - p_i
    scores = q[..., 3 * n:] @ k[..., 3 * n:].transpose(-1, -2)
    for b in range(n):
        w = pos_scale * base ** (-2 * b / (3 * n)) / 3 * disp                              # (B, L, L, 3)
        zero = torch.zeros_like(w[..., 0])
        skew = torch.stack([zero, -w[..., 2], w[..., 1], w[..., 2], zero, -w[..., 0],
                            -w[..., 1], w[..., 0], zero], -1).unflatten(-1, (3, 3))
        rot = torch.linalg.matrix_exp(skew).unsqueeze(1)                                   # (B, 1, L, L, 3, 3)
        kb = k[..., 3 * b: 3 * b + 3].unsqueeze(2).unsqueeze(-1)                           # (B, H, 1, L, 3, 1)
        scores = scores + (q[..., 3 * b: 3 * b + 3].unsqueeze(3).unsqueeze(-2) @ (rot @ kb)).squeeze(-1).squeeze(-1)
    return torch.softmax(scores / math.sqrt(d_model), -1) @ v


def reference(name, x, coord, grid):
    if name == "geope":
        return geope_reference(x, coord)
    if name == "rope3d":
        return rope3d_reference(x, coord)
    if name == "point3drope":
        return thirds_reference(x, coord, 10.0)
    return thirds_reference(x, grid, 100.0)
