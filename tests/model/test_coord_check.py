"""The networks' warning for float32 coordinates far from 0 (pointgeope/model/coord_check.py), against float32's
definition: 24 significant bits, so the step at |x| in [2^e, 2^(e+1)) is 2^(e - 23); warned past an eighth of the
voxel (pointgeope/coord_steps.py, the rule predict's scans are warned by)."""
from __future__ import annotations

import warnings

import pytest
import torch

from pointgeope.model.coord_check import coarse_note
from pointgeope.model.network import PointTransformerSeg
from pointgeope.scans.precision import float32_note

TWO_STAGES = dict(pe="geope", in_channels=6, num_classes=5, planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                  strides=(1, 4), neighbours=(4, 4), share_planes=4)


def utm_cloud(dtype=torch.float32, n=40):
    g = torch.Generator().manual_seed(0)
    local = torch.rand(n, 3, generator=g, dtype=torch.float64) * 3
    return (local + torch.tensor([5.0e5, 4.2e6, 100.0], dtype=torch.float64)).to(dtype), torch.rand(n, 6, generator=g)


def forward_warnings(model, coord, feat):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = model(coord, feat, [coord.shape[0]])
    return [str(w.message) for w in caught if w.category is RuntimeWarning], out


def test_float32_utm_metres_given_to_the_network_are_warned_once():
    """4.2e6 m lies in [2^22, 2^23): float32 steps of 2^-1 m, past 0.04 / 8; said once per network."""
    torch.manual_seed(0)
    model = PointTransformerSeg(**TWO_STAGES, grid_size=0.04).eval()
    coord, feat = utm_cloud()
    said, out = forward_warnings(model, coord, feat)
    assert len(said) == 1 and said[0].startswith("coord in float32 reaches 4.2e+06 m from 0, where float32 comes "
                                                 "in steps of 0.5 m (the model's voxels: 0.04 m)")
    assert "subtract an offset near the points" in said[0] and out.shape == (40, 5)
    assert forward_warnings(model, coord, feat)[0] == []                 # once per network
    fresh = PointTransformerSeg(**TWO_STAGES, grid_size=0.04).eval()
    shifted = (utm_cloud(torch.float64)[0] - utm_cloud(torch.float64)[0].amin(0)).float()
    assert forward_warnings(fresh, shifted, feat)[0] == []               # the pipeline's shift: metres from 0


@pytest.mark.parametrize(("reach", "grid", "warned"), [(65535.5, 0.04, False), (65536.5, 0.04, True),
                                                       (32767.5, 0.02, False), (32768.5, 0.02, True)])
def test_the_threshold_is_an_eighth_of_the_voxel(reach, grid, warned):
    """float32's step below 2^16 is 2^-8 m = 3.9 mm (within 5 mm, an eighth of 0.04 m), from 2^16 on 7.8 mm; at
    0.02 m (2.5 mm) the step passes at 2^15. The same answer as predict's note for a float32 file."""
    coord = torch.tensor([[reach, 0.25, 1.0]], dtype=torch.float32)
    assert (coarse_note(coord, grid) is not None) == warned
    assert (float32_note("s.npy", coord.double().numpy(), 1.0, grid) is not None) == warned


def test_other_dtypes_follow_their_own_steps():
    """bfloat16 holds 8 significant bits: 100 m in [2^6, 2^7) comes in steps of 2^-1 m; float64 is never read."""
    note = coarse_note(torch.tensor([[100.0, 1.0, 1.0]], dtype=torch.bfloat16), 0.04)
    assert "where bfloat16 comes in steps of 0.5 m" in note and note.endswith("; give them in float32")
    assert coarse_note(torch.tensor([[100.0, 1.0, 1.0]]), 0.04) is None                   # float32: 7.6e-6 m
    assert coarse_note(torch.tensor([[4.2e9, 1.0, 1.0]], dtype=torch.float64), 0.04) is None
    assert coarse_note(torch.zeros(0, 3), 0.04) is None
