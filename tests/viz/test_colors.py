"""Tests of pointgeope/viz/colors.py: colours by mode from the one project palette."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.constants import IGNORE_LABEL, NUM_CLASSES, PALETTE
from pointgeope.viz.colors import CORRECT_COLOR, IGNORE_COLOR, MODES, WRONG_COLOR, colorize, error_colors, label_colors


def test_label_colors_are_the_palette():
    labels = np.array([*range(NUM_CLASSES), IGNORE_LABEL], dtype=np.uint8)
    out = label_colors(labels)
    assert out.dtype == np.uint8 and out.shape == (NUM_CLASSES + 1, 3)
    for c in range(NUM_CLASSES):
        assert tuple(out[c]) == PALETTE[c]
    assert tuple(out[-1]) == IGNORE_COLOR


def test_error_and_marker_colours_are_distinct_from_the_palette():
    for color in (CORRECT_COLOR, WRONG_COLOR):
        assert color not in PALETTE
    assert len(set(PALETTE)) == NUM_CLASSES


def test_error_colors():
    label = np.array([0, 1, 2, IGNORE_LABEL, 12], dtype=np.uint8)
    pred = np.array([0, 2, 2, 5, 11], dtype=np.uint8)
    out = error_colors(label, pred)
    assert [tuple(c) for c in out] == [CORRECT_COLOR, WRONG_COLOR, CORRECT_COLOR, IGNORE_COLOR, WRONG_COLOR]


def test_colorize_every_mode():
    rng = np.random.default_rng(0)
    color = rng.integers(0, 256, (50, 3), dtype=np.uint8)
    label = rng.integers(0, NUM_CLASSES, 50).astype(np.uint8)
    pred = rng.integers(0, NUM_CLASSES, 50).astype(np.uint8)
    np.testing.assert_array_equal(colorize("rgb", color, label, pred), color)
    np.testing.assert_array_equal(colorize("gt", color, label, pred), np.array(PALETTE, np.uint8)[label])
    np.testing.assert_array_equal(colorize("pred", color, label, pred), np.array(PALETTE, np.uint8)[pred])
    expected = np.where((label == pred)[:, None], CORRECT_COLOR, WRONG_COLOR)
    np.testing.assert_array_equal(colorize("error", color, label, pred), expected)
    out = colorize("rgb", color, label)
    out[:] = 0
    assert color.any(), "colorize must return a new array, not a view of its input"
    assert MODES == ("rgb", "gt", "pred", "error")


def test_colorize_bad_input():
    label = np.zeros(3, np.uint8)
    with pytest.raises(ValueError, match="mode 'pred' needs predictions"):
        colorize("pred", np.zeros((3, 3), np.uint8), label)
    with pytest.raises(ValueError, match="expected a mode in"):
        colorize("depth", np.zeros((3, 3), np.uint8), label)
    with pytest.raises(ValueError, match=r"expected label and pred of one shape"):
        error_colors(label, np.zeros(4, np.uint8))


@pytest.mark.parametrize("labelled, has_pred, missing", [
    (True, True, {}),
    (True, False, {"pred": "needs --pred", "error": "needs --pred"}),
    (False, True, {"gt": "this room has no ground truth", "error": "this room has no ground truth"}),
    (False, False, {"gt": "this room has no ground truth", "pred": "needs --pred",
                    "error": "this room has no ground truth"}),
])
def test_missing_modes_are_those_whose_colours_need_what_the_room_lacks(labelled, has_pred, missing):
    from pointgeope.viz.colors import has_ground_truth, missing_modes

    assert missing_modes(labelled, has_pred) == missing
    label = np.array([IGNORE_LABEL, 3] if labelled else [IGNORE_LABEL, IGNORE_LABEL], np.uint8)
    assert has_ground_truth(label) is labelled
