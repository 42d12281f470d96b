"""``knn_graph``: PyG's k-nearest-neighbour graph computed with pointgeope's kNN.

``torch_geometric.nn.knn_graph`` needs ``torch-cluster`` or ``pyg-lib``; this one runs on the backends of
``pointgeope.model.ops.knn`` (pykdtree / scipy on the CPU, Triton or torch on CUDA) and returns the same
graph: every point ``i`` receives an edge from each of its ``k`` nearest points ``j`` of the same example::

    # edge_index: [ j_00 j_01 ... j_0(k-1) | j_10 ... | ... ]   row 0: sources (neighbours)
    #             [ 0    0    ... 0        | 1    ... | ... ]   row 1: targets (centres), flow source_to_target
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.model.ops import knn

__all__ = ["knn_graph"]


def knn_graph(pos: Tensor, k: int, batch: Tensor | None = None, loop: bool = False,
              backend: str | None = None) -> Tensor:
    """The ``k``-NN graph of ``pos`` within each example, as ``torch_geometric.nn.knn_graph`` builds it.

    Args:
        pos: ``(N, 3)`` positions.
        k: neighbours per point.
        batch: ``(N,)`` sorted example index of every point (``Batch.batch``), or ``None`` for one example.
        loop: count the point itself among its ``k`` neighbours.
        backend: ``pointgeope.model.ops.knn``'s backend (``None``: the device's default).

    Returns:
        ``edge_index (2, E)``: row 0 the neighbours ``j``, row 1 the points ``i``, sorted by ``i`` then by
        distance. An example of ``n <= k`` points gives each point its ``n - 1`` others (``n`` with
        ``loop``): no edge repeats.
    """
    if pos.dim() != 2 or pos.shape[1] != 3:
        raise ValueError(f"expected pos of shape (N, 3), got {tuple(pos.shape)}")
    num = pos.shape[0]
    if batch is None:
        batch = torch.zeros(num, dtype=torch.long, device=pos.device)
    if batch.shape != (num,) or bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"expected batch of shape ({num},) sorted by example, got shape {tuple(batch.shape)}")
    sizes = torch.unique_consecutive(batch, return_counts=True)[1]
    offset = sizes.cumsum(0)
    idx, _ = knn(pos, pos, k + (0 if loop else 1), offset, offset, backend)       # sorted, self at distance 0
    rows = torch.arange(num, device=pos.device)
    column = torch.arange(idx.shape[1], device=pos.device)
    keep = column < sizes.repeat_interleave(sizes).unsqueeze(1)    # knn repeats the n points of small examples
    if not loop:
        keep &= idx != rows.unsqueeze(1)
        keep &= keep.cumsum(1) <= k                                # the k nearest others
    return torch.stack([idx[keep], rows.unsqueeze(1).expand_as(idx)[keep]])
