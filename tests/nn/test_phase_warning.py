"""The warning of GeoPE phases that their positions' dtype rounds coarsely (pointgeope/nn/checks.py): its step is
the positions' own (bfloat16 keeps 8 significant bits: a step of r 2^-8 to r 2^-7 at magnitude r) times the phase
scale, and its advice follows the magnitudes: centring helps positions far from the origin, not those near it,
which it told to centre all the same."""
from __future__ import annotations

import warnings

import pytest
import torch

import pointgeope.nn.checks as checks
from pointgeope.nn import geope_qk


def said(monkeypatch, pos: torch.Tensor, k: float) -> list[str]:
    monkeypatch.setattr(checks, "_phase_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checks.check_positions("pos", pos, k)
    return [str(w.message) for w in caught]


def corners(top: float, low: float = 0.0) -> torch.Tensor:
    """Positions whose largest magnitude is ``top`` and whose per-axis extent is ``top - low``."""
    return torch.tensor([[low, low, low], [top, low, top], [low, top, low]], dtype=torch.float64)


def test_bfloat16_positions_near_the_origin_are_told_to_be_float32_not_centred(monkeypatch):
    """At 7.5 m bfloat16's step is 2^-5 m, times k = 8: phases known to 0.25 rad, and centring (they start at 0)
    changes nothing; float32 holds the phase of 60 rad to 2^-18 rad."""
    assert said(monkeypatch, corners(7.5).bfloat16(), 8.0) == [
        "GeoPE: pos up to 7.5 in bfloat16 turn by phases up to 60 rad, rounded in steps of 0.25 rad; give them in "
        "float32: the step is then 3.81e-06 rad"]


def test_no_word_where_the_step_is_below_the_threshold(monkeypatch):
    """At 1.9 m the bfloat16 step is 2^-7 m: phases of k = 8 known to 1/16 rad, below 1/8."""
    assert said(monkeypatch, corners(1.9).bfloat16(), 8.0) == []
    assert checks.phase_step(8.0, 1.9, torch.bfloat16) == 1 / 16
    assert checks.phase_step(8.0, 3.5, torch.bfloat16) == 1 / 8         # the threshold itself is said


@pytest.mark.parametrize("dtype, advice", [
    (torch.float32, "centre them (subtract their minimum or mean, as pointgeope's data pipeline does): the step is "
                    "then 0.0156 rad"),
    (torch.bfloat16, "give them in float32 and centre them (subtract their minimum or mean, as pointgeope's data "
                     "pipeline does): the step is then 0.0156 rad"),
])
def test_positions_far_from_the_origin_are_told_to_be_centred(monkeypatch, dtype, advice):
    """A 16 km extent at 2^20 m (both held exactly in bfloat16): centred, its magnitude is 2^14 (plus bfloat16's
    step at 2^20, 2^13, by which the extent read there may be short: 24576), where bfloat16 still steps by 2^7 m
    (1024 rad at k = 8) and float32 by 2^-9 m, 2^-6 rad; float32 as it is would step by 1 rad."""
    got = said(monkeypatch, corners(2.0 ** 20 + 2.0 ** 14, 2.0 ** 20).to(dtype), 8.0)
    assert len(got) == 1 and got[0].endswith(advice), got


def test_the_api_says_it_once(monkeypatch):
    """geope_qk reads its positions and says the step at the largest of its block scales, k_0 = pos_scale / A =
    25 / 3 (7.5 m: 62.5 rad), once for two calls."""
    monkeypatch.setattr(checks, "_phase_warned", False)
    q = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geope_qk(q, q, corners(7.5).float(), pos_scale=25.0)           # float32 near the origin: nothing to say
        assert caught == []
        for _ in range(2):
            geope_qk(q, q, corners(7.5).bfloat16(), pos_scale=25.0)
    assert len(caught) == 1 and str(caught[0].message).startswith(
        "GeoPE: pos_q up to 7.5 in bfloat16 turn by phases up to 62.5 rad, rounded in steps of 0.26 rad; give them")
