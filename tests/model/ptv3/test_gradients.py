"""PTv3 (pointgeope/model/ptv3) differentiated with respect to the coordinates, with the rotary encodings of
queries and keys (pointgeope/model/qk_encodings.py): constant rotation tables (``qk_kernels``' fast Function) when
the coordinates need no gradient, plain autograd when they do. ``gradcheck`` compares with finite differences."""
from __future__ import annotations

import pytest
import torch

from tests.model.ptv3.test_seg import cloud, net
from tests.model.test_network import _graph_nodes


@pytest.mark.parametrize("pe", ["geope", "rope3d", "point3drope"])
def test_gradcheck_in_the_coordinates(pe):
    """Two stages (the pooled coordinates are means of these), 8 points (gradcheck's backward passes grow with
    the logits: 8 x 13), two of them in one cell of the stride-2 pooling (so its reduction of several points is
    differentiated, not only copied); serialization and patches depend on the integer grid only, so the network
    is smooth in ``coord``."""
    model = net(pe, 16).double()
    pos, x, offset, grid = cloud(8, seed=1)
    assert len(torch.unique(grid // 2, dim=0)) == 7             # the stride-2 cells (test_seg.py's net): one of 2
    pos = pos.double().requires_grad_()
    assert torch.autograd.gradcheck(lambda p: model(p, x.double(), offset, grid_coord=grid), (pos,))


@pytest.mark.parametrize("pe", ["geope", "rope3d", "point3drope"])
def test_a_training_step_turns_with_constant_tables(pe):
    """The training step (features and weights need a gradient, coordinates not) runs the fast Function; with
    coordinates that need a gradient it does not, and the logits are the same."""
    model = net(pe, 16).train()
    pos, x, offset, grid = cloud(40)

    def step(p):
        torch.manual_seed(0)                                   # the same order shuffles and Point3DRoPE draws
        logits = model(p, x, offset, grid_coord=grid)
        return logits, _graph_nodes(logits.sum())

    fast, names = step(pos)
    assert "_TurnTokensBackward" in names
    slow, names = step(pos.clone().requires_grad_())
    assert "_TurnTokensBackward" not in names
    torch.testing.assert_close(slow, fast, atol=1e-5, rtol=1e-5)
