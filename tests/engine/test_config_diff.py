"""Tests of pointgeope/engine/config_diff.py: how the differences of a saved config from the current one are said
(which keys differ: tests/engine/test_free_keys.py, test_config_choices.py and test_record_keys.py)."""
from __future__ import annotations

from pointgeope.engine.config_diff import describe_differences


def test_differences_past_the_eighth_are_counted():
    """A checkpoint refused for a config of more than 8 differences says the first 8 and how many more (before:
    the first 8 alone, as if they were all: fixed, the next run was refused for the ones not said)."""
    said = [f"train.k{i}: checkpoint {i}, now {i + 1}" for i in range(8)]
    for n, more in ((8, ""), (9, "; and 1 more"), (12, "; and 4 more")):
        diff = [(f"train.k{i}", i, i + 1) for i in range(n)]
        assert describe_differences(diff, "checkpoint") == "; ".join(said) + more
