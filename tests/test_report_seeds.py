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
import warnings
from pathlib import Path

import numpy as np
import pytest

from pointgeope.constants import NUM_CLASSES
from pointgeope.report.fold_file import FoldResult
from pointgeope.report.runs import RunSummary
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
    for v, expected in zip(variants(), ([1.0, 0.9, 0.8], [0.8, 0.7, 0.6], [0.6, 0.5]), strict=True):
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
    assert [p.name for p in written] == ["ablation.md", "ablation.csv", "ablation.json"]     # the record last
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
    # the advice names what ablate's user can run (it said "pass --class-mean", which ablate does not accept)
    assert mixed.rstrip().endswith("test the trials of the other rule with `all` (`pointgeope evaluate "
                                   f"{Path('b') / 'area_1'} eval.class_mean=all`), then rerun this ablation with "
                                   "`eval.class_mean=all`.")
    assert "--class-mean" not in mixed
    two_present = ablation_markdown([Variant("A", [0], [authors]), Variant("B", [0, 1], [older, older])])
    assert f"with `present` (`pointgeope evaluate {Path('a') / 'area_1'} eval.class_mean=present`)" in two_present


def confusion_with(moves: dict[tuple[int, int], int], absent: tuple[int, ...]) -> np.ndarray:
    """10 points of every class predicted right, then ``moves[(gt, pred)]`` of class gt's points predicted as
    pred, and the ``absent`` classes' rows and columns emptied (in neither the ground truth nor a prediction)."""
    confusion = 10 * np.eye(NUM_CLASSES, dtype=np.int64)
    for (gt, pred), n in moves.items():
        confusion[gt, gt] -= n
        confusion[gt, pred] += n
    for c in absent:
        assert confusion[c].sum() == 10 and confusion[:, c].sum() == 10     # absent: nothing moved to or from c
        confusion[c, c] = 0
    return confusion


# Two seeds of one variant (classes: 0 ceiling, 1 floor, 2 wall, 3 beam, 10 bookcase, 11 board, 12 clutter),
# IoU_c = TP / (GT + PRED - TP) worked out by hand; the classes not named are 10/10 right, IoU 1:
#   seed 0: 5 floor -> wall, board and clutter absent
#           ceiling 10/10 = 1   floor 5/(10+5-5) = 1/2   wall 10/(10+15-10) = 2/3   beam 1   bookcase 1
#   seed 1: 5 ceiling -> floor, 2 wall -> beam, 4 clutter -> bookcase, board absent
#           ceiling 1/2   floor 10/15 = 2/3   wall 8/10 = 4/5   beam 10/12 = 5/6   bookcase 10/14 = 5/7
#           clutter 6/10 = 3/5
#   mean:   ceiling 3/4 -> 75.0   floor 7/12 -> 58.3   wall 11/15 -> 73.3   beam 11/12 -> 91.7
#           bookcase 6/7 -> 85.7  board absent in both -> "—"   clutter in seed 1 only -> 60.0
SEED_MOVES = [({(1, 2): 5}, (11, 12)), ({(0, 1): 5, (2, 3): 2, (12, 10): 4}, (11,))]
HAND_IOU = [[1, 1 / 2, 2 / 3, 1, 1, 1, 1, 1, 1, 1, 1, math.nan, math.nan],
            [1 / 2, 2 / 3, 4 / 5, 5 / 6, 1, 1, 1, 1, 1, 1, 5 / 7, math.nan, 3 / 5]]
CLASS_IOU_ROW = ("| P | 75.0 | 58.3 | 73.3 | 91.7 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 100.0 | 85.7 | — "
                 "| 60.0 |")


def test_the_per_class_iou_table_is_the_mean_over_seeds_of_each_class():
    """The "Per-class IoU, mean over seeds" row of a variant: per class, the mean of the seeds' IoU over the
    seeds where the class occurs ("—" where it occurs in none), against the hand-worked values above."""
    confusions = [confusion_with(moves, absent) for moves, absent in SEED_MOVES]
    for confusion, hand in zip(confusions, HAND_IOU, strict=True):           # the hand values are those of the matrices
        tp = np.diag(confusion).astype(float)
        union = confusion.sum(0) + confusion.sum(1) - tp
        np.testing.assert_allclose(np.divide(tp, union, out=np.full(NUM_CLASSES, np.nan), where=union > 0),
                                   hand, rtol=1e-12)
    runs = [RunSummary(f"P{s}", Path(f"P{s}"), [FoldResult("Area_1", 1, c, Path(f"P{s}") / "area_1")])
            for s, c in enumerate(confusions)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # board, in no seed, is "—" without a numpy warning
        md = ablation_markdown([Variant("P", [0, 1], runs)])
    table = md.split("Per-class IoU, mean over seeds:")[1]
    rows = [line for line in table.splitlines() if line.startswith("| P |")]
    assert rows == [CLASS_IOU_ROW]


def write_metrics(folder: Path, k: int, confusion: np.ndarray, **extra) -> None:
    """A complete ``folder/area_k/metrics.json`` as evaluate writes it (the keys the report reads)."""
    import json

    from pointgeope.constants import CLASS_NAMES

    (folder / f"area_{k}").mkdir(parents=True, exist_ok=True)
    (folder / f"area_{k}" / "metrics.json").write_text(json.dumps(
        {"area": f"Area_{k}", "fold": k, "class_names": list(CLASS_NAMES), "confusion": confusion.tolist(),
         "complete": True, **extra}))


def test_an_ablation_of_one_fold_scores_that_fold_alone(tmp_path):
    """A trial folder holding fold 1 and fold 2 (an ablation of each into one RUN): the report of fold 2
    scored Area_1 + Area_2 pooled under its "fold 2" header. OA by hand: fold 1 wrong(26) 0.8, fold 2
    wrong(0) 1.0 (seed 0) and wrong(13) 0.9 (seed 1); the folds' settings differ (train.epochs), which
    pooling both refused as "no trial completed"."""
    import json

    from pointgeope.report.seeds import write_trials

    for seed, m in ((0, 0), (1, 13)):
        write_metrics(tmp_path / f"seed_{seed}", 1, wrong(26), config={"train": {"epochs": 1}})
        write_metrics(tmp_path / f"seed_{seed}", 2, wrong(m), config={"train": {"epochs": 2}})
    trials = [("A", seed, tmp_path / f"seed_{seed}") for seed in (0, 1)]
    write_trials(trials, tmp_path / "report", fold=2)
    report = json.loads((tmp_path / "report" / "ablation.json").read_text())["variants"][0]
    assert report["folds"] == ["Area_2"] and [r["oa"] for r in report["runs"]] == [1.0, 0.9]
    write_trials(trials, tmp_path / "report1", fold=1)
    report = json.loads((tmp_path / "report1" / "ablation.json").read_text())["variants"][0]
    assert report["folds"] == ["Area_1"] and [r["oa"] for r in report["runs"]] == [0.8, 0.8]


def test_a_left_out_trial_is_missing_with_its_reason_and_none_left_is_said_as_it_is(tmp_path):
    """A failed or stale trial's saved result is not scored (a rerun reported the old result under the new
    header); with no trial left the message says why each was not reported (it said "no trial completed")."""
    import json

    from pointgeope.errors import UserError
    from pointgeope.report.seeds import write_trials

    for seed, m in ((0, 0), (1, 13)):
        write_metrics(tmp_path / f"seed_{seed}", 1, wrong(m))
    trials = [("A", seed, tmp_path / f"seed_{seed}") for seed in (0, 1)]
    write_trials(trials, tmp_path / "report", fold=1, left_out={("A", 0): "failed (exit code 2), see its train.log"})
    report = json.loads((tmp_path / "report" / "ablation.json").read_text())["variants"][0]
    assert report["seeds"] == [1] and report["oa"]["mean"] == 0.9
    assert report["missing"] == [{"seed": 0, "reason": "failed (exit code 2), see its train.log"}]
    ablation = (tmp_path / "report" / "ablation.md").read_text()
    assert "- A: seed 0 missing (failed (exit code 2), see its train.log)" in ablation
    with pytest.raises(UserError) as err:
        write_trials(trials, tmp_path / "report2", fold=1, left_out={("A", 0): "stale: x", ("A", 1): "stale: y"})
    assert str(err.value) == f"{tmp_path / 'report2'}: none of the 2 trials has a result of fold 1 to report " \
                             "(A seed 0: stale: x)"
    assert not (tmp_path / "report2").exists()


def test_a_trial_scored_with_a_note_says_it_in_the_report(tmp_path):
    """An ablation trial whose settings could not be checked (an older run's result records none) is scored,
    and the report says so (it was scored as if checked)."""
    import json

    from pointgeope.report.seeds import write_trials

    for seed, m in ((0, 0), (1, 13)):
        write_metrics(tmp_path / f"seed_{seed}", 1, wrong(m))
    trials = [("A", seed, tmp_path / f"seed_{seed}") for seed in (0, 1)]
    write_trials(trials, tmp_path / "report", fold=1, notes={("A", 1): "not checked: no config recorded"})
    report = json.loads((tmp_path / "report" / "ablation.json").read_text())["variants"][0]
    assert report["seeds"] == [0, 1] and report["oa"]["mean"] == pytest.approx(0.95)
    assert report["missing"] == [] and report["notes"] == [{"seed": 1, "note": "not checked: no config recorded"}]
    assert "- A: seed 1 not checked: no config recorded" in (tmp_path / "report" / "ablation.md").read_text()


def test_a_seed_of_several_folds_scores_its_pooled_confusion():
    """A run of two folds of different sizes (130 points all right; 260 points, OA 0.8) scores its pooled
    matrix, OA (130 + 208) / 390, as the report's standard number, not the mean of its folds' OA (0.9)."""
    two = RunSummary("two", Path("two"), [FoldResult("Area_1", 1, wrong(0), Path("two") / "area_1"),
                                          FoldResult("Area_2", 2, 2 * wrong(26), Path("two") / "area_2")])
    v = Variant("A", [0], [two])
    np.testing.assert_allclose(v.values("oa"), [338 / 390], rtol=1e-12)
    assert math.isclose(ablation_json([v])["variants"][0]["runs"][0]["oa"], 338 / 390, rel_tol=1e-12)


def test_scores_equal_but_for_the_smoothing_are_within_the_spread():
    """A run that predicts one class c everywhere scores mAcc = (1/13) GT_c / (GT_c + 1e-10) under the `all`
    rule: 1/13 but for the +1e-10, which differs with the class's count (2e-12 apart here). The table showed
    A's range (7.7–7.7) touching B's (6.8–7.7) and the difference without the `~` that touching ranges get."""
    counts = np.array([7, 3, 11] + [5] * (NUM_CLASSES - 3))

    def scored(name: str, columns: dict[int, np.ndarray]) -> RunSummary:
        confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), dtype=np.int64)
        for predicted, column in columns.items():
            confusion[:, predicted] = column
        fold = FoldResult("Area_1", 1, confusion, Path(name) / "area_1", class_mean="all")
        return RunSummary(name, Path(name), [fold], class_mean="all")

    a = Variant("A", [0], [scored("a", {0: counts})])
    b = Variant("B", [0, 1], [scored("b0", {1: counts}), scored("b1", {1: counts // 2, 2: counts - counts // 2})])
    (a_macc,), (b_top, b_low) = a.values("macc"), b.values("macc")
    assert 0 < a_macc - b_top < 1e-11 and b_low < 0.07               # equal but for the smoothing; B spreads
    diff = ablation_markdown([a, b]).split("Difference of the means to A")[1].split("Each seed")[0]
    b_row = next(line for line in diff.splitlines() if line.startswith("| B |"))
    assert b_row.split("|")[3].strip().endswith(" ~"), b_row           # mAcc's column


def test_the_json_written_last_records_the_set_and_the_trials_files(tmp_path):
    """The three files were written one after another with nothing tying them: a kill between the writes left
    new tables beside the previous JSON, and the JSON named neither the command nor the files scored. Now
    the JSON, written last, holds the header, each run's metrics.json with the sha256 of its bytes, and the
    sha256 of the other two files (checked here with hashlib on the bytes on disk)."""
    import hashlib
    import json

    from pointgeope.report.runs import load_run
    from tests.test_report import write_fold

    for seed in (0, 1):
        write_fold(tmp_path / f"A{seed}", 1, wrong(13 * seed))
    runs = [load_run(tmp_path / f"A{seed}", f"A{seed}", fold=1) for seed in (0, 1)]
    out = tmp_path / "report"
    write_ablation([Variant("A", [0, 1], runs)], out, header="# Ablation: A\n\nCommand: `x`\n\n")
    record = json.loads((out / "ablation.json").read_text())
    assert record["header"] == "# Ablation: A\n\nCommand: `x`\n\n"
    assert record["outputs"] == {name: "sha256:" + hashlib.sha256((out / name).read_bytes()).hexdigest()
                                 for name in ("ablation.md", "ablation.csv")}
    for seed, entry in enumerate(record["variants"][0]["runs"]):
        metrics = tmp_path / f"A{seed}" / "area_1" / "metrics.json"
        assert entry["metrics"] == [{"path": str(metrics),
                                     "sha256": "sha256:" + hashlib.sha256(metrics.read_bytes()).hexdigest()}]


def _tie_run(name: str, right: int) -> RunSummary:
    """One fold of 10000 points of class 0, ``right`` of them right (the rest predicted 1): OA and class 0's
    IoU are both right / 10000."""
    confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), dtype=np.int64)
    confusion[0, 0], confusion[0, 1] = right, 10000 - right
    return RunSummary(name, Path(name), [FoldResult("Area_1", 1, confusion, Path(name) / "area_1")])


def test_a_mean_over_seeds_on_a_tie_prints_rounded_half_up():
    """Seeds scoring 49.42 %, 74.74 % and 86.29 %: their mean is 70.15 % exactly (hand: 21045 / 3 / 100), a
    tie that the report's half-up rounding prints 70.2; the binary mean, 0.7014999999999999, printed 70.1.
    Both the mean ± std cell and the per-class IoU mean (class 0's IoU is the OA here) print 70.2."""
    seeds = Variant("T", [0, 1, 2], [_tie_run(f"T{i}", r) for i, r in enumerate((4942, 7474, 8629))])
    assert spread(seeds.values("oa"))["mean"] == 0.7015
    md = ablation_markdown([seeds])
    assert md.splitlines()[2].startswith("| T | 3 | 70.2 ± ")
    per_class = md.split("Per-class IoU, mean over seeds:")[1]
    assert next(line for line in per_class.splitlines() if line.startswith("| T |")).startswith("| T | 70.2 |")
    csv_row = next(r for r in csv.DictReader(io.StringIO(ablation_csv([seeds]))) if r["score"] == "oa")
    assert csv_row["mean_pct"] == "70.1500"


def test_a_std_over_seeds_on_a_tie_prints_rounded_half_up():
    """Seeds scoring 18.75 %, 20 % and 21.25 %: their sample std is 1.25 % exactly (hand: deviations -1.25, 0,
    1.25; (1.5625 + 0 + 1.5625) / 2 = 1.5625 = 1.25^2), a tie that the report's half-up rounding prints 1.3, as
    it prints the means; the binary std, 0.012499999999999997, printed 1.2."""
    seeds = Variant("T", [0, 1, 2], [_tie_run(f"T{i}", r) for i, r in enumerate((1875, 2000, 2125))])
    assert spread(seeds.values("oa"))["std"] == 0.0125
    assert ablation_markdown([seeds]).splitlines()[2].startswith("| T | 3 | 20.0 ± 1.3 (18.8–21.3) |")
    csv_row = next(r for r in csv.DictReader(io.StringIO(ablation_csv([seeds]))) if r["score"] == "oa")
    assert csv_row["std_pct"] == "1.2500"


def test_a_rewrite_removes_the_temporary_files_of_a_killed_ablate(tmp_path, capsys):
    """`kill -9` of ablate while it wrote its report left `.ablation.json.<8 characters>.tmp.json` in
    RUN/report/fold_K: every later ablate wrote the report beside it and kept it for good. Only that folder
    is cleared (ablate holds RUN's lock); a file of another name, and the folders below, are left alone."""
    out = tmp_path / "report"
    (out / "below").mkdir(parents=True)
    killed = [out / ".ablation.json.0a1b2c3d.tmp.json", out / ".ablation.md.9efd0e96.tmp.md"]
    kept = [out / ".notes.tmp", out / "below" / ".x.json.0a1b2c3d.tmp.json"]
    for path in killed + kept:
        path.write_text("half")
    written = write_ablation(variants(), out)
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(written + kept)
    assert capsys.readouterr().out.splitlines() == [f"removed {path}, left by an interrupted run" for path in killed]


def test_a_report_folder_with_a_lock_of_its_own_is_left_to_its_writer(tmp_path, capsys):
    """ablate writes RUN/report/fold_K under RUN's lock; a `report --out RUN/report/fold_K` holds that folder's
    own lock and may be writing its temporary files there now: ablate's clearing deleted them."""
    out = tmp_path / "report"
    out.mkdir()
    (out / ".lock").write_text("{}")
    theirs = out / ".report.md.0a1b2c3d.tmp.md"
    theirs.write_text("being written")
    write_ablation(variants(), out)
    assert theirs.read_text() == "being written" and "removed" not in capsys.readouterr().out
