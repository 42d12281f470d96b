"""Tests of pointgeope/report/seeds.py: variants x seeds with known scores, their mean and spread.

One fold per run, 13 classes of 10 points each (130 points); ``wrong(m)`` predicts ``m`` points of class 0
as another class, so OA = (130 - m) / 130:

    A: m = 0, 13, 26   -> OA 1.0, 0.9, 0.8   mean 0.9, std 0.1, range [0.8, 1.0]
    B: m = 26, 39, 52  -> OA 0.8, 0.7, 0.6   mean 0.7, std 0.1, range [0.6, 0.8]: touches A's -> within
    C: m = 52, 65      -> OA 0.6, 0.5        mean 0.55, std 0.0707, range [0.5, 0.6]: apart from A's
       (seed 2 missing)
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest

from pointgeope.constants import NUM_CLASSES
from pointgeope.report.runs import FoldResult, RunSummary
from pointgeope.report.seeds import Variant, ablation_csv, ablation_json, ablation_markdown, spread, write_ablation


def wrong(m: int) -> np.ndarray:
    """Every class right (10 points each) except ``m`` points, moved from class c to c + 1 ten at a time
    for c = 0, 1, 2, ..."""
    confusion = 10 * np.eye(NUM_CLASSES, dtype=np.int64)
    for c in range(NUM_CLASSES - 1):
        moved = min(m, 10)
        confusion[c, c] -= moved
        confusion[c, c + 1] += moved
        m -= moved
    assert m == 0
    return confusion


def run(name: str, m: int) -> RunSummary:
    return RunSummary(name, Path(name), [FoldResult("Area_1", 1, wrong(m), Path(name) / "area_1")])


def variants() -> list[Variant]:
    a = Variant("A", [0, 1, 2], [run("A0", 0), run("A1", 13), run("A2", 26)])
    b = Variant("B", [0, 1, 2], [run("B0", 26), run("B1", 39), run("B2", 52)])
    c = Variant("C", [0, 1], [run("C0", 52), run("C1", 65)], missing=[(2, "no area_1/ folder")])
    return [a, b, c]


def test_spread_is_mean_sample_std_and_range():
    s = spread(np.array([1.0, 0.9, 0.8]))
    assert s["n"] == 3 and s["min"] == 0.8 and s["max"] == 1.0
    assert math.isclose(s["mean"], 0.9) and math.isclose(s["std"], 0.1)
    one = spread(np.array([0.5]))
    assert one["mean"] == 0.5 and math.isnan(one["std"])
    for v, expected in zip(variants(), ([1.0, 0.9, 0.8], [0.8, 0.7, 0.6], [0.6, 0.5])):
        np.testing.assert_allclose(v.values("oa"), expected)


def test_markdown_gives_mean_std_range_and_marks_differences_within_the_spread():
    md = ablation_markdown(variants())
    assert "| A | 3 | 90.0 ± 10.0 (80.0–100.0) |" in md
    assert "| C | 2 | 55.0 ± 7.1 (50.0–60.0) |" in md
    diff = md.split("Difference of the means to A")[1].split("Each seed")[0]
    b_row = next(line for line in diff.splitlines() if line.startswith("| B |"))
    c_row = next(line for line in diff.splitlines() if line.startswith("| C |"))
    assert b_row.split("|")[2].strip() == "-20.0 ~"           # ranges [0.6, 0.8] and [0.8, 1.0] touch
    assert c_row.split("|")[2].strip() == "-35.0"             # [0.5, 0.6] is apart from [0.8, 1.0]
    assert "| C | 60.0 / " in md and "| missing |" in md      # each seed; C has no seed 2
    assert "- C: seed 2 missing (no area_1/ folder)" in md


def test_json_and_csv_hold_the_same_numbers():
    report = ablation_json(variants())
    c = report["variants"][2]
    assert c["seeds"] == [0, 1] and c["missing"] == [{"seed": 2, "reason": "no area_1/ folder"}]
    assert c["folds"] == ["Area_1"] and [r["seed"] for r in c["runs"]] == [0, 1]
    assert math.isclose(c["oa"]["mean"], 0.55) and math.isclose(c["oa"]["std"], math.sqrt(0.005))
    rows = list(csv.DictReader(io.StringIO(ablation_csv(variants()))))
    assert len(rows) == 3 * 3
    a_oa = next(r for r in rows if r["variant"] == "A" and r["score"] == "oa")
    assert (a_oa["seeds"], a_oa["mean_pct"], a_oa["std_pct"], a_oa["min_pct"], a_oa["max_pct"]) == \
        ("3", "90.0000", "10.0000", "80.0000", "100.0000")


def test_write_ablation_puts_the_header_first(tmp_path):
    written = write_ablation(variants(), tmp_path / "report", header="# My ablation\n\n")
    assert [p.name for p in written] == ["ablation.md", "ablation.json", "ablation.csv"]
    assert (tmp_path / "report" / "ablation.md").read_text().startswith("# My ablation\n\n| variant |")


@pytest.mark.parametrize("m", [0, 13, 26, 39, 52, 65])
def test_the_fixture_confusions_have_the_stated_accuracy(m):
    confusion = wrong(m)
    assert confusion.sum() == 130 and (confusion >= 0).all()
    assert math.isclose(np.trace(confusion) / 130, (130 - m) / 130)


def test_the_ablation_says_which_rule_its_class_means_use():
    """One rule: said once below the tables; runs of both rules: each named in the notes, flagged."""
    authors = RunSummary("a", Path("a"), [FoldResult("Area_1", 1, wrong(13), Path("a") / "area_1", "all")],
                         class_mean="all")
    older = RunSummary("b", Path("b"), [FoldResult("Area_1", 1, wrong(13), Path("b") / "area_1")])
    alike = ablation_markdown([Variant("A", [0], [authors])])
    assert "Class means (`eval.class_mean: all`): mAcc and mIoU average all classes" in alike
    mixed = ablation_markdown([Variant("A", [0], [authors]), Variant("B", [0], [older])])
    assert "- b: `eval.class_mean: present`" in mixed and "different rules" in mixed
