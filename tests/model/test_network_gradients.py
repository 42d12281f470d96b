"""Gradients of PointTransformerSeg (pointgeope/model/network.py) with respect to the coordinates, as a saliency map
or an attack on the points needs: standard GeoPE's rotation tables are constants of the fast path, so coordinates
that need a gradient take plain autograd (attention.py), and the transition-up's inverse-distance weights are
recomputed from them (``network.up_distances``). ``gradcheck`` compares with finite differences in float64."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model import attention
from pointgeope.model.network import PointTransformerSeg

TWO_STAGES = dict(in_channels=3, num_classes=2, planes=(6, 12), blocks=(1, 1), decoder_blocks=(1, 1), strides=(1, 4),
                  neighbours=(4, 4), share_planes=3)


def _tiny(pe: str) -> PointTransformerSeg:
    torch.manual_seed(0)
    return PointTransformerSeg(pe=pe, **TWO_STAGES).double().eval()


@pytest.mark.parametrize("pe", ["geope", "geope+rpe", "rpe"])
def test_gradcheck_in_the_coordinates(pe):
    """Two clouds (5 and 11 points), two stages: kNN and FPS keep their choices under gradcheck's steps (the
    hierarchy is data), everything else is differentiated, the attention's rotations and the interpolation's
    weights included (with the hierarchy's distances as data, rpe's gradient lacked the weights' share)."""
    model = _tiny(pe)
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(16, 3, generator=g, dtype=torch.float64).requires_grad_()
    feat = torch.rand(16, 3, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda c: model(c, feat, torch.tensor([5, 16])), (coord,))


def test_the_rotation_tables_are_built_only_for_coordinates_without_gradient(monkeypatch):
    """The fast path (constant tables: the Triton kernels, ``rotation.query_frame``'s Function) is what a training
    step runs (features, not coordinates, need a gradient); coordinates that need one never reach the tables,
    whose ``out=`` ops autograd refuses. The two paths give the same logits, in float64 (the kernels' F64 path):
    in float32 their rounding, which batch norm over these few points amplifies, differed by up to 4e-4 over 200
    initialisations, and the network was initialised from whatever random state the tests before had left
    (under pytest-xdist one order in ten failed the 1e-5 of float32)."""
    built = []
    monkeypatch.setattr(attention, "rotation_tables",
                        lambda *a, _f=attention.rotation_tables: built.append(a[0].requires_grad) or _f(*a))
    torch.manual_seed(1)
    model = PointTransformerSeg(pe="geope", **TWO_STAGES).double().train()
    g = torch.Generator().manual_seed(2)
    coord = torch.rand(16, 3, generator=g, dtype=torch.float64)
    feat = torch.rand(16, 3, generator=g, dtype=torch.float64).requires_grad_()
    torch.manual_seed(0)
    fast = model(coord, feat, torch.tensor([5, 16]))
    fast.sum().backward()
    assert built and not any(built)                      # one table per layer, of constant coordinates
    built.clear()
    coord.requires_grad_()
    torch.manual_seed(0)
    slow = model(coord, feat, torch.tensor([5, 16]))
    slow.sum().backward()
    assert built == [] and coord.grad is not None and bool(torch.isfinite(coord.grad).all())
    torch.testing.assert_close(slow, fast)  # float64's own tolerance: 1e-7
