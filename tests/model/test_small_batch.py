"""Training batches at the edge of what batch norm takes (pointgeope/model/small_batch.py): one row at a stage is
refused (SmallBatchError), two rows train. With two rows a channel's normalised values are ``+-d / (2 sqrt(d^2 / 4 +
eps))`` for rows ``d`` apart (``+-1`` for ``d >> sqrt(eps)``, 0 for equal rows), so the step stays finite: a NaN step
(``nan_step_<s>.pt``) of a tiny batch has another cause than its batch norm's statistics."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pointgeope.model.network import PointTransformerSeg
from pointgeope.model.small_batch import SmallBatchError

TWO_STAGES = dict(in_channels=6, num_classes=5, planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                  strides=(1, 4), neighbours=(4, 4), share_planes=4)


def test_two_rows_of_batch_norm_are_the_definitions_values():
    """Two rows ``d`` apart normalise to ``+-(d / 2) / sqrt(d^2 / 4 + eps)`` (biased variance), equal rows to 0 (up to
    float32's rounding of torch's statistics)."""
    norm = torch.nn.BatchNorm1d(3).train()
    rows = torch.tensor([[0.0, 5.0, 1.0], [2.0, 5.0, 1.0 + 1e-3]])
    d = (rows[0] - rows[1]).abs()
    expected = (d / 2) / torch.sqrt(d * d / 4 + norm.eps)
    got = norm(rows).detach()
    torch.testing.assert_close(got[1], torch.where(rows[1] > rows[0], expected, -expected), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[0], -got[1], atol=1e-4, rtol=1e-3)
    assert got[:, 1].abs().max() < 1e-4 and abs(float(got[1, 2]) - 0.156) < 0.002      # d = 1e-3: 0.156, not 1


@pytest.mark.parametrize("pe", ["geope", "rpe"])
@pytest.mark.parametrize("cloud", ["random", "equal", "near"])
def test_a_step_whose_last_stage_keeps_two_rows_is_finite(pe, cloud):
    """8 points keep 8 // 4 = 2 at stage 2: the loss and every gradient finite, for distinct points, all points
    equal (the stage's two rows equal: variance 0) and points 1e-6 m apart (the steepest normalisation)."""
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **TWO_STAGES).train()
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(8, 3, generator=g)
    if cloud != "random":
        coord = coord[:1].expand(8, 3) + (torch.rand(8, 3, generator=g) * 1e-6 if cloud == "near" else 0.0)
    feat = torch.rand(8, 6, generator=g) if cloud == "random" else torch.full((8, 6), 0.5)
    loss = F.cross_entropy(model(coord, feat, [8]), torch.arange(8) % 5)
    loss.backward()
    assert torch.isfinite(loss)
    assert [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()] == []
    with pytest.raises(SmallBatchError, match="keeps 1 at stage 2"):
        model(coord[:7], feat[:7], [7])
