"""Tests of pointgeope/model/coord_augment.py: Utonia's draws of the rope coordinates' augmentation."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.coord_augment import UTONIA_AUGMENT, CoordAugment

F64 = torch.float64


def test_coord_augment_draws_within_bounds_and_leaves_its_input():
    pos = torch.ones(4, 5, 3, dtype=F64)
    kept = pos.clone()
    out = CoordAugment(shift=0.5, jitter=1.1, rescale=1.2)(pos)
    assert torch.equal(pos, kept)
    factor = out[0, 0]                                # (1 + s) j r per axis, the same for every point
    assert torch.equal(out, factor.expand_as(out))
    assert bool(((factor > 0.5 / 1.1 / 1.2) & (factor < 1.5 * 1.1 * 1.2)).all())
    assert torch.equal(CoordAugment()(pos), pos) and UTONIA_AUGMENT.shift is None
    with pytest.raises(ValueError, match="finite jitter"):
        CoordAugment(jitter=float("nan"))
