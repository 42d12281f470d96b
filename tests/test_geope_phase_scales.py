"""The phases per unit of position that ``base`` and ``pos_scale`` make (pointgeope/geope_checks.py
``check_phase_scales``): within [2^-126, 2^66], where the float32 phases of every accepted coordinate (within
+-2^60) stay finite and no frequency rounds to 0. Before, finite positive values past them built, and gave NaN
features (an overflowed phase) or blocks that never turned (a frequency rounded to 0), without a word."""
from __future__ import annotations

import math
import re

import pytest
import torch

from pointgeope.geope import GeoPE, relative_geope
from pointgeope.geope_checks import COORD_LIMIT, PHASE_SCALE_MAX, PHASE_SCALE_MIN
from pointgeope.model.qk_encodings import GeoPEQK, Point3DRoPEQK, PointRoPEQK

CORNERS = torch.tensor([[COORD_LIMIT, COORD_LIMIT, COORD_LIMIT], [-COORD_LIMIT, -COORD_LIMIT, -COORD_LIMIT]],
                       dtype=torch.float32)    # the widest displacement the point ops accept: 2^61 per axis


def test_the_largest_phase_scale_keeps_the_widest_displacement_finite_and_the_next_is_refused():
    """One block (3 channels): k = pos_scale / 3. At k = 2^66 linear GeoPE turns the two opposite corners of the
    accepted cube by sqrt(3) 2^127 rad, finite; at 2^67 that phase is inf in float32 and the features NaN, which
    is what the bound keeps out (the next float above 2^66 is refused)."""
    x = torch.randn(1, 3, generator=torch.Generator().manual_seed(0))
    top = GeoPE(3, pos_scale=3 * PHASE_SCALE_MAX)
    assert torch.isfinite(top.relative(x, CORNERS[:1], CORNERS[1:], linear=True)).all()
    assert torch.isfinite(top(x, CORNERS)).all()
    assert not torch.isfinite(relative_geope(x, CORNERS[:1], CORNERS[1:], torch.tensor([2.0 ** 67]), True)).all()
    with pytest.raises(ValueError, match=r"expected base and pos_scale whose phase per unit pos_scale \* base\^e / 3 "
                                         r"lies in \[2\^-126, 2\^66\] for e in \[0, 0\], got 7.379e\+19 at e = 0 "
                                         r"\(base=100.0, pos_scale=.*\): positions up to 2\^61 apart per axis .* "
                                         r"overflow float32"):
        GeoPE(3, pos_scale=3 * math.nextafter(PHASE_SCALE_MAX, math.inf))


def test_the_smallest_phase_scale_is_a_normal_float32_and_the_next_below_is_refused():
    """Below float32's smallest normal number a block scale loses its bits; at 2^-150 it is 0 and the block never
    turns."""
    low = GeoPE(3, pos_scale=3 * PHASE_SCALE_MIN)
    assert low.block_scale(torch.float32, torch.device("cpu")).item() == PHASE_SCALE_MIN
    with pytest.raises(ValueError, match=r"got 5.877e-39 at e = 0 .*: that phase per unit is below float32's normal "
                                         r"range"):
        GeoPE(3, pos_scale=3 * PHASE_SCALE_MIN / 2)


def test_the_base_is_bounded_through_the_last_blocks_frequency():
    """Six channels, two blocks: w_1 = base^(-1/3), k_1 = pos_scale w_1 / 3. pos_scale 3: base 2^-198 gives k_1 =
    2^66 (accepted, within pow's rounding), base 2^-201 gives 2^67; base 2^375 gives 2^-125, base 2^381 2^-127."""
    top = GeoPE(6, base=2.0 ** -198, pos_scale=3.0).block_scale(torch.float64, "cpu").tolist()
    assert top == [1.0, pytest.approx(2.0 ** 66, rel=1e-14)]
    with pytest.raises(ValueError, match=r"for e in \[-0.3333, 0\], got .* at e = -0.3333 .*overflow float32"):
        GeoPE(6, base=2.0 ** -201, pos_scale=3.0)
    low = GeoPE(6, base=2.0 ** 375, pos_scale=3.0).block_scale(torch.float64, "cpu").tolist()
    assert low == [1.0, pytest.approx(2.0 ** -125, rel=1e-14)]
    with pytest.raises(ValueError, match=r"at e = -0.3333 .*below float32's normal range"):
        GeoPE(6, base=2.0 ** 381, pos_scale=3.0)


def test_a_base_whose_frequency_overflows_float32_is_refused_where_it_gave_nan():
    """base 1e-300: w_1 = 1e150 is a float64, inf as the float32 table, and the features of a point at the origin
    NaN (inf * 0); the frequency itself is bounded, not only the product."""
    with pytest.raises(ValueError, match=r"whose frequency base\^e lies in \[2\^-126, FLT_MAX\] .* got 1e\+150"):
        GeoPE(12, base=1e-300, pos_scale=1.0)


@pytest.mark.parametrize("make", [lambda **kw: GeoPEQK(12, **kw), lambda **kw: Point3DRoPEQK(12, **kw)])
def test_the_attention_encodings_take_the_same_bound(make):
    make(pos_scale=1.0)
    with pytest.raises(ValueError, match=r"2\^66\].*overflow float32"):
        make(pos_scale=1e30)


def test_pointrope_bounds_its_base():
    """Radians per grid cell base^(-q/Q): 12 channels, Q = 2, e in [-1/2, 0]; base 2^-132 gives 2^66. PointROPE has
    no pos_scale, so the message names none (it showed a pos_scale=1.0 the caller never gave)."""
    PointRoPEQK(12, base=2.0 ** -132)
    with pytest.raises(ValueError) as err:
        PointRoPEQK(12, base=2.0 ** -134)
    assert str(err.value) == ("expected base whose phase per unit base^e lies in [2^-126, 2^66] for e in [-0.5, 0], "
                              f"got 1.476e+20 at e = -0.5 (base={2.0 ** -134!r}): positions up to 2^61 apart per "
                              "axis (the point ops' limit) would turn by phases that overflow float32 (NaN features); "
                              "base within [1.839e-40, 7.23e+75] fits")


@pytest.mark.parametrize("channels, kw, what, named", [
    (12, dict(base=1e-300, pos_scale=10.0), "frequency", "base"),   # w = 1e150: the frequency itself overflows
    (12, dict(base=1e300, pos_scale=1.0), "frequency", "base"),     # w = 1e-150: below float32's normal range
    (6, dict(base=2.0 ** -201, pos_scale=3.0), "phase", "base"),    # w = 2^67 fits, the phase per unit does not
    (3, dict(pos_scale=1e30), "phase", "pos_scale"),                # pos_scale / 3 alone is out: no base mends it
    (12, dict(base=1e4, pos_scale=1e-37), "phase", "base"),      # fits at e = 0, not at its last block
])
def test_the_message_names_what_is_out_of_range_and_the_values_that_fit(channels, kw, what, named):
    """The message said "its phases would overflow" where the frequency base^e itself was out of float32's range;
    it now names the quantity that is out (the frequency, or the phase per unit), and the range of the argument
    that mends it at the other's value: both ends of that range build, a value 1 % beyond either is refused."""
    with pytest.raises(ValueError) as err:
        GeoPE(channels, **kw)
    line = str(err.value)
    quantity = "frequency base^e lies in" if what == "frequency" else "phase per unit pos_scale * base^e"
    assert quantity in line and ("that frequency" in line) == (what == "frequency"), line
    found = re.search(rf"; {named} within \[(\S+), (\S+)\] fits at (base|pos_scale)=", line)
    assert found, line
    lo, hi = float(found[1]), float(found[2])
    for value in (lo, hi):
        GeoPE(channels, **{**kw, named: value})
    for value in (lo / 1.01, hi * 1.01):
        with pytest.raises(ValueError):
            GeoPE(channels, **{**kw, named: value})


@pytest.mark.parametrize("kw", [dict(base=1e-300, pos_scale=1e30), dict(base=1e300, pos_scale=1e-45)])
def test_a_base_no_pos_scale_fits_is_said_with_the_bases_that_fit(kw):
    """Where ``pos_scale / axes`` is out and the base's frequencies span more than float32's range of phases
    (``base^e`` beyond ``2^192`` either way), the message offered a range of pos_scale that was empty
    (``pos_scale within [3.53e-38, 2.211e-130]``). It now says no pos_scale fits that base, and gives the bases
    that fit at ``pos_scale = 1``: both ends build there, 1 % beyond either is refused."""
    with pytest.raises(ValueError) as err:
        GeoPE(12, **kw)
    line = str(err.value)
    assert f"; no pos_scale fits at base={kw['base']!r} (its frequencies span more than float32's range of " \
           "phases); base within [" in line and line.endswith("] fits at pos_scale=1.0"), line
    lo, hi = (float(v) for v in re.search(r"base within \[(\S+), (\S+)\] fits at pos_scale=1.0$", line).groups())
    for base in (lo, hi):
        GeoPE(12, base=base, pos_scale=1.0)
    for base in (lo / 1.01, hi * 1.01):
        with pytest.raises(ValueError):
            GeoPE(12, base=base, pos_scale=1.0)
