"""`pointgeope report` and the normals: folds whose points checksums an older version recorded with the normals
in them (the rule written apart in tests/data/points_rules.py) pool with folds recorded now, on the same file;
folds and runs that read different normal estimates are said to, in one note, not refused; PTv1 runs never
mention normals."""
from __future__ import annotations

import json

import pytest

from data_prep.prepare import PrepareConfig, prepare
from pointgeope.cli import main as cli
from pointgeope.engine.config import config_to_dict, load_config
from pointgeope.report.settings import fold_settings
from tests.data.points_rules import measured_points, points_with_normals
from tests.data_prep.raw_trees import five_rooms
from tests.engine.test_ptv3_engine import PTV3_DEMO
from tests.test_report import perfect, write_fold

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # they read no figure

AREAS = ("Area_1", "Area_2")


def _fold(run, k, root, points, config=None, **more):
    """A complete fold of data root ``root`` (its files as its manifest lists them) recording ``points``."""
    write_fold(run, k, perfect())
    config = config or config_to_dict(load_config(None, [f"data.root={root}"]))
    files = json.loads((root / "manifest.json").read_text())["checksums"]
    path = run / f"area_{k}" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "config": config, "data": files,
                                "data_points": points, **more}))


def _notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]


def test_folds_recorded_with_the_normals_in_their_points_pool_with_folds_recorded_now(tmp_path, capsys):
    """Fold 1 recorded its points by the rule of the versions that hashed ``normal`` too, fold 2 by the rule now,
    of the very same files: the run was refused as two data sets (exit 2). With a manifest.json of this version
    (its points listed) and with one of an older version (its points then computed from the files)."""
    root = tmp_path / "s3dis"
    prepare(PrepareConfig(five_rooms(tmp_path / "raw"), root, progress=False))
    older = {a: points_with_normals(root / f"{a}.h5") for a in AREAS}
    now = {a: measured_points(root / f"{a}.h5") for a in AREAS}
    assert older != now
    run = tmp_path / "run"
    capsys.readouterr()
    _fold(run, 1, root, older)
    _fold(run, 2, root, now)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert _notes(capsys) == [f"note: {run}: the folds' data compared by the points of their area files, those of "
                              f"Area_1 (its points of Area_1, Area_2 recorded with their normals by an older version: "
                              f"from {root / 'manifest.json'})"]
    manifest = json.loads((root / "manifest.json").read_text())
    del manifest["points_rule"]
    manifest["points"] = older  # as a prepare of those versions listed them
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 0
    _fold(run, 1, root, {**older, "Area_2": "points:sha256:other"})  # other points are still other data
    path = run / "area_1" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "data": {**metrics["data"], "Area_2": "sha256:unlisted"}}))
    assert cli(["report", str(run), "--out", str(tmp_path / "out3")]) == 2


def _normal_config(root):
    return config_to_dict(load_config(PTV3_DEMO, [f"data.root={root}"]))


def test_folds_of_other_normal_estimates_pool_with_one_note_and_runs_name_it(tmp_path, capsys):
    root = tmp_path / "s3dis"
    prepare(PrepareConfig(five_rooms(tmp_path / "raw"), root, progress=False))
    points = {a: measured_points(root / f"{a}.h5") for a in AREAS}
    v1, v2 = {"normal_k": 30, "normal_version": 1}, {"normal_k": 30, "normal_version": 2}
    capsys.readouterr()
    run, other = tmp_path / "run", tmp_path / "other"
    _fold(run, 1, root, points, _normal_config(root), data_normals={a: v1 for a in AREAS})
    _fold(run, 2, root, points, _normal_config(root), data_normals={"Area_1": v1, "Area_2": v2})
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert _notes(capsys) == [f"note: {run}: its folds read normals of different estimates, pooled (the same points, "
                              "other normals): Area_2's k=30, version 1 in fold Area_1, k=30, version 2 in fold Area_2"]
    for k in (1, 2):
        _fold(other, k, root, points, _normal_config(root))  # recorded before data_normals: version 1, k = 30
        _fold(run, k, root, points, _normal_config(root), data_normals={a: v2 for a in AREAS})
    assert cli(["report", str(other), str(run), "--out", str(tmp_path / "out2")]) == 0
    text = (tmp_path / "out2" / "report.md").read_text()
    assert "data.normals.Area_1" in text and "k=30, version 1" in text and "k=30, version 2" in text, text
    assert "different data" not in text
    made_by = {r["name"]: r["made_by"] for r in json.loads((tmp_path / "out2" / "report.json").read_text())["runs"]}
    assert made_by["other"]["config_sha256"] == made_by["run"]["config_sha256"]  # one method: the estimate is data's
    assert made_by["run"]["data"]["normals"] == {a: "k=30, version 2" for a in AREAS}
    assert ", normals k=30, version 2\n" not in text and "; normals k=30, version 2\n" in text


def test_a_run_that_read_no_normals_never_mentions_them(tmp_path, capsys):
    root = tmp_path / "s3dis"
    prepare(PrepareConfig(five_rooms(tmp_path / "raw"), root, progress=False))
    run = tmp_path / "run"
    capsys.readouterr()
    for k in (1, 2):
        _fold(run, k, root, {a: measured_points(root / f"{a}.h5") for a in AREAS})
        settings = fold_settings(json.loads((run / f"area_{k}" / "metrics.json").read_text()), run / f"area_{k}")
        assert not any("normals" in key for key in settings)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert "normals" not in capsys.readouterr().out + (tmp_path / "out" / "report.md").read_text()
