"""Tests of pointgeope/model/norm.py's modules as checkpoints and other code see them: the network's state-dict
layout (the published one, from before the fused module), the attention's weight MLP loaded into the published
``nn.Sequential``, and ``convert_sync_batchnorm`` keeping the ReLU."""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from pointgeope.model import norm
from pointgeope.model.norm import BatchNormReLU, convert_sync_batchnorm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_checkpoint_layout_is_unchanged():
    """The network's state-dict keys and shapes are those of the published layout (written before the
    fused module existed: ``tests/fixtures/ptv1_state_keys.txt``)."""
    from pointgeope.model import PointTransformerSeg
    from tests.model.test_network import TINY

    state = PointTransformerSeg(pe="rpe", **TINY).state_dict()
    got = [f"{k} {' '.join(map(str, v.shape))}".strip() for k, v in state.items()]
    assert got == [line.strip() for line in (FIXTURES / "ptv1_state_keys.txt").read_text().splitlines()]


def test_the_published_pair_mlp_loads_the_layers_weights():
    """The attention's weight MLP as published (``BN, ReLU, Linear, BN, ReLU, Linear`` modules) loads the
    layer's ``linear_w`` strictly and computes the same, training and eval (the torch path)."""
    from pointgeope.model import PointTransformerLayer

    layer = PointTransformerLayer(16, share_planes=4, neighbours=4)
    nn = torch.nn
    published = nn.Sequential(nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4), nn.BatchNorm1d(4), nn.ReLU(),
                              nn.Linear(4, 4))
    published.load_state_dict(layer.linear_w.state_dict(), strict=True)
    x = torch.randn(50, 16)
    for train in (True, False):
        layer.train(train), published.train(train)
        assert torch.equal(layer.linear_w(x), published(x))


def test_convert_sync_batchnorm_keeps_the_relu():
    """``convert_sync_batchnorm``: every ``BatchNormReLU`` a ``SyncBatchNormReLU`` sharing its parameters, plain
    batch norms torch's ``SyncBatchNorm``, the same state dict and (without a process group, on the CPU) the
    same outputs in training and eval."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), BatchNormReLU(8), torch.nn.Linear(8, 8),
                                norm.BatchNorm(8))
    reference, fused = copy.deepcopy(model), model[1]
    synced = convert_sync_batchnorm(model)
    assert type(synced[1]) is norm.SyncBatchNormReLU and type(synced[3]) is torch.nn.SyncBatchNorm
    assert synced[1].weight is fused.weight and synced[1].running_var is fused.running_var
    assert list(synced.state_dict()) == list(reference.state_dict())
    x = torch.randn(32, 4)
    for train in (True, False):
        synced.train(train), reference.train(train)
        got, want = synced[:2](x), reference[:2](x)          # (the running buffers move once each)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert (got == 0).any()                               # the ReLU kept
        torch.testing.assert_close(synced[2:](got), reference[2:](want), rtol=0, atol=0)


def test_convert_sync_batchnorm_keeps_the_blocks_residual_and_relu():
    """A PTv1 block converted: its third norm (``BatchNormAddReLU``, whose forward takes the identity) becomes a
    ``SyncBatchNormAddReLU`` sharing its parameters and buffers, not a plain ``SyncBatchNorm`` (which takes one
    argument: the block's forward would fail); the same state dict, and the same outputs and running buffers as the
    unconverted block (without a process group, on the CPU), training then eval."""
    from pointgeope.model.network import PointTransformerBlock
    from pointgeope.model.residual_norm import SyncBatchNormAddReLU

    torch.manual_seed(0)
    block = PointTransformerBlock(16, 8, 4)
    reference, third = copy.deepcopy(block), block.bn3
    synced = convert_sync_batchnorm(block)
    assert type(synced.bn3) is SyncBatchNormAddReLU and synced.bn3.weight is third.weight
    assert synced.bn3.running_var is third.running_var and synced.bn3.num_batches_tracked is third.num_batches_tracked
    assert type(synced.bn1) is norm.SyncBatchNormReLU
    assert list(synced.state_dict()) == list(reference.state_dict())
    coord, feat = torch.rand(40, 3), torch.randn(40, 16)
    idx = torch.cdist(coord, coord).topk(4, largest=False).indices
    for train in (True, False):
        synced.train(train), reference.train(train)
        got, want = synced(coord, feat, idx), reference(coord, feat, idx)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert (got == 0).any() and (got > 0).any()               # the ReLU kept, after the add
    for name, t in reference.state_dict().items():
        assert torch.equal(synced.state_dict()[name], t), name
