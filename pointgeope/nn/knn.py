"""`knn_graph`: PyG's k-nearest-neighbour graph computed with pointgeope's kNN.

`torch_geometric.nn.knn_graph` needs `torch-cluster` or `pyg-lib`; this one has its signature and runs on
the backends of `pointgeope.model.ops.knn` (pykdtree, else scipy, else a pure-torch brute force on the CPU;
Triton on CUDA), returning the same graph: every point `i` receives an edge from each of its `k` nearest points
`j` of the same example. Every backend is exact and they agree where distances tie: the torch, Triton,
pykdtree and scipy backends all rank by the float32 squared distance `((dx^2 + dy^2) + dz^2)` (float64
positions kept in float64, but by Triton rounded to float32) and of points at the same distance take the smaller
index, the `k`-th included (`pointgeope.model.ops.knn_ties` re-ranks the trees' candidates), so they give the
same graph bit for bit (float64 positions: where their float32 rounding changes no order);
PyG's own kNN (torch-cluster) takes tied points in any order::

    # edge_index: [ j_00 j_01 ... j_0(k-1) | j_10 ... | ... ]   row 0: sources (neighbours)
    #             [ 0    0    ... 0        | 1    ... | ... ]   row 1: targets (centres), flow source_to_target
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.ops import knn
from pointgeope.model.ops.backends import TRITON_KNN_MAX_K
from pointgeope.nn.checks import check_coordinates, check_count, check_float_tensor, check_values
from pointgeope.number_kind import is_integer_tensor

__all__ = ["knn_graph"]

_FLOWS = ("source_to_target", "target_to_source")


def knn_graph(x: Tensor, k: int, batch: Tensor | None = None, loop: bool = False, flow: str = "source_to_target",
              cosine: bool = False, num_workers: int = 1, batch_size: int | None = None, *,
              backend: str | None = None) -> Tensor:
    """The `k`-NN graph of the points `x` within each example, as `torch_geometric.nn.knn_graph` builds it
    (same signature; `backend` is keyword-only).

    Args:
        x: `(N, 3)` finite floating-point positions (PyG's `x`; other widths are refused).
        k: neighbours per point, an int `>= 1`; an example of fewer points gives all it has.
        batch: `(N,)` integer example index of every point, sorted (`Batch.batch`), or `None` for one.
        loop: count the point itself among its `k` neighbours.
        flow: `"source_to_target"` (row 0 the neighbours) or `"target_to_source"` (row 0 the centres).
        cosine: PyG's cosine distance; not supported (`False` only).
        num_workers: accepted as in PyG (an int `>= 1`); the CPU backends use torch's threads.
        batch_size: the number of examples `B` (checked against `batch` when given).
        backend: `pointgeope.model.ops.knn`'s backend (`None`: the device's default).

    Returns:
        `edge_index (2, E)` int64, sorted by centre `i` then by distance. An example of `n <= k` points
        gives each point its `n - 1` others (`n` with `loop`): no edge repeats. `N = 0` gives `E = 0`.
    """
    pos = _check_points(x)
    check_values("knn_graph", x=x, batch=batch)
    k = check_count("k", k)
    check_count("num_workers", num_workers)
    if flow not in _FLOWS:
        raise ValueError(f"expected flow in {_FLOWS}, got {flow!r}")
    if cosine:
        raise ValueError("cosine=True is not supported by pointgeope.nn.knn_graph (Euclidean distance only); "
                         "normalise x to unit length for the same neighbours of nonzero vectors")
    num = pos.shape[0]
    if num == 0:
        return torch.empty(2, 0, dtype=torch.long, device=pos.device)
    sizes = _example_sizes(batch, num, batch_size, pos.device)
    offset = sizes.cumsum(0)
    width = min(k + (0 if loop else 1), int(sizes.max()))          # never more columns than the largest cloud
    if backend == "triton" and width > TRITON_KNN_MAX_K:           # its refusal would name k + 1, not k
        most = TRITON_KNN_MAX_K - (0 if loop else 1)
        itself = "" if loop else " (k + 1: the point itself is found, then dropped)"
        raise ValueError(f"knn_graph(k={k}, loop={loop}) searches {width} neighbours a point{itself}, and the "
                         f"triton backend takes up to {TRITON_KNN_MAX_K}: k <= {most}, or backend=None")
    idx, _ = knn(pos, pos, width, offset, offset, backend, check_finite=False)   # checked above; self first
    rows = torch.arange(num, device=pos.device)
    column = torch.arange(idx.shape[1], device=pos.device)
    keep = column < sizes.repeat_interleave(sizes).unsqueeze(1)    # knn repeats the n points of small examples
    if not loop:
        keep &= idx != rows.unsqueeze(1)
        keep &= keep.cumsum(1) <= k                                # the k nearest others
    edge_index = torch.stack([idx[keep], rows.unsqueeze(1).expand_as(idx)[keep]])
    return edge_index if flow == "source_to_target" else edge_index.flip(0)


def _check_points(x) -> Tensor:
    """`x (N, 3)`: a finite floating-point tensor within the point ops' `COORD_LIMIT` (NaN has no nearest
    neighbour, and float32 squared distances overflow beyond the limit: backends would return anything, or
    an index past the end)."""
    check_float_tensor("x", x)
    if x.dim() != 2 or x.shape[1] != 3:
        raise ValueError(f"expected x (positions) of shape (N, 3), got {tuple(x.shape)}")
    check_coordinates("x (positions)", x)
    return x


def _example_sizes(batch: Tensor | None, num: int, batch_size: int | None, device: torch.device) -> Tensor:
    """The point counts of the examples present in `batch` (sorted, integer, `(N,)`), in order."""
    if batch is None:
        if batch_size is not None and check_count("batch_size", batch_size) != 1:
            raise ValueError(f"expected batch_size 1 (or a batch vector) without batch, got {batch_size}")
        return torch.tensor([num], device=device)
    if not is_integer_tensor(batch):
        raise TypeError(f"expected batch an integer tensor, got {getattr(batch, 'dtype', type(batch).__name__)}")
    if batch.shape != (num,):
        raise ValueError(f"expected batch of shape ({num},) (one example index a point), got {tuple(batch.shape)}")
    if batch.device != device:
        raise ValueError(f"expected batch on the device of x ({device}), got {batch.device}")
    down = (batch[1:] < batch[:-1]).nonzero()
    if down.numel():
        at = int(down[0]) + 1
        raise ValueError(f"expected batch sorted by example (non-decreasing, as Batch.batch is), got batch[{at}] = "
                         f"{int(batch[at])} after {int(batch[at - 1])}: sort the points by example first")
    if int(batch[0]) < 0:
        raise ValueError(f"expected batch >= 0, got {int(batch[0])}")
    if batch_size is not None and int(batch[-1]) >= check_count("batch_size", batch_size):
        raise ValueError(f"expected batch < batch_size = {batch_size}, got {int(batch[-1])}")
    return torch.unique_consecutive(batch, return_counts=True)[1]
