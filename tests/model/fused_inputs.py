"""Inputs shared by the fused attention's tests (test_fused_attention.py: the ops against their definitions;
test_fused_attention_layer.py: the layer on the Triton path against the torch path)."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.ops import knn

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def packed(sizes=(3, 1, 6, 2), k=4, seed=0, dtype=torch.float32):
    """Clouds of ``sizes`` points packed in one batch, and their kNN (clouds under ``k`` points repeat
    their neighbours cyclically)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    coord = (torch.rand(n, 3, generator=g, dtype=torch.float64) * 2).to(dtype)
    offset = torch.tensor(sizes).cumsum(0)
    idx, _ = knn(coord, coord, k, offset, offset, backend="torch")   # the kNN is not under test here
    return coord, idx
