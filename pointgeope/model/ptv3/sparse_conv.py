"""Submanifold sparse 3D convolution in plain torch, with spconv's ``SubMConv3d`` weights.

A submanifold convolution (Graham et al., CVPR 2018) computes outputs only at the active voxels and reads
only active voxels: for the voxel ``p`` of a cloud, with kernel size ``k`` (odd) and radius ``r = k // 2``,

    out[p] = bias + sum_{d in [-r, r]^3, p + d active} W[d + r] @ feat[p + d]

a cross-correlation, as ``torch.nn.functional.conv3d`` of the dense grid (zeros elsewhere), read at the
active voxels. The weight is stored as spconv 2.x stores it, ``(C_out, k, k, k, C_in)`` indexed
``[o, dx + r, dy + r, dz + r, i]``, so that Pointcept's checkpoints load as they are.

How it runs: each voxel gets a key ``((b * D_x + x) * D_y + y) * D_z + z`` (coordinates shifted by ``r`` so
``p + d`` never wraps into another row); the keys are sorted once, and for each of the ``k^3 - 1`` non-centre
offsets ``torch.searchsorted`` finds which voxels have that neighbour. That neighbour table (pairs of output
and input rows per offset) depends only on the voxels: it is built once per stage and cached on the
``PointBatch``; the offsets after the centre are the mirrors of those before (``p + d = q`` iff
``q - d = p``), so only half are searched, all in one ``searchsorted`` of ``(offsets, N)`` targets. The
convolution is then ``feat @ W_centre`` plus, per offset, a gather, a matrix product and an ``index_add_``
into the output rows. Runs on any device; autograd differentiates it. Under autocast the products are in half
precision and their sum in float32, rounded once to the products' dtype (as spconv's kernels accumulate): a
bfloat16 sum of the 27 offsets would round at every one.

Points sharing a voxel (Mix3D overlays two scenes without re-gridding them) are accepted as spconv's hash
table accepts them: a shared voxel is read by its neighbours through one representative point (its lowest
row), each point reads itself at the centre (:func:`build_neighbours`; ``docs/ptv3.md``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["NeighbourTable", "SubMConv3d", "build_neighbours", "subm_conv3d"]


@dataclass(frozen=True)
class NeighbourTable:
    """The active neighbours of every voxel for one kernel size.

    ``pairs[j] = (offset_index, out_rows, in_rows)``: for kernel offset ``offset_index`` (the flat index
    ``(dx + r) k^2 + (dy + r) k + dz + r``), voxel ``out_rows[m]`` has the active neighbour ``in_rows[m]``.
    The centre offset (every voxel is its own neighbour) is ``centre`` and has no pairs entry."""

    kernel_size: int
    centre: int
    pairs: tuple[tuple[int, Tensor, Tensor], ...]


def _voxel_keys(grid_coord: Tensor, batch: Tensor, radius: int) -> tuple[Tensor, tuple[int, int, int]]:
    """Keys (N,) int64 of the voxels shifted by ``radius`` and the extents ``(D_x, D_y, D_z)``."""
    g = grid_coord.long() + radius
    dims = [int(v) + radius + 1 for v in g.max(dim=0).values.tolist()]
    if (int(batch.max()) + 1) * math.prod(dims) >= 1 << 62:
        raise ValueError(f"grid_coord spans {dims} cells: too many for int64 voxel keys")
    key = ((batch.long() * dims[0] + g[:, 0]) * dims[1] + g[:, 1]) * dims[2] + g[:, 2]
    return key, (dims[0], dims[1], dims[2])


def build_neighbours(grid_coord: Tensor, batch: Tensor, kernel_size: int) -> NeighbourTable:
    """The :class:`NeighbourTable` of voxels ``grid_coord`` (N, 3) of clouds ``batch`` (N,).

    Several points of one cloud in one voxel (Mix3D's two overlaid scenes) are allowed, as spconv's hash
    table allows them: each occupied voxel is then represented, as the neighbour of other points, by one
    of its points (the lowest row), and every point reads itself at the centre offset; the other points
    of its voxel it does not read (:func:`_duplicate_pairs`)."""
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"expected an odd kernel_size, got {kernel_size}")
    r = kernel_size // 2
    key, (_, dy, dz) = _voxel_keys(grid_coord, batch, r)
    sorted_key, perm = torch.sort(key, stable=True)
    centre = kernel_size ** 3 // 2
    steps = _offset_steps(r, dy, dz, key.device)                    # (k^3,) key step of each offset
    if sorted_key.numel() > 1 and bool((sorted_key[1:] == sorted_key[:-1]).any()):
        return NeighbourTable(kernel_size, centre, _duplicate_pairs(key, sorted_key, perm, steps, centre))
    half = _search(key, sorted_key, steps[:centre], perm)              # offsets before the centre: searched
    # offset -d is offset d's mirror (flat index k^3 - 1 - index): p + d = q  <=>  q - d = p
    pairs = [(i, *half[i]) for i in range(centre)]
    pairs += [(2 * centre - i, half[i][1], half[i][0]) for i in reversed(range(centre))]
    return NeighbourTable(kernel_size, centre, tuple(pairs))


def _offset_steps(radius: int, dy: int, dz: int, device: torch.device) -> Tensor:
    """The key step ``(dx D_y + dy) D_z + dz`` of every offset in flat order (x slowest, z fastest), made on
    ``device`` (no copy from the host, which would wait for a GPU's queue)."""
    o = torch.arange(-radius, radius + 1, device=device)
    ox, oy, oz = torch.meshgrid(o, o, o, indexing="ij")
    return ((ox * dy + oy) * dz + oz).flatten()


def _search(key: Tensor, sorted_key: Tensor, steps: Tensor, lookup: Tensor) -> list[tuple[Tensor, Tensor]]:
    """For each step ``s`` of ``steps`` (S,): the rows ``p`` (increasing) whose ``key[p] + s`` is in ``sorted_key``,
    and ``lookup`` at its position there. All steps in one search (``(S, N)`` targets), so that a GPU waits
    for the host twice (the counts, the nonzero), not twice a step."""
    target = key[None, :] + steps[:, None]                                          # (S, N)
    pos = torch.searchsorted(sorted_key, target).clamp_(max=sorted_key.numel() - 1)
    found = sorted_key[pos] == target
    counts = found.sum(dim=1).tolist()
    which, rows = found.nonzero(as_tuple=True)                                      # by step, then row
    return list(zip(rows.split(counts), lookup[pos[which, rows]].split(counts), strict=True))


def _duplicate_pairs(key: Tensor, sorted_key: Tensor, perm: Tensor, steps: Tensor, centre: int) -> tuple:
    """The pairs of voxels shared by several points: for each non-centre offset ``d``, every point ``p``
    whose voxel ``v(p) + d`` is occupied reads that voxel's representative (its lowest row; ``perm`` of the
    stable sort ``sorted_key`` lists a voxel's rows in increasing order, so the first of each run).
    Not mirrored: the representative relation is not symmetric."""
    unique_key, first = _first_of_runs(sorted_key)
    others = [i for i in range(steps.numel()) if i != centre]
    found = _search(key, unique_key, torch.cat([steps[:centre], steps[centre + 1:]]), perm[first])
    return tuple((index, rows, neighbours) for index, (rows, neighbours) in zip(others, found, strict=True))


def _first_of_runs(sorted_key: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct values of ``sorted_key`` and the position of the first of each run of equal values."""
    new = torch.ones_like(sorted_key, dtype=torch.bool)
    new[1:] = sorted_key[1:] != sorted_key[:-1]
    first = torch.nonzero(new).flatten()
    return sorted_key[first], first


def subm_conv3d(feat: Tensor, table: NeighbourTable, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``out`` (N, C_out) of the submanifold convolution of ``feat`` (N, C_in) with ``weight``
    (C_out, k, k, k, C_in) (spconv's layout) and ``bias`` (C_out,) over the neighbours ``table``."""
    c_out, c_in = weight.shape[0], weight.shape[-1]
    w = weight.reshape(c_out, -1, c_in)                       # (C_out, k^3, C_in)
    out = feat @ w[:, table.centre].t()                       # (under autocast: in its precision)
    dtype = out.dtype
    if dtype in (torch.float16, torch.bfloat16):              # half-precision products, summed in float32
        out = out.float()                                     # and rounded once (spconv's accumulators)
    if bias is not None:
        out = out + bias.to(out.dtype)
    for index, out_rows, in_rows in table.pairs:
        if out_rows.numel():                                  # in place: no copy of out per offset
            out.index_add_(0, out_rows, (feat[in_rows] @ w[:, index].t()).to(out.dtype))
    return out.to(dtype)


class SubMConv3d(nn.Module):
    """Submanifold 3D convolution; parameters ``weight`` (C_out, k, k, k, C_in) and ``bias`` (C_out,) as
    spconv's ``SubMConv3d`` (same names and layout), initialised as spconv initialises them.

    Args:
        in_channels, out_channels: C_in, C_out.
        kernel_size: odd k (PTv3: 3 in the blocks' xCPE, 5 in the embedding).
        bias: add a learnt bias.
    Shapes:
        forward(feat (N, C_in), table) -> (N, C_out); the table from :func:`build_neighbours`.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, bias: bool = True) -> None:
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"expected an odd kernel_size, got {kernel_size}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        k = kernel_size
        self.weight = nn.Parameter(torch.empty(out_channels, k, k, k, in_channels))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-uniform weights and uniform bias with fan-in ``C_in k^3``, as torch's (and spconv's) conv."""
        fan_in = self.in_channels * self.kernel_size ** 3
        bound = 1.0 / math.sqrt(fan_in)
        nn.init.uniform_(self.weight, -bound, bound)   # = kaiming_uniform_(a=sqrt(5)) at this fan-in
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, feat: Tensor, table: NeighbourTable) -> Tensor:
        if feat.shape[-1] != self.in_channels:
            raise ValueError(f"expected feat with {self.in_channels} channels, got {tuple(feat.shape)}")
        if table.kernel_size != self.kernel_size:
            raise ValueError(f"neighbour table of kernel {table.kernel_size} for a kernel of {self.kernel_size}")
        return subm_conv3d(feat, table, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"bias={self.bias is not None}")
