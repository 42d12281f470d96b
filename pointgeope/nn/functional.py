r"""GeoPE for scaled dot-product attention: rotate queries and keys by their positions, then any attention.

The paper's main use ([GeoPE](https://arxiv.org/abs/2512.04963), as RoPE in RoFormer): every query and key is
turned by the rotation $R(t(p))$ of its own position, per block of three channels
([`apply_geope`][pointgeope.geope.apply_geope], `docs/GEOPE_SPEC.md`). $R$ is orthonormal, so a score sees the two
positions through the rotation $R(t_i)^\top R(t_j)$ of the spec (standard GeoPE, section 3):

$$\langle R(t_i)\, q_i,\ R(t_j)\, k_j \rangle = q_i^\top R(t_i)^\top R(t_j)\, k_j, \qquad
t_b(p) = s\, \omega_b\, p \quad (s = \texttt{pos\_scale})$$

and the norms, hence softmax's $1 / \sqrt{C}$ scale, do not change. Values are not rotated. Windowed or
serialized point attention, masks, heads, flash kernels: whatever takes `(q, k, v)` takes the rotated pair.

**Translation.** 3-D rotations do not commute, so $R(t_i)^\top R(t_j)$ is not a function of $p_j - p_i$:
standard GeoPE scores change when every position is shifted by the same vector (by up to the whole score for
a shift of a few $1 / s$), except along one line through the origin. Centre each window or scene if that
matters. Linear GeoPE's $R(t_j - t_i)$ and RoPE's relations are translation invariant but do not factor into
one rotation per token, so they have no form here (use
[`GeoPEPointTransformerConv`][pointgeope.nn.GeoPEPointTransformerConv]).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import torch
import torch.nn.functional as F
from torch import Tensor

from pointgeope.geope import BlockScale, apply_geope, geometry_dtype
from pointgeope.nn.checks import check_float_tensor, check_positions, check_scale
from pointgeope.number_kind import is_real_scalar

__all__ = ["geope_qk", "geope_attention"]


def geope_qk(q: Tensor, k: Tensor, pos_q: Tensor, pos_k: Tensor | None = None, *, base: float = 100.0,
             pos_scale: float = 25.0, block_scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Queries and keys turned by GeoPE's rotations of their positions: `(R(t(pos_q)) q, R(t(pos_k)) k)`.

    The scores `q_i . R(t_i)^T R(t_j) k_j` depend on the two positions, not on their difference only:
    standard GeoPE is **not translation invariant** (a common shift of every position changes the scores,
    `docs/GEOPE_SPEC.md` section 3), except along one line through the origin. Linear GeoPE and RoPE's
    relations (`R(t_j - t_i)`, translation invariant) need both positions per pair, so they are not here:
    use `GeoPEPointTransformerConv` or the network.

    Args:
        q: `(..., L, C)` floating-point queries; k: `(..., S, C)` keys (any leading dims, e.g. `(B, H, L,
            C)` heads: every head gets the same `C // 3` blocks and frequencies), `C >= 3`.
        pos_q: finite positions of the queries, `(L, A)` (shared by every leading index) or with as many dims
            as `q` and each leading dim equal to `q`'s or 1: `(B, 1, L, A)` for `(B, H, L, C)` heads,
            never `(B, L, A)`; `A` in 1, 2, 3. pos_k: those of the keys, the same way against `k`
            (default: `pos_q`).
        base: frequency base (the paper's lambda), finite and > 0. pos_scale: phase per unit of position at
            block 0, finite and > 0.
        block_scale: `(C // 3,)` block scales `k_b` to use instead of `base` and `pos_scale`, e.g. a
            learnable `pointgeope.geope.BlockScale`'s output (used at its own precision); `base` and
            `pos_scale` are then not read and must stay at their defaults.

    Precision: angles and products of both rotations in float64 where any of `q`, `k`, `pos_q`, `pos_k`
    (or `block_scale`) is float64, else in float32 (half-precision inputs too); each output is rounded once to
    its input's dtype.

    Raises:
        TypeError: an integer `q`, `k` or position tensor, a `base` or `pos_scale` not a number.
        ValueError: shapes that do not match as above (`k` with other than `L` keys and no `pos_k`),
            positions not finite or beyond `+-2^60` (as `knn_graph`'s), `base` or `pos_scale` not finite and
            > 0, or set away from their defaults together with `block_scale`.
    """
    _check_features(q, k)
    _check_positions("pos_q", pos_q, q, "q")
    if pos_k is None and pos_q.shape[-2] != k.shape[-2]:
        raise ValueError(f"expected pos_k for k's {k.shape[-2]} keys, got none (it defaults to pos_q, of "
                         f"{pos_q.shape[-2]} rows): pass pos_k of shape ({k.shape[-2]}, A)")
    pos_k = pos_q if pos_k is None else pos_k
    _check_positions("pos_k", pos_k, k, "k")
    if pos_q.shape[-1] != pos_k.shape[-1]:
        raise ValueError(f"expected positions with the same axes, got {tuple(pos_q.shape)} and {tuple(pos_k.shape)}")
    widest = reduce(torch.promote_types, (q.dtype, k.dtype, pos_q.dtype, pos_k.dtype))
    if block_scale is None:
        base, pos_scale = check_scale("base", base), check_scale("pos_scale", pos_scale)
        scales = BlockScale(q.shape[-1], base=base, pos_scale=pos_scale, axes=pos_q.shape[-1])
        block_scale = scales(geometry_dtype(widest), q.device)   # float64 q with float32 positions: float64 k_b
    else:
        _check_unread(base, pos_scale)
        check_float_tensor("block_scale", block_scale)
        if block_scale.shape != (q.shape[-1] // 3,):
            raise ValueError(f"expected block_scale of shape (C // 3,) = ({q.shape[-1] // 3},), "
                             f"got {tuple(block_scale.shape)}")
        widest = torch.promote_types(widest, block_scale.dtype)
    for name, pos in (("pos_q", pos_q), ("pos_k", pos_k))[:1 + (pos_k is not pos_q)]:   # finite, within +-2^60
        check_positions(name, pos.reshape(-1, pos.shape[-1]), block_scale)  # (a row a position shown); phases
    # both sides turn in the widest dtype (rodrigues computes in that of its vectors and positions)
    geometry = geometry_dtype(widest)
    return apply_geope(q, pos_q.to(geometry), block_scale), apply_geope(k, pos_k.to(geometry), block_scale)


def _check_unread(base, pos_scale) -> None:
    """With `block_scale`, `base` and `pos_scale` are not read: one set away from its default is refused by name
    (it would change nothing), as the layer refuses options its encoding does not read. The defaults are read
    from `geope_qk`'s signature, their one owner (`geope_attention`'s and `BlockScale`'s are tested equal)."""
    defaults = geope_qk.__kwdefaults__
    for name, value in (("pos_scale", pos_scale), ("base", base)):
        if not (is_real_scalar(value) and float(value) == defaults[name]):   # 25, 25.0, np.float32(25), tensor(25.)
            raise ValueError(f"expected no {name} with block_scale (its k_b already hold base and pos_scale), got "
                             f"{name}={value!r}, which would change nothing: drop it, or build block_scale with it "
                             f"(pointgeope.geope.BlockScale(C, base=..., pos_scale=...))")


def _check_features(q: Tensor, k: Tensor) -> None:
    """Floating-point `q (..., L, C)` and `k (..., S, C)` of one width `C >= 3`."""
    for name, x in (("q", q), ("k", k)):
        check_float_tensor(name, x)
        if x.dim() < 2:
            raise ValueError(f"expected {name} of shape (..., L, C), got {tuple(x.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"expected queries and keys of the same width, got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[-1] < 3:
        raise ValueError(f"expected q and k of width C >= 3 (one rotated block), got {q.shape[-1]}")


def _check_positions(name: str, pos: Tensor, x: Tensor, x_name: str) -> None:
    """`pos` of shape `(L, A)` or `x`'s dims with leading dims equal or 1 (no silent broadcast of
    `(B, L, A)` against `(B, H, L, C)`, which runs when `B == H` and gives other scores), finite and within
    `+-2^60` (`check_positions` in `geope_qk`, once the block scales are known)."""
    check_float_tensor(name, pos)
    want = f"({x.shape[-2]}, A) or {(*['1|' + str(d) for d in x.shape[:-2]], x.shape[-2], 'A')}".replace("'", "")
    if pos.dim() < 2 or pos.shape[-1] not in (1, 2, 3) or pos.shape[-2] != x.shape[-2]:
        raise ValueError(f"expected {name} of shape {want} for {x_name} {tuple(x.shape)}, got {tuple(pos.shape)}")
    lead = pos.shape[:-2]
    if pos.dim() != 2 and (len(lead) != x.dim() - 2
                           or any(p not in (1, d) for p, d in zip(lead, x.shape, strict=False))):
        raise ValueError(f"expected {name} of shape {want} for {x_name} {tuple(x.shape)} (e.g. (B, 1, L, A) for "
                         f"(B, H, L, C) heads), got {tuple(pos.shape)}")


def geope_attention(q: Tensor, k: Tensor, v: Tensor, pos_q: Tensor, pos_k: Tensor | None = None, *,
                    base: float = 100.0, pos_scale: float = 25.0, block_scale: Tensor | None = None,
                    attention: Callable[..., Tensor] = F.scaled_dot_product_attention, **attention_args) -> Tensor:
    r"""`attention(R(t(pos_q)) q, R(t(pos_k)) k, v, **attention_args)`: dot-product attention whose scores
    depend on positions through $R(t_i)^\top R(t_j)$ ([`geope_qk`][pointgeope.nn.geope_qk]; default `attention`:
    PyTorch's `scaled_dot_product_attention`, e.g. with `attn_mask` for windows). Not translation invariant
    (standard GeoPE: see the module's notes). Shapes and checks as `geope_qk`, `v (..., S, C_v)` ->
    `(..., L, C_v)`."""
    q, k = geope_qk(q, k, pos_q, pos_k, base=base, pos_scale=pos_scale, block_scale=block_scale)
    return attention(q, k, v, **attention_args)
