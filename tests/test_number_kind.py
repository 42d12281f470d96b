"""pointgeope/number_kind.py: a number, and a whole number, as a record or a config holds one; a bool is neither."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pointgeope.number_kind import is_number, is_whole


@pytest.mark.parametrize("value, number, whole", [
    (0, True, True), (-3, True, True), (2**70, True, True), (0.5, True, False), (3.0, True, False),
    (math.nan, True, False), (-math.inf, True, False), (np.float64(0.25), True, False),
    (True, False, False), (False, False, False), (np.bool_(True), False, False),
    ("1", False, False), (None, False, False), ([1], False, False), (1j, False, False),
])
def test_a_bool_is_no_number_and_a_float_no_whole_number(value, number, whole):
    assert is_number(value) is number and is_whole(value) is whole


def test_the_checks_of_records_and_configs_ask_the_one_predicate():
    """The readers that refused a bool each in their own words now agree: a true where a count or a number was."""
    from pointgeope.data.normal_record import earlier_of
    from pointgeope.engine.config_check import ConfigError, _coerce
    from pointgeope.engine.epoch_meter import sums_problem
    from pointgeope.engine.machine_record import saved_trained_on

    assert _coerce(2, int, "k") == 2 and _coerce(2, float, "k") == 2.0
    for tp in (int, float):
        with pytest.raises(ConfigError, match="got True"):
            _coerce(True, tp, "k")
    sound = {"totals": [1.5, 2, 30], "confusion": [[1, 0], [0, 1]], "seconds": 0.5}
    assert sums_problem(sound, 2) is None and sums_problem({**sound, "seconds": True}, 2) is not None
    assert saved_trained_on({"threads": 4}) == [{"threads": 4}] and saved_trained_on({"threads": True}) == []
    record = {"data_normals": {}, "until": {"epoch": 1, "batch": 0, "step": 4}}
    assert earlier_of({"data_normals_earlier": [record, {**record, "until": {"epoch": True, "batch": 0, "step": 4}}]}
                      ) == [record]


@pytest.mark.parametrize("value, integer, real", [
    (3, True, True), (np.int64(-2), True, True), (np.uint8(7), True, True), (2**70, True, True),
    (0.5, False, True), (np.float32(2), False, True), (math.nan, False, True),
    (True, False, False), (np.bool_(True), False, False), ("1", False, False), (None, False, False),
    (1j, False, False), (np.complex64(1), False, False), (np.array([1]), False, False),
])
def test_a_numpy_number_is_an_integer_or_a_real_scalar_and_a_numpy_bool_neither(value, integer, real):
    from pointgeope.number_kind import is_integer, is_real_scalar

    assert is_integer(value) is integer and is_real_scalar(value) is real


def test_a_tensor_is_a_real_scalar_where_it_is_one_real_number():
    import torch

    from pointgeope.number_kind import is_real_scalar

    assert is_real_scalar(torch.tensor(2.0)) and is_real_scalar(torch.tensor(3))
    for value in (torch.tensor(True), torch.tensor(1 + 1j), torch.tensor([2.0]), torch.zeros(2, 2)):
        assert not is_real_scalar(value)


@pytest.mark.parametrize("bool_", [np.bool_(True), "tensor"])
def test_a_numpy_or_torch_bool_is_no_scale(bool_):
    """GeoPE's scale check refused ``True`` but took NumPy's ``True`` and ``torch.tensor(True)`` for 1.0 (a grid
    size, a base or a position scale of 1 without a word); it refuses all three now."""
    import torch

    from pointgeope.geope_checks import check_scale

    value = torch.tensor(True) if bool_ == "tensor" else bool_
    with pytest.raises(TypeError, match=r"^expected grid_size a finite number > 0, got "):
        check_scale("grid_size", value)
    assert check_scale("grid_size", np.float32(0.5)) == 0.5 and check_scale("grid_size", torch.tensor(2)) == 2.0


def test_an_integer_past_floats_range_is_no_scale():
    """``GeoPE(pos_scale=10**400)`` (or a base, a grid size) ended in ``OverflowError: int too large to convert to
    float``; it is the scale check's ``ValueError`` naming the argument, as an infinite scale is."""
    from pointgeope.geope_checks import check_scale

    for value in (10 ** 400, -(10 ** 400)):
        with pytest.raises(ValueError, match=r"^expected pos_scale a finite number > 0, got -?10{400}, beyond float's"):
            check_scale("pos_scale", value)


def test_an_integer_tensor_is_one_of_an_integer_dtype_not_bool():
    import torch

    from pointgeope.number_kind import is_integer_tensor

    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        assert is_integer_tensor(torch.zeros(2, dtype=dtype)) and is_integer_tensor(torch.tensor(3, dtype=dtype))
    for value in (torch.tensor([True]), torch.zeros(2), torch.zeros(2, dtype=torch.float16), torch.tensor([1j]),
                  [1, 2], np.array([1, 2]), 3):
        assert not is_integer_tensor(value)
