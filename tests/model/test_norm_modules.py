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
