"""Tests of pointgeope/model/ops/morton.py: Morton keys from their bit definition, the padded block layout."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.model.ops.morton import BITS, block_boxes, cell, cloud_frame, code, cube_scale, keys_in, tile_sorted


def _interleave(cx: int, cy: int, cz: int) -> int:
    return sum(((c >> bit) & 1) << (3 * bit + axis) for bit in range(BITS) for axis, c in enumerate((cx, cy, cz)))


def test_keys_interleave_the_cell_bits_below_the_cloud_number():
    top = (1 << BITS) - 1
    support = torch.tensor([[0.0, 0.0, 0.0], [2.0, 1.0, 1.0], [5.0, 5.0, 5.0], [6.0, 5.0, 5.0]])  # cubes of side 2, 1
    query = torch.tensor([[1.5 * 2 / top, 0.0, 0.0], [0.0, 0.7, 2.0], [3.0, -1.0, 1.0], [5.5, 5.25, 5.0]])
    frame = cloud_frame(support, [2, 4])                              # both in the support clouds' cubes
    s_keys, q_keys = keys_in(support, [2, 4], frame), keys_in(query, [3, 4], frame)
    cells = [(1, 0, 0), (0, int(0.7 / 2 * top), top), (top, 0, int(1.0 / 2 * top)),                # clamped to the cube
             (int(0.5 * top), int(0.25 * top), 0)]
    assert q_keys.tolist() == [_interleave(*c) for c in cells[:3]] + [(1 << 3 * BITS) | _interleave(*cells[3])]
    assert s_keys.tolist() == [0, _interleave(top, top // 2, top // 2), 1 << 3 * BITS,
                               (1 << 3 * BITS) | _interleave(top, 0, 0)]


def test_tiles_are_each_cloud_sorted_by_key_in_padded_blocks_with_their_boxes():
    points = torch.arange(24, dtype=torch.float32).view(8, 3)
    keys = torch.tensor([5, 3, 4, 30, 10, 20, 11, 12])              # clouds of 3 and 5 points
    tiles = tile_sorted(points, keys, [3, 8], block=4)
    assert tiles.blocks == [1, 2] and tiles.rows.tolist() == [1, 2, 0, -1, 4, 6, 7, 5, 3, -1, -1, -1]
    assert torch.equal(tiles.planes[:, :3].T, points[[1, 2, 0]])
    assert torch.equal(tiles.planes[:, 4:9].T, points[[4, 6, 7, 5, 3]])
    boxes = block_boxes(tiles, 4)
    assert boxes.tolist() == [[0, 1, 2, 6, 7, 8], [12, 13, 14, 21, 22, 23], [9, 10, 11, 9, 10, 11]]


def test_too_many_clouds_for_the_key_is_refused():
    points = torch.zeros(1 << 15, 3)
    off = list(range(1, (1 << 15) + 1))
    with pytest.raises(ValueError, match="fewer than 32768 clouds"):
        cloud_frame(points, off)


def test_keys_are_the_plain_functions_on_every_point():
    """``keys_in`` on tensors is ``code`` of ``cell`` in the cube of ``cube_scale`` (the plain functions
    bucket_fps.py compiles with numba), in float32, points outside the cube included."""
    rng = np.random.default_rng(0)
    support = torch.from_numpy((rng.random((200, 3)) * [4.0, 3.0, 2.0]).astype(np.float32))
    query = support + torch.from_numpy(rng.normal(0, 0.5, (200, 3)).astype(np.float32))     # some outside
    frame = cloud_frame(support, [200])
    lo, scale = frame[0][0].numpy(), frame[1][0].numpy()                                   # float32
    assert cube_scale((support.max(0).values - support.min(0).values).max().numpy(), BITS) == scale
    assert keys_in(query, [200], frame).tolist() == \
        [code(*(cell(p[a], lo[a], scale, BITS) for a in range(3))) for p in query.numpy()]


def test_the_cpu_order_sorts_a_cloud_by_the_code_of_the_plain_functions():
    """``pointgeope.morton_order.morton_order`` (the CPU kNN's queries) is ``code`` of ``cell`` in
    the cloud's cube (``cube_scale`` of its side, float64) at ``morton_order.BITS`` bits, ties in row order (a stable
    sort); ``cloud_order`` the same of a whole cloud, float32 or float64."""
    from pointgeope.morton_order import BITS as bits, cloud_order, morton_order

    rng = np.random.default_rng(3)
    cloud = np.concatenate([rng.random((300, 3)) * [4.0, 3.0, 2.5], rng.integers(0, 3, (100, 3))]).astype(np.float32)
    lo, hi = cloud.min(0).astype(np.float64), cloud.max(0).astype(np.float64)
    scale = cube_scale((hi - lo).max(), bits)
    codes = [code(*(cell(float(p[a]), lo[a], scale, bits) for a in range(3))) for p in cloud]
    expected = sorted(range(len(cloud)), key=codes.__getitem__)
    assert morton_order(cloud).tolist() == expected
    assert cloud_order(cloud).tolist() == expected == cloud_order(cloud.astype(np.float64)).tolist()
    assert cloud_order(np.empty((0, 3), np.float32)).shape == (0,)


def test_the_code_interleaves_cells_up_to_21_bits():
    """``code`` takes cell numbers up to ``2^21 - 1`` (the normal estimate's fine grid), as ints and uint64
    arrays alike, and leaves those below ``2^16`` where the GPU keys have them."""
    rng = np.random.default_rng(8)
    cells = rng.integers(0, 1 << 21, (50, 3)).tolist() + [[(1 << 21) - 1] * 3, [0, (1 << 21) - 1, 1]]
    wide = [sum(((c >> bit) & 1) << (3 * bit + axis) for bit in range(21) for axis, c in enumerate(p)) for p in cells]
    assert [code(*p) for p in cells] == wide
    assert code(*np.array(cells, dtype=np.uint64).T).tolist() == wide
