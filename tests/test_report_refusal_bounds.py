"""report's refusals of a damaged metrics.json say the value they got bounded (recorded_text.bounded): a class name,
a count, a class_mean or a key of a megabyte made a refusal line a megabyte long."""
from __future__ import annotations

import json

import pytest

from pointgeope.cli import main as cli
from pointgeope.recorded_text import SETTING_LIMIT, bounded
from tests.test_report import perfect, write_fold

HUGE = "y" * 100_000


def test_bounded_keeps_a_short_text_and_cuts_a_long_one_naming_its_length():
    assert bounded("x" * SETTING_LIMIT) == "x" * SETTING_LIMIT
    assert bounded("abcdefghij", limit=8) == "abcde... (10 characters)"
    assert bounded(repr(HUGE)) == "'" + "y" * (SETTING_LIMIT - 4) + "... (100,002 characters)"


@pytest.mark.parametrize("key, edit, said", [
    ("class_names", lambda m: m["class_names"].__setitem__(3, HUGE), "(those of"),
    ("class_names", lambda m: m["class_names"].extend([1] * 99_999), "expected class_names a list"),
    ("confusion", lambda m: m["confusion"][2].__setitem__(5, HUGE), "got \"yyy"),
    ("class_mean", lambda m: m.__setitem__("class_mean", HUGE), "expected 'class_mean' in"),
    ("complete", lambda m: m.__setitem__("complete", HUGE), "expected 'complete' true or false"),
    ("fold", lambda m: m.__setitem__("fold", HUGE), "expected 'fold' a fold number"),
    ("keys", lambda m: (m.pop("confusion"), m.__setitem__(HUGE, 1)), "expected a 'confusion' matrix"),
])
def test_a_refusal_of_a_huge_value_is_one_bounded_line(tmp_path, capsys, key, edit, said):
    run = tmp_path / "run"
    for k in range(1, 7):
        write_fold(run, k, perfect())
    path = run / "area_2" / "metrics.json"
    metrics = json.loads(path.read_text())
    edit(metrics)
    path.write_text(json.dumps(metrics))
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert said in err and "characters)" in err
    assert err.count("\n") == 1 and len(err) < 2 * SETTING_LIMIT + len(str(path)) + 500
