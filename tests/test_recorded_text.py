"""pointgeope/recorded_text.py: a value read back from a record, said on one bounded line whatever it holds."""
from __future__ import annotations

import pytest

from pointgeope.recorded_text import DAMAGED, LIMIT, damaged_text, recorded_text, repr_bounded


@pytest.mark.parametrize("value, kind", [("bf16", str), ("2.13.0+cu126", str), ("NVIDIA GeForce RTX 4090", str),
                                         ("Ünïcode GPU", str), ("x" * LIMIT, str), (16, int), (0, int)])
def test_a_sound_value_is_said_as_it_is(value, kind):
    assert recorded_text(value, kind) == str(value)


@pytest.mark.parametrize("value, kind, said", [
    ("2.13.0\n- x", str, r"'2.13.0\n- x'"), ("a\tb", str, r"'a\tb'"), ("\udcff", str, r"'\udcff'"),
    ("", str, "''"), ("   ", str, "'   '"), ("x" * (LIMIT + 1), str, "'" + "x" * (LIMIT - 4) + "... (67 characters)"),
    ([1, 2], int, "[1, 2]"),
    (True, int, "True"), (2.0, int, "2.0"), ("2", int, "'2'"), (7, str, "7"), ({"n": "\n"}, str, r"{'n': '\n'}"),
])
def test_a_damaged_value_is_one_bounded_line_marked(value, kind, said):
    text = recorded_text(value, kind)
    assert text == said + DAMAGED
    mark = f" ({len(repr(value)):,} characters)" if len(repr(value)) > LIMIT else ""
    assert text.isprintable() and len(text) <= LIMIT + len(mark) + len(DAMAGED)


def test_a_huge_value_is_cut():
    text = recorded_text("\n" * 10**6)
    assert text == "'" + "\\n" * 30 + "... (2,000,002 characters)" + DAMAGED


def test_a_damaged_value_is_said_whatever_its_type():
    assert damaged_text([1, 2]) == "[1, 2]" + DAMAGED and damaged_text("a\nb") == r"'a\nb'" + DAMAGED


@pytest.mark.parametrize("value, text, shown", [("rpe", "rpe", "'rpe'"), ([1.0, 1.1], "[1.0, 1.1]", "[1.0, 1.1]"),
                                                (None, "null", "None"), (4, "4", "4"),
                                                ("/data/" + "d" * 490, "/data/" + "d" * 490, None)])
def test_a_sound_setting_is_said_as_an_override_or_repr_writes_it(value, text, shown):
    from pointgeope.recorded_text import setting_repr, setting_text

    assert setting_text(value) == text and setting_repr(value) == (shown or repr(value))


@pytest.mark.parametrize("value", ["rpe\n- injected", "x" * 501, {"k": "x" * 500}])
def test_a_damaged_setting_is_one_bounded_line_marked_in_both_forms(value):
    from pointgeope.recorded_text import setting_repr, setting_text

    assert setting_text(value) == setting_repr(value) == damaged_text(value)
    mark = f" ({len(repr(value)):,} characters)" if len(repr(value)) > LIMIT else ""
    assert setting_text(value).endswith(mark + DAMAGED) and len(setting_text(value)) <= LIMIT + len(mark + DAMAGED)


@pytest.mark.parametrize("value, limit, said", [
    ("abc", 40, "'abc'"), ([1, 2], 6, "[1, 2]"), ("x" * 38, 40, "'" + "x" * 38 + "'"),
    ("x" * 39, 40, "'" + "x" * 36 + "... (41 characters)"),
    (list(range(10_000)), 12, "[0, 1, 2,... (58,890 characters)"),
])
def test_a_value_a_message_cuts_is_marked_with_its_length_and_a_short_one_is_whole(value, limit, said):
    """repr_bounded, the cut of every refusal's value (``got {repr_bounded(value, 40)}``): a value that fits is
    whole, one that does not ends in ``...`` and its length, so that no reader takes the part for the whole.
    Before, a format spec ``{value!r:.40}`` cut it silently."""
    assert repr_bounded(value, limit) == said


def test_a_value_whose_repr_breaks_lines_is_said_on_one_line():
    """An array's or a tensor's repr breaks between rows and indents the next (numpy, torch): a checkpoint entry or
    an HDF5 attribute edited into one made a refusal of two lines. Each break, with its indent, is one space; a
    string's repr escapes its breaks and is said as it is."""
    import numpy as np

    assert repr_bounded(np.array([[1, 2], [3, 4]])) == "array([[1, 2], [3, 4]])"
    assert repr_bounded(np.zeros((3, 3)), 30) == "array([[0., 0., 0.], [0., 0... (49 characters)"
    assert damaged_text(np.eye(2, dtype=np.int8)) == "array([[1, 0], [0, 1]], dtype=int8)" + DAMAGED
    assert repr_bounded("a\n   b  c") == "'a\\n   b  c'"
