"""Per-token rotations of queries and keys ``(B, H, L, D)`` for dot-product attention, from tables that
the heads share.

Every rotary encoding of ``qk_encodings.py`` turns token ``l`` of batch row ``b`` by a rotation that depends
on its position only, the same for every head. The tables of those rotations are built once per call from
``(B, L, 3)`` positions, broadcast over the heads as ``(.., B, 1, L, ..)``, and used for the queries, the
keys and the backward pass (the gradient of a rotation is the inverse rotation of the incoming gradient).

**Channel pairs** (RoPE's 2D rotations; ``turn_halves``). The first ``2 P`` channels of a head hold ``G``
groups of ``S`` pairs, ``P = G S``; group ``g`` pairs channel ``2 S g + s`` with ``2 S g + S + s``::

    # NeoX "rotate half" in thirds (G = 3, S = Q; Utonia's Point3DRoPE, LitePT's PointROPE):
    # channels: [ x0 .. x(Q-1) x0' .. x(Q-1)' | y0 .. y0' .. | z0 .. z0' .. | pass-through ]
    # interleaved pairs (G = P, S = 1; this project's axial rope3d, pointgeope/model/rope.py):
    # channels: [ x0 x0' y0 y0' z0 z0' | x1 x1' ... | pass-through ]

and pair ``(u, v)`` turns by its angle: ``(u cos - v sin, v cos + u sin)``, the complex product
``(u + i v) e^{i theta}``. Tables: ``(2, B, 1, L, G, S)`` of cosines and sines (``half_tables``).

**Blocks of three** (GeoPE; ``turn_blocks``). Block ``b`` (channels ``3b .. 3b+2``) turns by the 3x3 matrix
``R_b`` of its token, applied as five shifted multiply-adds over whole channel rows with the coefficient
tables ``(5, B, 1, L, D)`` of ``pointgeope.model.rotation.rotation_tables``.

Products in float32 at least (``geometry_dtype``), rounded once to the input's dtype.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.rotation import apply_shifted, rotation_tables

__all__ = ["half_tables", "turn_halves", "block_tables", "turn_blocks", "turn_tokens"]


def half_tables(angles: Tensor) -> Tensor:
    """``angles (B, L, G, S)`` (radians) -> ``(2, B, 1, L, G, S)``: their cosines and sines, with a head axis."""
    return torch.stack([angles.cos(), angles.sin()]).unsqueeze(2)


def turn_halves(x: Tensor, tables: Tensor, inverse: bool = False) -> Tensor:
    """Turn the channel pairs of ``x (B, H, L, D)`` by ``tables = half_tables(angles)`` (by ``-angles`` with
    ``inverse``); the channels past ``2 G S`` pass through. Returns ``x``'s shape and dtype."""
    groups, size = tables.shape[-2:]
    width = 2 * groups * size
    cos, sin = tables[0], (-tables[1] if inverse else tables[1])
    out = torch.empty(x.shape, dtype=tables.dtype, device=x.device)
    pairs = x[..., :width].unflatten(-1, (groups, 2, size))
    turned = out[..., :width].unflatten(-1, (groups, 2, size))
    u, v = pairs[..., 0, :], pairs[..., 1, :]
    torch.mul(u, cos, out=turned[..., 0, :]).addcmul_(v, sin, value=-1)      # u cos - v sin
    torch.mul(v, cos, out=turned[..., 1, :]).addcmul_(u, sin)                 # v cos + u sin
    out[..., width:] = x[..., width:]
    return out.to(x.dtype)


def block_tables(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """GeoPE's shift tables of positions ``pos (B, L, 3)`` for ``block_scale (n,)`` (``k_b``) and a head width
    ``channels``: ``(5, B, 1, L, channels)`` (``rotation_tables`` with a head axis)."""
    batch, length, _ = pos.shape
    return rotation_tables(pos.reshape(-1, 3), block_scale, channels).view(5, batch, 1, length, channels)


def turn_blocks(x: Tensor, tables: Tensor, inverse: bool = False) -> Tensor:
    """``R_b v_b`` (``R_b^T v_b`` with ``inverse``) for every block of ``x (B, H, L, D)`` with ``tables =
    block_tables(...)``; the last ``D mod 3`` channels pass through. Returns ``x``'s shape and dtype."""
    return apply_shifted(x, tables, transpose=inverse).to(x.dtype)


_TURNS = {"halves": turn_halves, "blocks": turn_blocks}


class _TurnTokens(torch.autograd.Function):
    """A per-token rotation with a gradient for ``x`` only: saves the tables (shared with the other tensor
    of the pair and by the heads), whose inverse rotation is the backward pass."""

    @staticmethod
    def forward(ctx, x: Tensor, tables: Tensor, kind: str) -> Tensor:
        ctx.save_for_backward(tables)
        ctx.kind = kind
        return _TURNS[kind](x, tables)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (tables,) = ctx.saved_tensors
        return _TURNS[ctx.kind](grad, tables, inverse=True), None, None


def turn_tokens(x: Tensor, tables: Tensor, kind: str) -> Tensor:
    """``turn_halves`` (``kind="halves"``) or ``turn_blocks`` (``"blocks"``) of ``x`` with a gradient for ``x``:
    the tables are constants (fixed frequencies, positions without gradient)."""
    if torch.is_grad_enabled() and tables.requires_grad:
        raise ValueError("expected rotation tables without gradient (use pointgeope.geope.apply_geope for "
                         "learnable frequencies)")
    return _TurnTokens.apply(x, tables, kind)
