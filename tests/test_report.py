"""Tests of pointgeope/report/: a fake 6-fold run whose pooled and mean-of-folds numbers are known exactly.

Two kinds of fold, each class alike (13 classes):

* perfect ``P``: 10 points per class, all right        -> OA 1,   acc 1,   IoU 1
* half    ``H``: 20 points per class, 10 right, 10 predicted as the next class (c + 1 mod 13)
                                                        -> OA 1/2, acc 1/2, IoU 10 / (20 + 20 - 10) = 1/3

run ``rpe``  : Area_1..3 = P, Area_4..6 = H (all six folds)
    pooled: per class TP 3*10 + 3*10 = 60, GT = PRED = 30 + 60 = 90, union 120
            -> OA 60/90 = 2/3, mAcc 2/3, IoU = mIoU 60/120 = 1/2
    mean of folds: OA (1 + 1/2)/2 = 3/4, mAcc 3/4, mIoU (1 + 1/3)/2 = 2/3
run ``geope``: Area_1, 2, 4 = P, Area_5 = H, Area_3 without metrics.json, Area_6 incomplete
    pooled over 4 folds: TP 30 + 10 = 40, GT = PRED = 30 + 20 = 50, union 60
            -> OA 4/5, mAcc 4/5, mIoU 2/3
    mean of folds: OA (3 + 1/2)/4 = 7/8, mAcc 7/8, mIoU (3 + 1/3)/4 = 5/6
differences geope - rpe: pooled OA +2/15 (+13.3), mIoU +1/6 (+16.7); mean OA +1/8 (+12.5), mIoU +1/6
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from pointgeope import cli
from pointgeope.constants import CLASS_NAMES, NUM_CLASSES
from pointgeope.report import default_out, write_report
from pointgeope.report.fold_file import ReportError
from pointgeope.report.runs import load_run, load_runs
from pointgeope.report.tables import summary_markdown

C = NUM_CLASSES


def perfect() -> np.ndarray:
    return 10 * np.eye(C, dtype=np.int64)


def half() -> np.ndarray:
    m = np.zeros((C, C), dtype=np.int64)
    for c in range(C):
        m[c, c] = 10
        m[c, (c + 1) % C] = 10
    return m


def write_fold(run: Path, k: int, confusion: np.ndarray, complete: bool = True, class_mean: str | None = None) -> None:
    d = run / f"area_{k}"
    d.mkdir(parents=True, exist_ok=True)
    s = {"area": f"Area_{k}", "fold": k, "class_names": list(CLASS_NAMES), "confusion": confusion.tolist(),
         "oa": -1.0, "num_points": int(confusion.sum()), "complete": complete}  # stored oa is not trusted
    if class_mean is not None:
        s["class_mean"] = class_mean
    (d / "metrics.json").write_text(json.dumps(s))


def make_runs(root: Path) -> tuple[Path, Path]:
    rpe, geope = root / "rpe", root / "geope"
    for k in range(1, 7):
        write_fold(rpe, k, perfect() if k <= 3 else half())
    for k in (1, 2, 4):
        write_fold(geope, k, perfect())
    write_fold(geope, 5, half())
    write_fold(geope, 6, half(), complete=False)
    (geope / "area_3").mkdir()  # folder without metrics.json
    return rpe, geope


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Run ``pointgeope report rpe geope --out OUT`` once through the CLI; the tests read its outputs."""
    root = tmp_path_factory.mktemp("runs")
    rpe, geope = make_runs(root)
    out = root / "out"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["report", str(rpe), str(geope), "--out", str(out)])
    return {"rc": rc, "stdout": buf.getvalue(), "out": out, "rpe": rpe, "geope": geope}


def table_row(markdown: str, title: str, first_cell: str) -> list[str]:
    """Cells of the row starting with ``first_cell`` in the table under the bold ``title``."""
    section = markdown.split(title, 1)[1].split("\n\n**", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} under {title!r}")


POOLED = "pooled over the test areas"
MEAN = "mean of the per-fold scores"


def test_cli_exit_code_stdout_and_files(report):
    assert report["rc"] == 0
    out = report["out"]
    names = ["report.md", "report.json", "report.csv", "iou_per_class.png", "confusion_rpe.png",
             "confusion_geope.png"]
    for name in names:
        assert (out / name).is_file()
        assert f"  {out / name}" in report["stdout"]
    assert not list(out.glob(".*.tmp"))  # no temporary files left behind
    assert "| rpe | 6/6 | 66.7 | 66.7 | 50.0 |" in report["stdout"]


def test_markdown_pooled_and_mean_numbers(report):
    md = (report["out"] / "report.md").read_text()
    assert table_row(md, POOLED, "rpe") == ["rpe", "6/6", "66.7", "66.7", "50.0"] + ["50.0"] * C
    assert table_row(md, POOLED, "geope") == ["geope", "4/6", "80.0", "80.0", "66.7"] + ["66.7"] * C
    assert table_row(md, MEAN, "rpe") == ["rpe", "6/6", "75.0", "75.0", "66.7"] + ["66.7"] * C
    assert table_row(md, MEAN, "geope") == ["geope", "4/6", "87.5", "87.5", "83.3"] + ["83.3"] * C
    header = table_row(md, POOLED, "run")
    assert header == ["run", "folds", "OA", "mAcc", "mIoU"] + list(CLASS_NAMES)
    assert md.startswith("# S3DIS report: folds per run (column *folds*)\n")  # S3DIS's classes: its name; 6 and 4 folds


def test_markdown_difference_rows(report):
    md = (report["out"] / "report.md").read_text()
    assert table_row(md, POOLED, "geope - rpe") == ["geope - rpe", "", "+13.3", "+13.3", "+16.7"] + ["+16.7"] * C
    assert table_row(md, MEAN, "geope - rpe") == ["geope - rpe", "", "+12.5", "+12.5", "+16.7"] + ["+16.7"] * C


def test_missing_folds_are_named(report):
    md = (report["out"] / "report.md").read_text()
    assert ("geope: folds missing: Area_3 (no metrics.json), Area_6 (incomplete); "
            "pooled over 4 of 6 folds: Area_1, Area_2, Area_4, Area_5.") in md
    assert "the runs cover different folds" in md
    assert "rpe: folds missing" not in md
    assert table_row(md, "geope: per fold", "Area_3")[1] == "missing (no metrics.json)"
    assert table_row(md, "geope: per fold", "Area_6")[1] == "missing (incomplete)"
    assert table_row(md, "rpe: per fold", "Area_4")[:5] == ["Area_4", "260", "50.0", "50.0", "33.3"]
    assert table_row(md, "rpe: per fold", "pooled (6 folds)")[:5] == ["pooled (6 folds)", "1,170", "66.7",
                                                                      "66.7", "50.0"]


def test_json_values(report):
    data = json.loads((report["out"] / "report.json").read_text())
    assert data["class_names"] == list(CLASS_NAMES)
    rpe, geope = data["runs"]
    assert math.isclose(rpe["pooled"]["oa"], 2 / 3) and math.isclose(rpe["pooled"]["miou"], 1 / 2)
    assert math.isclose(rpe["mean_of_folds"]["oa"], 3 / 4) and math.isclose(rpe["mean_of_folds"]["miou"], 2 / 3)
    assert math.isclose(geope["pooled"]["macc"], 4 / 5) and math.isclose(geope["mean_of_folds"]["miou"], 5 / 6)
    assert geope["folds"] == ["Area_1", "Area_2", "Area_4", "Area_5"]
    assert geope["folds_missing"] == [{"area": "Area_3", "reason": "no metrics.json"},
                                      {"area": "Area_6", "reason": "incomplete"}]
    np.testing.assert_array_equal(rpe["pooled_confusion"], 3 * perfect() + 3 * half())
    assert rpe["num_points"] == 3 * 130 + 3 * 260
    assert [f["oa"] for f in rpe["per_fold"]] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]  # recomputed, not the stored -1
    (diff,) = data["differences"]
    assert diff["run"] == "geope" and diff["baseline"] == "rpe"
    assert math.isclose(diff["pooled"]["oa"], 4 / 5 - 2 / 3) and math.isclose(diff["pooled"]["miou"], 1 / 6)
    assert math.isclose(diff["mean_of_folds"]["oa"], 1 / 8)


def test_csv_rows(report):
    with open(report["out"] / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_key = {(r["run"], r["table"], r["areas"]): r for r in rows}
    pooled = by_key[("rpe", "pooled", "Area_1;Area_2;Area_3;Area_4;Area_5;Area_6")]
    assert pooled["oa_pct"] == "66.6667" and pooled["miou_pct"] == "50.0000" and pooled["points"] == "1170"
    assert pooled["iou_pct_clutter"] == "50.0000"
    assert by_key[("geope", "mean_of_folds", "Area_1;Area_2;Area_4;Area_5")]["miou_pct"] == "83.3333"
    assert [(by_key[("rpe", "fold", f"Area_{k}")]["oa_pct"], by_key[("rpe", "fold", f"Area_{k}")]["miou_pct"])
            for k in range(1, 7)] == [("100.0000", "100.0000")] * 3 + [("50.0000", "33.3333")] * 3  # each fold's own
    assert by_key[("geope", "fold", "Area_3")]["status"] == "missing: no metrics.json"
    assert by_key[("geope", "fold", "Area_3")]["oa_pct"] == ""
    assert by_key[("geope", "fold", "Area_6")]["status"] == "missing: incomplete"
    assert by_key[("geope - rpe", "difference_pooled", "")]["miou_pct"] == "16.6667"
    assert len(rows) == 2 * (2 + 6) + 2


def test_png_figures_are_valid_images(report):
    import matplotlib.image as mpimg

    for name, min_w, min_h in (("iou_per_class.png", 800, 300), ("confusion_rpe.png", 500, 500),
                               ("confusion_geope.png", 500, 500)):
        image = mpimg.imread(report["out"] / name)
        assert image.ndim == 3 and image.shape[2] in (3, 4), name
        h, w = image.shape[:2]
        assert w >= min_w and h >= min_h and w < 4000 and h < 4000, (name, image.shape)
        assert image[..., :3].std() > 0.05, name  # not a blank canvas


def test_row_normalised_confusion():
    from pointgeope.report.plots import row_normalised

    norm = row_normalised(np.array([[3, 1], [0, 0]]))
    np.testing.assert_allclose(norm[0], [0.75, 0.25])
    assert np.isnan(norm[1]).all()


def test_absent_class_shows_a_dash_and_null(tmp_path):
    m = perfect()
    m[9, 9] = 0  # no sofa at all in this fold
    write_fold(tmp_path / "solo", 1, m)
    (summary,) = load_runs([tmp_path / "solo"])
    md = summary_markdown([summary])
    row = table_row(md, POOLED, "solo")
    assert row[5 + 9] == "—"  # the sofa column
    assert row[1:5] == ["1/6", "100.0", "100.0", "100.0"]  # sofa is left out of the means
    from pointgeope.report.tables import json_report

    assert json_report([summary])["runs"][0]["pooled"]["iou"][9] is None
    assert "Area_2 (no area_2/ folder)" in summary.missing_text()


def test_names_and_default_out(tmp_path):
    rpe, geope = make_runs(tmp_path)
    with pytest.raises(ReportError, match="one name per run"):
        load_runs([rpe, geope], ["a"])
    runs = load_runs([rpe, geope], ["RPE", "GeoPE"])
    assert [r.name for r in runs] == ["RPE", "GeoPE"]
    assert default_out([rpe], ["rpe"]) == rpe / "report"
    assert default_out([rpe, geope], ["RPE", "Geo PE"]) == tmp_path.resolve() / "report_RPE_vs_Geo_PE"
    a, b = tmp_path / "seed0" / "geope", tmp_path / "seed1" / "geope"      # one name in two folders
    for run in (a, b):
        write_fold(run, 1, perfect())
    assert [r.name for r in load_runs([a, b])] == ["seed0/geope", "seed1/geope"]
    with pytest.raises(ReportError, match=r"expected distinct run names, got \['x', 'x'\]; pass --names"):
        load_runs([a, b], ["x", "x"])


def test_single_run_report_has_no_difference_rows(tmp_path):
    rpe, _ = make_runs(tmp_path)
    written = write_report(load_runs([rpe]), tmp_path / "single")
    md = written[0].read_text()
    assert " - " not in md.split("## Per fold")[0].split("Runs:")[1]
    assert written[-1].name == "report.json"  # the record of the others: written last
    assert json.loads(written[-1].read_text())["differences"] == []


def test_class_means_follow_the_rule_the_folds_were_evaluated_with(tmp_path):
    """Sofa absent from Area_1: by the authors' rule (``all``) mIoU is 12/13 and the report says so; a
    file without the key was scored over the classes present; --class-mean rescores; mixed rules are an
    error that names the run and the way out."""
    m = perfect()
    m[9, 9] = 0
    write_fold(tmp_path / "authors", 1, m, class_mean="all")
    write_fold(tmp_path / "older", 1, m)
    authors, older = load_runs([tmp_path / "authors", tmp_path / "older"])
    assert (authors.class_mean, older.class_mean) == ("all", "present")
    assert math.isclose(authors.pooled["miou"], 12 / 13) and math.isclose(authors.folds[0].scores["macc"], 12 / 13)
    assert older.pooled["miou"] == 1.0
    md = summary_markdown([authors, older])
    assert "`eval.class_mean: all`" in md and "`eval.class_mean: present`" in md and "different rules" in md
    assert "`eval.class_mean: all`" in summary_markdown([authors])
    (rescored,) = load_runs([tmp_path / "older"], class_mean="all")
    assert math.isclose(rescored.pooled["miou"], 12 / 13) and math.isclose(rescored.mean_of_folds["miou"], 12 / 13)
    write_fold(tmp_path / "older", 2, perfect(), class_mean="all")
    with pytest.raises(ReportError, match=r"older: its folds were evaluated with different.*--class-mean"):
        load_run(tmp_path / "older")
    assert load_run(tmp_path / "older", class_mean="present").class_mean == "present"
    from pointgeope.report.tables import json_report
    assert json_report([authors])["runs"][0]["class_mean"] == "all"


def test_the_iou_chart_says_which_folds_each_run_pooled(tmp_path, monkeypatch):
    """The bar chart was titled "pooled 6-fold" whatever it pooled; now each run's folds are named, as in the
    confusion heatmap's title (geope: Area_3 without metrics.json, Area_6 unfinished). mIoU by hand: rpe
    3 perfect + 3 half folds, per class 60 / (90 + 90 - 60) = 50 %; geope 3 perfect + 1 half, 40 / 60."""
    from pointgeope.report import plots

    titles, heights = [], []
    monkeypatch.setattr(plots, "_png", lambda fig: titles.append([ax.get_title() for ax in fig.axes])
                        or heights.append([p.get_height() for p in fig.axes[0].patches]) or b"")
    runs = load_runs(list(make_runs(tmp_path)))
    plots.iou_bar_chart(runs)
    # the bars are the pooled IoUs the title names (the mean of folds would be 66.7 and 83.3)
    np.testing.assert_allclose(heights[0][:2 * C], [50.0] * C + [200 / 3] * C, rtol=1e-12)
    plots.confusion_heatmap(runs[1])
    assert titles[0][0] == ("Per-class IoU: rpe mIoU 50.0 (pooled over all 6 folds); geope mIoU 66.7 (pooled over "
                            "4 of 6 folds: Area_1, Area_2, Area_4, Area_5)")
    assert titles[1][0] == "geope: confusion, row-normalised, pooled over 4 of 6 folds: Area_1, Area_2, Area_4, Area_5"


def test_a_report_into_its_run_leaves_the_folds_temporary_files(tmp_path, capsys):
    """report --out RUN searched every folder below out for a killed writer's temporary files and deleted a
    running train's ``.last.pt.XXXXXXXX.tmp`` in RUN/area_1 (its lock is out's, not the fold's), so that
    train's rename failed; a report's own leftover in out is still removed."""
    run = tmp_path / "rpe"
    write_fold(run, 1, perfect())
    live = run / "area_1" / ".last.pt.a1b2c3d4.tmp"
    live.write_bytes(b"a train writing")
    killed = run / ".report.md.e5f6a7b8.tmp"
    killed.write_bytes(b"a report killed as it wrote")
    assert cli.main(["report", str(run), "--out", str(run)]) == 0
    assert live.read_bytes() == b"a train writing" and not killed.exists()
    printed = capsys.readouterr().out
    assert f"removed {killed}, left by an interrupted run\n" in printed and str(live) not in printed
