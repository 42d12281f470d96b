"""The report of a network of more classes than S3DIS's 13 (``model.num_classes`` up to 254, labels of one's
own): its metrics.json names them (``constants.class_names``), and the report pooled none of it ("expected
class_names [...]"). Tables, CSV, JSON and figures take the files' class names; folds and runs of different
classes are refused in one line naming both files."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from pointgeope import cli
from pointgeope.constants import CLASS_NAMES, class_names, class_palette
from pointgeope.report import plots

C = 15


def write_fold(run: Path, k: int, confusion: np.ndarray, names: list[str]) -> Path:
    d = run / f"area_{k}"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "metrics.json"
    path.write_text(json.dumps({"area": f"Area_{k}", "fold": k, "class_names": names,
                                "confusion": confusion.tolist(), "complete": True}))
    return path


def fifteen_class_run(run: Path) -> Path:
    """Folds 1 and 2: fold 1 right everywhere (10 points a class), fold 2 calls class 14's 10 points 13."""
    write_fold(run, 1, 10 * np.eye(C, dtype=np.int64), class_names(C))
    second = 10 * np.eye(C, dtype=np.int64)
    second[14, 14], second[14, 13] = 0, 10
    write_fold(run, 2, second, class_names(C))
    return run


@pytest.fixture
def figures(monkeypatch):
    """The report's figures, kept (matplotlib) as they are saved."""
    kept = []

    def png(fig):
        kept.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", png)
    return kept


def test_a_run_of_fifteen_classes_is_tabulated_with_its_class_names(tmp_path, figures):
    run = fifteen_class_run(tmp_path / "run")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    names = class_names(C)
    # pooled: class 13 has 20 true points + 10 wrong ones -> IoU 20/30; class 14 has 10 of its 20 right
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["class_names"] == names == [*CLASS_NAMES, "class_13", "class_14"]
    iou = data["runs"][0]["pooled"]["iou"]
    assert iou[:13] == [1.0] * 13 and iou[13] == pytest.approx(2 / 3) and iou[14] == pytest.approx(0.5)
    assert len(data["runs"][0]["pooled_confusion"]) == C
    md = (tmp_path / "r" / "report.md").read_text()
    header = "| run | folds | OA | mAcc | mIoU | " + " | ".join(names) + " |"
    assert header in md and "| 100.0 | 66.7 | 50.0 |" in md
    # its labels are not S3DIS's: the title and tables say its folds without the data set's name
    assert md.startswith("# Report: 2 of 6 folds (Area_1, Area_2)\n")
    assert "**2 of 6 folds (Area_1, Area_2), pooled over" in md
    assert "S3DIS" not in md.split("## Per fold")[0].replace("Pointcept", "")
    assert "| fold | points | OA | mAcc | mIoU | " + " | ".join(names) + " |" in md
    rows = list(csv.reader(io.StringIO((tmp_path / "r" / "report.csv").read_text())))
    assert rows[0][-2:] == ["iou_pct_class_13", "iou_pct_class_14"] and len(rows[0]) == 8 + C
    assert rows[1][-2:] == ["66.6667", "50.0000"]
    # figures: the bars of class k in class_palette(15)[k], the heatmap's axes name the 15 classes
    bars, heatmap = figures
    (ax,) = bars.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    colours = [tuple(round(255 * x) for x in p.get_facecolor()[:3]) for p in ax.patches]
    assert colours == [tuple(c) for c in class_palette(C)]
    ax = heatmap.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == names
    assert ax.images[0].get_array().shape == (C, C)


def test_runs_of_different_classes_are_not_compared(tmp_path, capsys, figures):
    fifteen = fifteen_class_run(tmp_path / "fifteen")
    s3dis = tmp_path / "s3dis"
    first = write_fold(s3dis, 1, 10 * np.eye(13, dtype=np.int64), list(CLASS_NAMES))
    assert cli.main(["report", str(s3dis), str(fifteen)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(first) in err and str(fifteen / "area_1" / "metrics.json") in err
    assert "expected class_names ['ceiling'," in err and "'class_14']" in err


@pytest.mark.parametrize("allow_mixed", [False, True])
def test_folds_of_different_classes_are_not_pooled(tmp_path, capsys, figures, allow_mixed):
    run = tmp_path / "run"
    write_fold(run, 1, 10 * np.eye(C, dtype=np.int64), class_names(C))
    second = write_fold(run, 2, 10 * np.eye(14, dtype=np.int64), class_names(14))
    assert cli.main(["report", str(run)] + ["--allow-mixed"] * allow_mixed) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(second) in err and str(run / "area_1" / "metrics.json") in err


def test_an_ablation_of_fifteen_class_runs_names_its_classes(tmp_path):
    """The ablation's per-class table had S3DIS's 13 names over the runs' 15 IoUs."""
    from pointgeope.report.seeds import write_trials

    runs = [fifteen_class_run(tmp_path / f"seed_{s}") for s in (0, 1)]
    write_trials([("geope", s, run) for s, run in enumerate(runs)], tmp_path / "out")
    md = (tmp_path / "out" / "ablation.md").read_text()
    assert "| variant | " + " | ".join(class_names(C)) + " |" in md
    assert "| geope | " + " | ".join(["100.0"] * 13 + ["66.7", "50.0"]) + " |" in md


def test_a_fold_evaluated_with_thirteen_names_for_fifteen_classes_reads_with_the_names_of_fifteen(tmp_path, capsys,
                                                                                                  figures):
    """Evaluate wrote ``class_names: CLASS_NAMES[:num_classes]`` (13 names) beside a 15 x 15 confusion before
    the classes beyond 13 were named: such a fold reads as class_13, class_14 (as the checkpoint's entry is
    padded) and pools with a fold written since; any other mismatch is refused with what to do."""
    run = fifteen_class_run(tmp_path / "run")
    old = json.loads((run / "area_1" / "metrics.json").read_text())
    (run / "area_1" / "metrics.json").write_text(json.dumps({**old, "class_names": list(CLASS_NAMES)}))
    assert cli.main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["class_names"] == class_names(C)
    iou = data["runs"][0]["pooled"]["iou"]
    assert iou[:13] == [1.0] * 13 and iou[13] == pytest.approx(2 / 3) and iou[14] == pytest.approx(0.5)
    # 14 names beside 15 x 15, and 13 names beside 12 x 12: refused in one line that says what to do
    for names, n in ((class_names(14), C), (list(CLASS_NAMES), 12)):
        path = write_fold(tmp_path / f"bad{n}", 1, 10 * np.eye(n, dtype=np.int64), names)
        assert cli.main(["report", str(path.parent.parent)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and str(path) in err and f"got shape ({n}, {n}); evaluate the fold again" in err
