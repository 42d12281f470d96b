"""The submanifold convolution against torch's dense conv3d on the same grid.

Active voxels of two clouds go into a dense (B, C, D, D, D) grid, zeros elsewhere; ``conv3d`` with the weight
moved from spconv's (C_out, k, k, k, C_in) to torch's (C_out, C_in, k, k, k) and padding k // 2, read at the
active voxels, is the definition of a submanifold convolution. Gradients too.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pointgeope.model.ptv3.sparse_conv import SubMConv3d, build_neighbours

SIDE = 9


def sparse_clouds(seed: int, counts=(120, 60)):
    gen = torch.Generator().manual_seed(seed)
    grids, batch = [], []
    for b, n in enumerate(counts):
        cells = torch.randperm(SIDE ** 3, generator=gen)[:n]
        grids.append(torch.stack([cells // SIDE ** 2, cells // SIDE % SIDE, cells % SIDE], 1))
        batch.append(torch.full((n,), b))
    return torch.cat(grids), torch.cat(batch)


def dense_reference(feat, grid, batch, weight, bias):
    b = int(batch.max()) + 1
    dense = feat.new_zeros(b, SIDE, SIDE, SIDE, feat.shape[1])
    dense = dense.index_put((batch, grid[:, 0], grid[:, 1], grid[:, 2]), feat).permute(0, 4, 1, 2, 3)
    out = F.conv3d(dense, weight.permute(0, 4, 1, 2, 3), bias, padding=weight.shape[1] // 2)
    return out.permute(0, 2, 3, 4, 1)[batch, grid[:, 0], grid[:, 1], grid[:, 2]]


@pytest.mark.parametrize("kernel_size, bias", [(3, True), (5, False), (1, True)])
def test_equals_dense_conv3d(kernel_size, bias):
    grid, batch = sparse_clouds(kernel_size)
    torch.manual_seed(0)
    conv = SubMConv3d(4, 6, kernel_size, bias=bias)
    feat = torch.randn(len(grid), 4)
    table = build_neighbours(grid, batch, kernel_size)
    out = conv(feat, table)
    ref = dense_reference(feat, grid, batch, conv.weight, conv.bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_gradients_equal_dense_conv3d():
    grid, batch = sparse_clouds(7)
    conv = SubMConv3d(3, 5, 3)
    feat = torch.randn(len(grid), 3, requires_grad=True)
    upstream = torch.randn(len(grid), 5)
    (conv(feat, build_neighbours(grid, batch, 3)) * upstream).sum().backward()
    ours = feat.grad.clone(), conv.weight.grad.clone(), conv.bias.grad.clone()
    feat.grad = conv.weight.grad = conv.bias.grad = None
    (dense_reference(feat, grid, batch, conv.weight, conv.bias) * upstream).sum().backward()
    for a, b in zip(ours, (feat.grad, conv.weight.grad, conv.bias.grad), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_point_order_does_not_matter_and_clouds_do_not_mix():
    """Permuting the rows permutes the output; a cloud's output ignores the other cloud (same cells)."""
    grid, batch = sparse_clouds(3, counts=(80, 80))
    grid[80:] = grid[:80]                                    # the second cloud in the very same voxels
    conv = SubMConv3d(2, 2, 3)
    feat = torch.randn(160, 2)
    out = conv(feat, build_neighbours(grid, batch, 3))
    perm = torch.randperm(160)
    out_p = conv(feat[perm], build_neighbours(grid[perm], batch[perm], 3))
    torch.testing.assert_close(out_p, out[perm])
    alone = conv(feat[:80], build_neighbours(grid[:80], batch[:80], 3))
    torch.testing.assert_close(out[:80], alone)


def test_weight_layout_is_spconvs():
    conv = SubMConv3d(4, 7, 3, bias=True)
    assert {k: tuple(v.shape) for k, v in conv.state_dict().items()} == {"weight": (7, 3, 3, 3, 4),
                                                                         "bias": (7,)}


def test_bad_input():
    grid = torch.tensor([[0, 0, 0], [1, 2, 3], [0, 0, 0]])
    build_neighbours(grid, torch.tensor([0, 0, 1]), 3)      # the same voxel in two clouds is fine
    with pytest.raises(ValueError, match="odd kernel_size"):
        SubMConv3d(2, 2, 4)
    with pytest.raises(ValueError, match="channels"):
        SubMConv3d(2, 2, 3)(torch.randn(3, 5), build_neighbours(grid[:2], torch.zeros(2, dtype=torch.long), 3))


def _representative_reference(feat, grid, batch, weight, bias):
    """By the definition, point by point: each point reads itself at the centre and, at every other offset
    d, the lowest-numbered point of its cloud in voxel g + d (if any)."""
    k = weight.shape[1]
    r = k // 2
    out = torch.zeros(len(feat), weight.shape[0], dtype=torch.float64)
    for i in range(len(feat)):
        out[i] = bias.double() + weight[:, r, r, r].double() @ feat[i].double()
        for dx in range(-r, r + 1):
            for dy in range(-r, r + 1):
                for dz in range(-r, r + 1):
                    if (dx, dy, dz) == (0, 0, 0):
                        continue
                    want = grid[i] + torch.tensor([dx, dy, dz])
                    hits = [j for j in range(len(feat)) if batch[j] == batch[i] and bool((grid[j] == want).all())]
                    if hits:
                        out[i] += weight[:, dx + r, dy + r, dz + r].double() @ feat[min(hits)].double()
    return out


def test_duplicate_voxels_read_one_representative():
    """Mix3D's overlaid scenes share voxels: each shared voxel is read through its lowest row (spconv's hash
    keeps one entry per voxel), every point still gets its own output and reads itself at the centre."""
    g = torch.Generator().manual_seed(3)
    grid = torch.randint(0, 3, (40, 3), generator=g)             # 27 cells for 40 points: many duplicates
    batch = torch.tensor([0] * 25 + [1] * 15)
    feat = torch.randn(40, 4, generator=g)
    conv = SubMConv3d(4, 5, 3)
    table = build_neighbours(grid, batch, 3)
    got = conv(feat, table)
    want = _representative_reference(feat, grid, batch, conv.weight.detach(), conv.bias.detach())
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    # two points in one voxel with different features get different outputs (each reads itself)
    same = [(i, j) for i in range(25) for j in range(i + 1, 25) if bool((grid[i] == grid[j]).all())]
    i, j = same[0]
    assert not torch.allclose(got[i], got[j])


def test_bfloat16_autocast_sums_the_offsets_in_float32():
    """Under bf16 autocast each offset's product is rounded to bf16 and their sum only once. Against the exact
    convolution of the bf16-rounded inputs (dense conv3d in float64), with positive inputs and weights (no
    cancellation: the partial sums grow), the error stays within ``2^-7 (W * f)``: the CPU's bf16 products
    (measured: up to 2 roundings, ``2^-8``) and one rounding of the sum. A bf16 sum, rounded at each of the up
    to 26 neighbours, reached ``2^-6``."""
    grid, batch = sparse_clouds(7, counts=(500, 450))
    torch.manual_seed(0)
    conv = SubMConv3d(16, 24, 3, bias=False)
    with torch.no_grad():
        conv.weight.abs_()
    feat = torch.rand(len(grid), 16, generator=torch.Generator().manual_seed(1)) + 0.5
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(feat, build_neighbours(grid, batch, 3))
    assert out.dtype == torch.bfloat16
    exact = dense_reference(feat.bfloat16().double(), grid, batch, conv.weight.detach().bfloat16().double(), None)
    error = (out.double() - exact).abs() / exact
    assert float(error.max()) <= 2.0 ** -7


def test_bfloat16_autocast_sums_the_input_gradient_in_float32():
    """The backward under bf16 autocast: each offset's gradient rows (bf16 products) are added into the input's
    gradient in float32. Against the exact gradient (dense conv3d in float64 of the bf16-rounded weight and
    upstream gradient), with positive values, within ``2^-7``; summed in bf16 (the input cast to bf16 before
    its rows are gathered) it reached ``2^-6``."""
    grid, batch = sparse_clouds(7, counts=(500, 450))
    torch.manual_seed(0)
    conv = SubMConv3d(16, 24, 3, bias=False)
    with torch.no_grad():
        conv.weight.abs_()
    feat = (torch.rand(len(grid), 16, generator=torch.Generator().manual_seed(1)) + 0.5).requires_grad_()
    upstream = torch.rand(len(grid), 24, generator=torch.Generator().manual_seed(2)).bfloat16() + 0.5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(feat, build_neighbours(grid, batch, 3))
    out.backward(upstream)
    f64 = feat.detach().bfloat16().double().requires_grad_()
    exact = dense_reference(f64, grid, batch, conv.weight.detach().bfloat16().double(), None)
    (grad,) = torch.autograd.grad(exact, f64, upstream.double())
    assert float(((feat.grad.double() - grad).abs() / grad).max()) <= 2.0 ** -7
