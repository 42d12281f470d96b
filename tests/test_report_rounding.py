"""`pointgeope report`'s rounding: percentages, differences and the confusion figure round ties half up, as by
hand, alike in the tables, the CSV and an ablation's means."""
from __future__ import annotations

import json

import numpy as np

from pointgeope.cli import main as cli
from tests.test_report import write_fold


def _half_up(fraction, digits: int) -> str:
    """``fraction`` (a Fraction) in %, rounded half up at ``digits`` decimals, by integer arithmetic."""
    from fractions import Fraction

    scaled = abs(fraction) * 100 * 10 ** digits
    units = int(scaled + Fraction(1, 2))           # floor(x + 1/2): a tie goes up
    text = f"{units // 10 ** digits}" + (f".{units % 10 ** digits:0{digits}d}" if digits else "")
    return ("-" if fraction < 0 and units else "") + text


def test_percentages_round_ties_half_up_as_by_hand():
    """A ratio of counts that is a tie at the shown decimals (23/80 = 28.75 %) was rounded from the binary
    product 100 * 0.2875 = 28.749999999999996: 28.7, while 49/80 = 61.25 % gave 61.3. Every tie of a ratio
    num/den (den <= 400) at 0, 1 and 4 decimals now reads as the exact ratio rounded half up."""
    from fractions import Fraction

    from pointgeope.report.tables import pct

    for digits in (0, 1, 4):
        for den in range(1, 401):
            for num in range(den + 1):
                exact = Fraction(num, den)
                if (exact * 100 * 10 ** digits).denominator == 2:     # a tie
                    assert pct(num / den, digits) == _half_up(exact, digits), (num, den, digits)
                    assert pct(-num / den, digits, signed=True) == "-" + _half_up(exact, digits)
    assert pct(23 / 80, 1) == "28.8" and pct(49 / 80, 1) == "61.3" and pct(1 / 16, 1) == "6.3"


def test_the_tables_and_the_csv_round_a_tie_alike(tmp_path):
    import csv

    import numpy as np


    m = 10 * np.eye(13, dtype=np.int64)
    m[0, 0], m[0, 1] = 23, 57                         # ceiling: TP 23, union 80 + 23 - 23 = 80 in every fold
    run = tmp_path / "run"
    for k in range(1, 7):
        write_fold(run, k, m)
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out), "--digits", "1"]) == 0
    row = [c.strip() for c in (out / "report.md").read_text().split("| run |", 1)[1].splitlines()[2].split("|")]
    assert row[6] == "28.8", row                      # ceiling's pooled IoU 138/480 = 23/80 = 28.75 %, a tie
    rows = list(csv.DictReader((out / "report.csv").open()))
    assert rows[0]["iou_pct_ceiling"] == "28.7500"


def _tie_runs(tmp_path):
    """Two runs whose ceiling IoU is 23/80 = 28.75 % and 1/4 = 25 % in every fold: a difference of 3.75 points."""
    from tests.test_report import write_fold as write

    runs = []
    for name, right in (("a", 20), ("b", 23)):
        m = 10 * np.eye(13, dtype=np.int64)
        m[0, 0], m[0, 1] = right, 80 - right          # ceiling: TP right, union 80
        for k in range(1, 7):
            write(tmp_path / name, k, m)
        runs.append(tmp_path / name)
    return runs


def test_a_difference_that_is_a_tie_rounds_half_up_as_its_scores_do(tmp_path):
    """28.75 - 25.00 = 3.75 points, a tie, read +3.7: the binary 0.2875 - 0.25 = 0.03749999999999998 was rounded,
    where each score is rounded from its decimal value (28.8, 25.0)."""
    import csv

    a, b = _tie_runs(tmp_path)
    out = tmp_path / "out"
    assert cli(["report", str(a), str(b), "--out", str(out)]) == 0
    pooled = (out / "report.md").read_text().split("| run |", 1)[1].split("\n\n", 1)[0]
    ceiling = {row.split("|")[1].strip(): row.split("|")[6].strip() for row in pooled.splitlines()[2:]}
    assert ceiling == {"a": "25.0", "b": "28.8", "b - a": "+3.8"}, pooled
    rows = {r["table"]: r for r in csv.DictReader((out / "report.csv").open()) if r["run"] == "b - a"}
    assert rows["difference_pooled"]["iou_pct_ceiling"] == "3.7500"
    difference = json.loads((out / "report.json").read_text())["differences"][0]["pooled"]["iou"][0]
    assert difference == 0.0375


def test_an_ablations_difference_of_means_that_is_a_tie_rounds_half_up():
    from pathlib import Path

    from pointgeope.report.fold_file import FoldResult
    from pointgeope.report.runs import RunSummary
    from pointgeope.report.seeds import Variant, ablation_markdown

    def variant(name, right):                                 # 80 points of class 0, ``right`` of them right
        m = np.zeros((13, 13), dtype=np.int64)
        m[0, 0], m[0, 1] = right, 80 - right
        return Variant(name, [0], [RunSummary(name, Path(name), [FoldResult("Area_1", 1, m, Path(name))])])

    md = ablation_markdown([variant("a", 20), variant("b", 23)])   # OA 25 % and 28.75 %: 3.75 points apart
    row = md.split("Difference of the means", 1)[1].split("\n| b |", 1)[1].splitlines()[0]
    assert row.split("|")[1].strip() == "+3.8", row


def test_the_confusion_figure_rounds_its_shares_as_the_tables(monkeypatch, tmp_path):
    """The heatmap's cells were f"{100 * share:.1f}": 23/80 of a class read 28.7 where the tables read 28.8."""
    from pointgeope.report import plots
    from pointgeope.report.runs import load_run

    figures = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or b"")
    plots.confusion_heatmap(load_run(_tie_runs(tmp_path)[1]))
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in figures[0].axes[0].texts}
    assert texts[0, 0] == "28.8" and texts[0, 1] == "71.3" and texts[1, 1] == "100" and (1, 0) not in texts, texts
