"""pointgeope/json_text.py: every text json.loads refuses is a JSONDecodeError, so that a damaged record (an
integer of thousands of digits, arrays nested thousands deep) reads as damaged, in one line, not a traceback."""
from __future__ import annotations

import json
import sys

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.fold_result import complete_fold_metrics
from pointgeope.json_text import loads
from tests.test_report import perfect, write_fold

LONG = "7" * (sys.get_int_max_str_digits() + 1)
DEEP = "[" * 100_000 + "]" * 100_000


def test_a_text_it_reads_is_what_json_reads():
    text = '{"a": [1, 2.5, "x\\n"], "b": null, "c": ' + "9" * 50 + "}"
    assert loads(text) == json.loads(text) and loads(text.encode()) == json.loads(text)


def test_an_integer_too_long_to_convert_is_a_decode_error_at_its_line_and_column():
    with pytest.raises(json.JSONDecodeError) as err:
        loads('{"a": 1,\n  "b": ' + LONG + "}")
    assert (err.value.lineno, err.value.colno) == (2, 8)
    assert f"more than {sys.get_int_max_str_digits()} digits" in err.value.msg


def test_nesting_deeper_than_the_interpreter_allows_is_a_decode_error():
    with pytest.raises(json.JSONDecodeError, match="nested too deep"):
        loads(DEEP)


def test_bytes_not_utf8_stay_a_unicode_error():
    with pytest.raises(UnicodeDecodeError):
        loads(b'{"a": "\xff"}')


def _damage(run, k, raw):
    path = run / f"area_{k}" / "metrics.json"
    path.write_text(path.read_text()[:-1] + f', "trained_epochs": {raw}}}')
    return path


@pytest.mark.parametrize("raw", [LONG, DEEP], ids=["long-integer", "deep-nesting"])
def test_report_says_a_metrics_file_damaged_so_in_one_line(tmp_path, capsys, raw):
    run = tmp_path / "run"
    for k in range(1, 7):
        write_fold(run, k, perfect())
    path = _damage(run, 3, raw)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pointgeope report: error: {path}:1: not valid JSON (") and err.count("\n") == 1


@pytest.mark.parametrize("raw", [LONG, DEEP], ids=["long-integer", "deep-nesting"])
def test_a_fold_whose_metrics_file_is_damaged_so_is_tested_again(tmp_path, raw):
    write_fold(tmp_path, 1, perfect())
    _damage(tmp_path, 1, raw)
    assert complete_fold_metrics(tmp_path / "area_1") is None


def test_a_manifest_nested_too_deep_is_read_as_no_manifest(tmp_path):
    """prepare's reading of an earlier manifest.json: a damaged one is none (the areas checked again), not a
    RecursionError out of json.loads."""
    from data_prep.prepare import _read_manifest

    (tmp_path / "manifest.json").write_text(DEEP)
    assert _read_manifest(tmp_path) == {}


def test_a_report_record_nested_too_deep_lists_no_earlier_outputs(tmp_path):
    """report's reading of its earlier report.json (which outputs to trust, which to remove): a damaged one names
    none, as an unreadable one does, not a RecursionError."""
    from pointgeope.report import RECORD, stale_outputs

    (tmp_path / RECORD).write_text(DEEP)
    assert stale_outputs(tmp_path, {}) == []
