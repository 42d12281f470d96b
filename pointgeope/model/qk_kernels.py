"""Per-token rotations of queries and keys ``(B, H, L, D)`` for dot-product attention, from tables that
the heads share.

Every rotary encoding of ``qk_encodings.py`` turns token ``l`` of batch row ``b`` by a rotation that depends
on its position only, the same for every head. The tables of those rotations are built once per call from
``(B, L, 3)`` positions, broadcast over the heads as ``(.., B, 1, L, ..)``, and used for the queries, the
keys and the backward pass (the gradient of a rotation is the inverse rotation of the incoming gradient).

**Channel pairs** (RoPE's 2D rotations; ``turn_halves``). Pair ``p`` is channels ``(first[p], second[p])`` of
a head and turns by its angle: ``(u, v) -> (u cos - v sin, v cos + u sin)``, the complex product
``(u + i v) e^{i theta}``. The layouts in use::

    # NeoX "rotate half" in thirds (Utonia's Point3DRoPE, LitePT's PointROPE): pair (a, q) = (2Qa + q, 2Qa + Q + q)
    # channels: [ x0 .. x(Q-1) x0' .. x(Q-1)' | y0 .. y0' .. | z0 .. z0' .. | pass-through ]
    # interleaved (this project's axial rope3d, pointgeope/model/rope.py): pair p = (2p, 2p + 1)
    # channels: [ x0 x0' y0 y0' z0 z0' | x1 x1' ... | pass-through ]

Whatever the layout, the rotation is ``out = x * C + (x S) * Sn``: ``C``, ``Sn`` full-width tables ``(2, B, 1, L,
D)`` holding each pair's cosine and sine at both its channels (1 and 0 at the pass-through channels,
``half_tables``), and ``S`` the layout's fixed signed permutation (``swap_matrix``: ``(x S)[first] =
-x[second]``, ``(x S)[second] = x[first]``), one ``(B H L, D) x (D, D)`` product. So every layout and width
costs the same three contiguous passes (strided views of short pair groups were 2x slower at ``D = 16``).

**Blocks of three** (GeoPE; ``turn_blocks``). Block ``b`` (channels ``3b .. 3b+2``) turns by the 3x3 matrix
``R_b`` of its token, applied as five shifted multiply-adds over whole channel rows with the coefficient
tables ``(5, B, 1, L, D)`` of ``pointgeope.model.rotation.rotation_tables``.

On the CPU both run a cache-sized step of batch rows at a time (``_STEP_ELEMENTS``, as the PTv1 kernels'
``rotation.query_steps``), so that their passes read and write the step in cache rather than memory.
Products in float32 at least (``geometry_dtype``), rounded once to the input's dtype.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.rotation import apply_shifted, constant, query_steps, rotation_tables

# Elements of x per step on the CPU (1 MB of float32 per intermediate, in a core's L2); a GPU takes all at once.
_STEP_ELEMENTS = 1 << 18

__all__ = ["swap_matrix", "half_tables", "turn_halves", "block_tables", "turn_blocks", "turn_tokens"]


def swap_matrix(first: Tensor, second: Tensor, channels: int) -> Tensor:
    """The signed permutation ``S (D, D)`` of a pair layout: ``(x S)[first[p]] = -x[second[p]]``,
    ``(x S)[second[p]] = x[first[p]]``, 0 at the pass-through channels (float32)."""
    swap = torch.zeros(channels, channels, device=first.device)
    swap[second, first] = -1.0
    swap[first, second] = 1.0
    return swap


def half_tables(angles: Tensor, first: Tensor, second: Tensor, channels: int) -> Tensor:
    """``angles (B, L, P)`` of the pairs ``(first[p], second[p])`` -> ``(2, B, 1, L, D)``: the cosine and the sine
    of each pair at both its channels, 1 and 0 at the pass-through channels, with a head axis."""
    tables = torch.zeros(2, *angles.shape[:-1], channels, dtype=angles.dtype, device=angles.device)
    tables[0] = 1.0
    cos, sin = angles.cos(), angles.sin()
    for channel in (first, second):
        tables[0, ..., channel] = cos
        tables[1, ..., channel] = sin
    return tables.unsqueeze(2)


def turn_halves(x: Tensor, tables: Tensor, swap: Tensor, inverse: bool = False) -> Tensor:
    """Turn the channel pairs of ``x (B, H, L, D)`` by ``tables = half_tables(...)`` (by minus the angles with
    ``inverse``) with the layout's ``swap = swap_matrix(...)``: ``x C + (x S) Sn``. Returns ``x``'s shape and
    dtype (computed in the tables' dtype, also under autocast, and rounded once)."""
    swap = swap.to(tables.dtype)

    def turn(rows: slice, out: Tensor) -> None:
        part = x[rows]
        with torch.autocast(x.device.type, enabled=False):
            swapped = part.to(tables.dtype) @ swap                       # exact: one signed term per channel
        torch.mul(part, tables[0, rows], out=out).addcmul_(swapped, tables[1, rows], value=-1.0 if inverse else 1.0)
    return _by_steps(x, tables.dtype, turn)


def block_tables(pos: Tensor, block_scale: Tensor, channels: int) -> Tensor:
    """GeoPE's shift tables of positions ``pos (B, L, 3)`` for ``block_scale (n,)`` (``k_b``) and a head width
    ``channels``: ``(5, B, 1, L, channels)`` (``rotation_tables`` with a head axis)."""
    batch, length, _ = pos.shape
    return rotation_tables(pos.reshape(-1, 3), block_scale, channels).view(5, batch, 1, length, channels)


def turn_blocks(x: Tensor, tables: Tensor, inverse: bool = False) -> Tensor:
    """``R_b v_b`` (``R_b^T v_b`` with ``inverse``) for every block of ``x (B, H, L, D)`` with ``tables =
    block_tables(...)``; the last ``D mod 3`` channels pass through. Returns ``x``'s shape and dtype."""
    def turn(rows: slice, out: Tensor) -> None:
        apply_shifted(x[rows], tables[:, rows], transpose=inverse, out=out)
    return _by_steps(x, tables.dtype, turn)


def _by_steps(x: Tensor, dtype: torch.dtype, turn) -> Tensor:
    """``turn(rows, out[rows])`` over cache-sized steps of ``x``'s batch rows (``rotation.query_steps`` with
    this module's ``_STEP_ELEMENTS``; one step off the CPU) into a new ``out`` of ``x``'s shape in ``dtype``;
    returned in ``x``'s dtype."""
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    for rows in query_steps(x.shape[0], 1, x[:1].numel(), x.device, elements=_STEP_ELEMENTS):
        turn(rows, out[rows])
    return out.to(x.dtype)


class _TurnTokens(torch.autograd.Function):
    """A per-token rotation with a gradient for ``x`` only: saves the tables (shared with the other tensor
    of the pair and by the heads) and, for pairs, the swap matrix; the backward pass is the inverse rotation
    (``inverse``: the forward is), itself this Function when differentiated again (``create_graph``), so
    second derivatives are exact: the map is linear in ``x`` and the adjoint of a rotation is its inverse."""

    @staticmethod
    def forward(ctx, x: Tensor, tables: Tensor, swap: Tensor | None, inverse: bool = False) -> Tensor:
        ctx.save_for_backward(tables, swap)
        ctx.inverse = inverse
        return turn_blocks(x, tables, inverse) if swap is None else turn_halves(x, tables, swap, inverse)

    @staticmethod
    def backward(ctx, grad: Tensor):
        tables, swap = ctx.saved_tensors
        back = not ctx.inverse
        if torch.is_grad_enabled():                  # create_graph: the inverse rotation, differentiable again
            return _TurnTokens.apply(grad, tables, swap, back), None, None, None
        if swap is None:
            return turn_blocks(grad, tables, inverse=back), None, None, None
        return turn_halves(grad, tables, swap, inverse=back), None, None, None


def turn_tokens(x: Tensor, tables: Tensor, swap: Tensor | None = None) -> Tensor:
    """``turn_halves`` of ``x`` (with the pair layout's ``swap``) or ``turn_blocks`` (``swap=None``). Constant
    tables (fixed frequencies, positions without gradient) take the fast path, with a gradient for ``x`` only
    (``_TurnTokens``); tables that need a gradient (positions that do: a saliency map, an attack on the points)
    the same formulas under plain autograd, which also differentiates the tables."""
    if constant(tables):
        return _TurnTokens.apply(x, tables, swap)
    work = x.to(tables.dtype)
    with torch.autocast(x.device.type, enabled=False):                 # in the tables' dtype, rounded once
        if swap is None:
            return apply_shifted(work, tables).to(x.dtype)
        return (work * tables[0] + (work @ swap.to(tables.dtype)) * tables[1]).to(x.dtype)
