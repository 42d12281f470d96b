"""``PointTransformerSeg(pe="rpe")`` is Point Transformer as defined (tests/model/ptv1_reference.py): the same
logits in float64, in eval mode (running statistics) and in train mode (batch statistics), for the published
sizes and for a small network whose stages have other widths, depths and neighbourhoods. docs/recipe.md's
"network" row rests on it."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model import PointTransformerSeg
from pointgeope.model.config import ModelConfig
from tests.model.ptv1_reference import Reference

SMALL = {"planes": (16, 32, 48, 64), "blocks": (1, 2, 1, 1), "strides": (1, 4, 4, 4), "neighbours": (8, 16, 12, 8),
         "decoder_blocks": (1, 1, 1, 2), "share_planes": 8}


def _network(**sizes) -> PointTransformerSeg:
    """The float64 network with its batch norms' statistics and affine parameters drawn away from 0 and 1, so
    that eval mode differs from train mode and from the identity."""
    torch.manual_seed(0)
    net = PointTransformerSeg(pe="rpe", **sizes).double()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.normal_(0, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
    return net


def _clouds(sizes):
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    coord = torch.rand(n, 3, generator=g, dtype=torch.float64) * torch.tensor([3.0, 2.0, 1.5], dtype=torch.float64)
    feat = torch.cat([torch.rand(n, 3, generator=g, dtype=torch.float64), coord], dim=1)     # [rgb | xyz]
    return coord, feat, torch.tensor(sizes).cumsum(0).tolist()


@pytest.mark.parametrize("train", [False, True])
def test_a_small_network_of_two_clouds_gives_the_definitions_logits(train):
    net = _network(**SMALL).train(train)
    coord, feat, offset = _clouds([700, 530])
    with torch.no_grad():
        ours = net(coord, feat, torch.tensor(offset))
        ref = Reference(net.state_dict(), SMALL["strides"], SMALL["neighbours"], SMALL["share_planes"], train)(
            coord, feat, offset)
    assert ours.abs().max() > 0.1
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


def test_the_published_network_gives_the_definitions_logits():
    """PointTransformerSeg50 (planes 32-512, strides 1-4-4-4-4, k 8-16-16-16-16): one cloud of 4,200 points, 16
    at the coarsest stage, enough for its 16 neighbours."""
    net = _network().eval()
    cfg = ModelConfig()
    coord, feat, offset = _clouds([4200])
    with torch.no_grad():
        ours = net(coord, feat, torch.tensor(offset))
        ref = Reference(net.state_dict(), cfg.strides, cfg.neighbours, cfg.share_planes, False)(coord, feat, offset)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
