"""Serialization codes against their definitions: Morton by bit loops, Hilbert by the curve's properties.

The bitwise agreement with Pointcept's own codes is in test_pointcept_equivalence.py; here each curve is
checked against what defines it, independently of how serialization.py computes it.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from pointgeope.model.ptv3.serialization import encode, hilbert, serialization_depth, z_order


def morton_by_loops(x: int, y: int, z: int, depth: int) -> int:
    """Bit b of x, y, z at bits 3b+2, 3b+1, 3b: one bit at a time."""
    code = 0
    for b in range(depth):
        code |= ((x >> b) & 1) << (3 * b + 2)
        code |= ((y >> b) & 1) << (3 * b + 1)
        code |= ((z >> b) & 1) << (3 * b)
    return code


@pytest.mark.parametrize("depth", [1, 4, 11, 16])
def test_z_order_equals_bit_loops(depth):
    g = torch.randint(0, 2 ** depth, (300, 3), generator=torch.Generator().manual_seed(depth))
    want = [morton_by_loops(*map(int, row), depth) for row in g]
    assert z_order(g).tolist() == want


def full_cube(depth: int) -> torch.Tensor:
    side = range(2 ** depth)
    return torch.tensor(list(itertools.product(side, side, side)))


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_hilbert_is_a_hilbert_curve(depth):
    """On the whole cube [0, 2^d)^3: the codes are a bijection onto 0..8^d - 1, the curve starts at the
    origin, and consecutive cells along it are face neighbours (one axis changes by 1): what makes a
    Hilbert curve, unlike a Morton curve, continuous."""
    g = full_cube(depth)
    code = hilbert(g, depth)
    assert sorted(code.tolist()) == list(range(8 ** depth))
    path = g[torch.argsort(code)]
    assert path[0].tolist() == [0, 0, 0]
    steps = (path[1:] - path[:-1]).abs()
    assert bool((steps.sum(1) == 1).all())


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_hilbert_and_z_nest(depth):
    """The code of the parent cell (grid >> 1) at depth - 1 is the code >> 3: the curve visits the cells of
    one parent consecutively and the parents in the coarser curve's order (what pooling relies on)."""
    g = full_cube(depth)
    assert torch.equal(hilbert(g, depth) >> 3, hilbert(g >> 1, depth - 1))
    assert torch.equal(z_order(g) >> 3, z_order(g >> 1))


def test_z_order_is_not_continuous():
    """The check above can fail: the Morton curve jumps (so the adjacency test tells the curves apart)."""
    g = full_cube(2)
    path = g[torch.argsort(z_order(g))]
    assert bool(((path[1:] - path[:-1]).abs().sum(1) > 1).any())


def test_trans_orders_swap_x_and_y_and_batch_goes_above():
    g = torch.randint(0, 64, (50, 3), generator=torch.Generator().manual_seed(0))
    batch = torch.arange(50) % 3
    swapped = g[:, [1, 0, 2]]
    for order, curve in (("z", z_order), ("hilbert", lambda c: hilbert(c, 6))):
        assert torch.equal(encode(g, batch, 6, order), (batch << 18) | curve(g))
        assert torch.equal(encode(g, batch, 6, order + "-trans"), (batch << 18) | curve(swapped))
        assert torch.equal(encode(g, None, 6, order), curve(g))


def test_adaptive_depth_is_the_bits_of_max_plus_one():
    assert serialization_depth(torch.tensor([[0, 0, 0]])) == 1
    assert serialization_depth(torch.tensor([[7, 0, 1]])) == 4          # 8 needs 4 bits, as Pointcept
    assert serialization_depth(torch.tensor([[6, 0, 1]])) == 3


def test_a_grid_of_65536_cells_fits_16_bits_and_one_more_cell_does_not():
    """Indices 0..65535 fit 16 bits: depth 16, and the codes of the cube's far corner are the 48-bit maxima
    (Morton: every bit set; Hilbert: a bijection of [0, 2^48) ends at a corner adjacent to the start)."""
    edge = torch.tensor([[65535, 0, 0], [65535, 65535, 65535], [0, 0, 0]])
    assert serialization_depth(edge) == 16
    assert serialization_depth(torch.tensor([[32767, 0, 0]])) == 16         # bits(32768) = 16, as Pointcept
    assert int(z_order(edge)[1]) == 2 ** 48 - 1
    codes = encode(edge, None, 16, "hilbert")
    assert int(codes.max()) < 2 ** 48 and int(codes[2]) == 0
    with pytest.raises(ValueError, match="65536"):
        serialization_depth(torch.tensor([[0, 65536, 0]]))


def test_codes_beyond_the_bit_depth_are_refused():
    with pytest.raises(ValueError, match="grid_coord"):
        encode(torch.tensor([[8, 0, 0]]), None, 3)
    with pytest.raises(ValueError, match="grid_coord"):
        encode(torch.tensor([[-1, 0, 0]]), None, 3)
    with pytest.raises(ValueError, match=r"grid_coord reaches 65536, beyond the 16 bits .*0\.\.65535"):
        serialization_depth(torch.tensor([[2 ** 16, 0, 0]]))
    with pytest.raises(ValueError, match="depth"):
        encode(torch.tensor([[0, 0, 0]]), None, 17)
    with pytest.raises(ValueError, match="order"):
        encode(torch.tensor([[0, 0, 0]]), None, 3, "peano")
