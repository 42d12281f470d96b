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
