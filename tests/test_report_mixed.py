"""`pointgeope report` of a run whose folds were trained or evaluated with different settings: refused,
naming the keys and the folds, or pooled with ``--allow-mixed`` and the differences written in
report.md and report.json (issue 38, class 3)."""
from __future__ import annotations

import json

import pytest
import yaml

from pointgeope.cli import main as cli
from pointgeope.engine.config import config_to_dict, load_config
from pointgeope.report.fold_file import ReportError
from pointgeope.report.runs import load_run
from tests.test_report import perfect, write_fold

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # they read no figure


def _fold(run, k, *overrides, config_in_metrics=False):
    """A complete fold whose settings are the defaults with ``overrides``: in ``config.yaml`` as train
    writes it, with the eval keys an evaluate of before the ``config`` record wrote into ``metrics.json`` (``vote``,
    ``max_fragments``), or in ``metrics.json`` as evaluate records it now."""
    write_fold(run, k, perfect())
    config = config_to_dict(load_config(None, list(overrides)))
    metrics = json.loads((run / f"area_{k}" / "metrics.json").read_text())
    if config_in_metrics:
        (run / f"area_{k}" / "metrics.json").write_text(json.dumps({**metrics, "config": config}))
    else:
        (run / f"area_{k}" / "config.yaml").write_text(yaml.safe_dump(config))
        evaluated = {name: config["eval"][name] for name in ("vote", "max_fragments")}
        (run / f"area_{k}" / "metrics.json").write_text(json.dumps({**metrics, **evaluated}))


def _mixed_run(tmp_path):
    """The fuzz's run: fold 1 geope, fold 2 rpe, fold 3 other planes on another data root; folds 4-6
    differ only in what does not change a result (device, workers, seed, run folder)."""
    run = tmp_path / "run"
    _fold(run, 1, "model.pe=geope")
    _fold(run, 2, "model.pe=rpe", config_in_metrics=True)
    _fold(run, 3, "model.pe=geope", "model.planes=[16, 32, 64, 128, 256]", "data.root=/elsewhere")
    _fold(run, 4, "model.pe=geope", "train.device=cpu", "data.num_workers=0", "train.cuda_graphs=true")
    _fold(run, 5, "model.pe=geope", "train.seed=3", "train.run_dir=/x")
    _fold(run, 6, "model.pe=geope", "eval.batch_points=1000")
    return run


def test_folds_with_different_settings_are_not_pooled(tmp_path, capsys):
    """Before: exit 0 and one pooled number, with no word of the mix in report.md or report.json."""
    run = _mixed_run(tmp_path)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"pointgeope report: error: {run}: its folds were trained or evaluated with different")
    assert "model.pe (Area_1, Area_3..Area_6: 'geope'; Area_2: 'rpe')" in line, line
    assert "data.root (Area_1, Area_2, Area_4..Area_6: 'data/s3dis'; Area_3: '/elsewhere')" in line, line
    assert "model.planes" in line and "--allow-mixed" in line
    for key in ("train.device", "data.num_workers", "train.cuda_graphs", "train.seed", "train.run_dir",
                "eval.batch_points"):
        assert key not in line
    assert not (tmp_path / "out").exists()


def test_allow_mixed_pools_them_and_writes_the_differences(tmp_path, capsys):
    run = _mixed_run(tmp_path)
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out), "--allow-mixed"]) == 0
    md = (out / "report.md").read_text()
    assert "mixed settings" in md and "`model.pe`: Area_1, Area_3..Area_6 `geope`; Area_2 `rpe`" in md, md
    mixed = json.loads((out / "report.json").read_text())["runs"][0]["mixed_settings"]
    assert mixed["model.pe"] == {"Area_1": "geope", "Area_2": "rpe", "Area_3": "geope", "Area_4": "geope",
                                 "Area_5": "geope", "Area_6": "geope"}
    assert mixed["data.root"]["Area_3"] == "/elsewhere" and mixed["model.planes"]["Area_3"] == [16, 32, 64, 128, 256]
    assert sorted(mixed) == ["data.root", "model.pe", "model.planes"]


def test_folds_alike_report_as_before(tmp_path, capsys):
    run = tmp_path / "run"
    for k in range(1, 7):
        _fold(run, k, "model.pe=rpe", f"train.seed={k}", config_in_metrics=k % 2 == 0)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert "mixed" not in (tmp_path / "out" / "report.md").read_text()
    assert json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]["mixed_settings"] == {}


def _with_data(run, k, checksums):
    """Fold ``k``'s metrics.json recording the checksums of its area files, as evaluate writes them."""
    path = run / f"area_{k}" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "data": checksums}))


def test_the_same_files_under_another_data_root_pool_and_other_files_do_not(tmp_path, capsys):
    """A fold evaluated with the same files under another path (a node's local copy, an absolute path) made
    report refuse the run as 'a different data set'. With the files' checksums recorded, data.root is not
    compared and the checksums are: the same files pool, a re-prepared area is named."""
    files = {f"Area_{a}": f"sha256:{a}" * 4 for a in range(1, 7)}
    run = tmp_path / "run"
    for k in range(1, 7):
        _fold(run, k, f"data.root={'/scratch/job7/s3dis' if k == 2 else 'data/s3dis'}", config_in_metrics=k % 2 == 0)
        _with_data(run, k, files)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    _with_data(run, 2, {**files, "Area_3": "sha256:other"})
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert (f"data.files.Area_3 (Area_1, Area_3..Area_6: '{files['Area_3']}'; Area_2: 'sha256:other')" in line
            and "data.root" not in line), line
    _with_data(run, 4, None)    # a fold of an older version records no files: data.root is compared again
    assert cli(["report", str(run), "--out", str(tmp_path / "out3")]) == 2
    assert "data.root (Area_1, Area_3..Area_6: 'data/s3dis'; Area_2: '/scratch/job7/s3dis')" in capsys.readouterr().err


def test_folds_of_other_code_versions_still_pool(tmp_path, capsys):
    """metrics.json records the version and commit of the code (pointgeope/provenance.py): a record of the
    code, not a setting, so folds evaluated by two commits of the same settings pool without a word."""
    run = tmp_path / "run"
    for k in range(1, 7):
        _fold(run, k, "model.pe=rpe", config_in_metrics=True)
        path = run / f"area_{k}" / "metrics.json"
        code = {"pointgeope": f"0.2.0.dev{k}", "pointgeope_commit": None if k == 3 else f"{k:040x}"}
        path.write_text(json.dumps({**json.loads(path.read_text()), **code}))
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert "mixed" not in (tmp_path / "out" / "report.md").read_text()
    assert json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]["mixed_settings"] == {}


def test_files_of_the_same_points_pool_where_every_fold_records_them(tmp_path, capsys):
    """Folds trained on the same raw data prepared on two nodes (or from the zip and from the folder) recorded
    other file checksums (the files hold where they were prepared from) and the run was refused. Where every
    fold records the checksums of the points, those are compared, not the files'."""
    files = {f"Area_{a}": f"sha256:{a}" * 4 for a in range(1, 7)}
    points = {f"Area_{a}": f"points:sha256:{a}" * 4 for a in range(1, 7)}
    run = tmp_path / "run"
    for k in range(1, 7):
        _fold(run, k)
        path = run / f"area_{k}" / "metrics.json"
        other = {**files, "Area_1": "sha256:node2"} if k == 5 else files
        path.write_text(json.dumps({**json.loads(path.read_text()), "data": other, "data_points": points}))
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    path = run / "area_5" / "metrics.json"                     # the fold of the other files
    path.write_text(json.dumps({**json.loads(path.read_text()), "data_points": {**points, "Area_1": "points:x"}}))
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "data.points.Area_1 (Area_1..Area_4, Area_6: " in line and "data.files" not in line, line
    path.write_text(json.dumps({**json.loads(path.read_text()), "data_points": None}))  # a fold of an older version
    assert cli(["report", str(run), "--out", str(tmp_path / "out3")]) == 2
    assert "data.files.Area_1 (Area_1..Area_4, Area_6: 'sha256:1" in capsys.readouterr().err


def test_folds_of_an_older_version_are_compared_by_the_points_their_manifests_list(tmp_path, capsys):
    """Folds evaluated before metrics.json recorded points checksums, on the same raw data prepared on two
    nodes: their file checksums differ and the run was refused as two data sets. The points of each fold's
    files are taken from the manifest.json of its data.root (prepare lists them with the file checksums),
    the folds compared by them, and the report says so; other points are still refused, by points."""
    files = {f"Area_{a}": f"sha256:{a}" * 4 for a in range(1, 7)}
    points = {f"Area_{a}": f"points:sha256:{a}" * 4 for a in range(1, 7)}
    roots = {"here": files, "node2": {**files, "Area_1": "sha256:node2"}}
    for name, checksums in roots.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"checksums": checksums, "points": points,
                                                                     "points_rule": "measured"}))
    run = tmp_path / "run"
    for k in range(1, 7):
        root = tmp_path / ("node2" if k == 5 else "here")
        _fold(run, k, f"data.root={root}", config_in_metrics=k % 2 == 0)
        _with_data(run, k, roots[root.name])
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {run}: the folds' data compared by the points of their area files, those of "
                     + "; ".join(f"Area_{k} (no points checksums recorded: from "
                                 f"{tmp_path / ('node2' if k == 5 else 'here') / 'manifest.json'})"
                                 for k in range(1, 7))]
    (tmp_path / "node2" / "manifest.json").write_text(json.dumps(
        {"checksums": roots["node2"], "points": {**points, "Area_1": "points:other"}, "points_rule": "measured"}))
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "data.points.Area_1 (Area_1..Area_4, Area_6: " in line and "Area_5: 'points:other'" in line, line


def test_the_eval_settings_an_older_metrics_file_records_are_compared(tmp_path):
    """A fold with no ``config`` in metrics.json (an older evaluate) takes its train settings from config.yaml
    and its eval settings from what metrics.json recorded: two folds voted differently are not pooled."""
    run = tmp_path / "run"
    for k, vote in ((1, "softmax"), (2, "logits")):
        _fold(run, k)
        path = run / f"area_{k}" / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "vote": vote,
                                    "checkpoint": f"/elsewhere/area_{k}/best.pth"}))
    with pytest.raises(ReportError, match=r"eval\.vote \(Area_1: 'softmax'; Area_2: 'logits'\); one pooled"):
        load_run(run)


def test_each_area_file_is_looked_up_once_for_the_folds_that_share_it(monkeypatch):
    """Six pre-checksum folds of one run list the same six area files: without a manifest each lookup hashes
    a file (gigabytes), so each (root, area, checksum) is asked once, not once per fold (36 before)."""
    from pointgeope.report import points

    asked = []

    def looked_up(root, area, checksum):
        asked.append((root, area, checksum))
        return f"points:{area}", f"{root}/{area}.h5"

    monkeypatch.setattr(points, "points_of_file", looked_up)
    files = {f"data.files.Area_{a}": f"sha256:{a}" for a in range(1, 7)}
    folds = {f"Area_{k}": {"data.root": "/data/s3dis", **files} for k in range(1, 7)}
    found = points.recover_points(folds)
    assert sorted(asked) == sorted(("/data/s3dis", f"Area_{a}", f"sha256:{a}") for a in range(1, 7))
    assert len(found) == 6 and all(s[f"data.points.Area_{a}"] == f"points:Area_{a}"
                                   for s in folds.values() for a in range(1, 7))


def test_folds_trained_before_and_after_a_prepare_that_added_normals_pool(tmp_path, capsys):
    """A prepare into an older folder adds normals: the new file holds the old file's points plus ``normal``,
    so its points checksum differs, and manifest.json lists the old file's checksum under same_points (train
    and evaluate accept runs trained on it). A run whose fold 1 was trained before and fold 2 after was refused
    as two data sets (exit 2), and two runs side by side were said to read different data. The fold's points
    are now the manifest's; a file the manifest does not list is still another data set."""
    old = {"Area_1": "sha256:old1", "Area_2": "sha256:old2"}
    new = {"Area_1": "sha256:new1", "Area_2": "sha256:new2"}
    old_points = {"Area_1": "points:sha256:nonormal1", "Area_2": "points:sha256:nonormal2"}
    new_points = {"Area_1": "points:sha256:normal1", "Area_2": "points:sha256:normal2"}
    root = tmp_path / "s3dis"
    root.mkdir()
    (root / "manifest.json").write_text(json.dumps({"checksums": new, "points": new_points, "points_rule": "measured",
                                                    "same_points": {a: [c] for a, c in old.items()}}))

    def fold(run, k, files, points):
        _fold(run, k, f"data.root={root}", config_in_metrics=True)
        path = run / f"area_{k}" / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "data": files, "data_points": points}))

    straddle, before, after = tmp_path / "straddle", tmp_path / "before", tmp_path / "after"
    fold(straddle, 1, old, old_points)
    fold(straddle, 2, new, new_points)
    for k in (1, 2):
        fold(before, k, old, old_points)
        fold(after, k, new, new_points)
    assert cli(["report", str(straddle), "--out", str(tmp_path / "out")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [(f"note: {straddle}: the folds' data compared by the points of their area files, those of "
                      f"Area_1 (its files of Area_1, Area_2 since replaced by files of the same points: from "
                      f"{root / 'manifest.json'})")]
    assert cli(["report", str(before), str(after), "--out", str(tmp_path / "out2")]) == 0
    assert "different data" not in (tmp_path / "out2" / "report.md").read_text()
    fold(straddle, 1, {**old, "Area_2": "sha256:unlisted"}, old_points)  # a file prepare never replaced
    assert cli(["report", str(straddle), "--out", str(tmp_path / "out3")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "data.points.Area_2 (Area_1: 'points:sha256:nonormal2'; Area_2: 'points:sha256:normal2')" in line, line
    assert "data.points.Area_1" not in line, line


def test_a_damaged_setting_in_the_refusal_is_bounded_and_marked(tmp_path, capsys):
    """A fold whose metrics.json's ``model.pe`` was edited into a newline and 100,000 characters: the refusal says
    it as repr writes it, cut and marked (looks damaged), as the notes of ``--allow-mixed`` do; a sound value as
    repr writes it. Before: the refusal was one line of over 100,000 characters."""
    run = tmp_path / "run"
    for k in range(1, 7):
        _fold(run, k, "model.pe=rpe", config_in_metrics=True)
    path = run / "area_2" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["config"]["model"]["pe"] = "rpe\n" + "x" * 100_000
    path.write_text(json.dumps(metrics))
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    said = "'rpe\\n" + "x" * 55 + "... (100,007 characters)" + " (looks damaged)"
    assert f"model.pe (Area_1, Area_3..Area_6: 'rpe'; Area_2: {said}); one pooled number" in line
    assert len(line) < 1000


def _first_version_fold(run, k):
    """A fold as pointgeope 0.1.0 left it before the test's vote was a setting (a32a2b0, 2026-11-26 04:54): its
    ``config.yaml`` has no ``eval.vote`` / ``eval.max_fragments`` (``data.augment`` was a yes/no; ``false`` is
    today's ``none``), and its ``metrics.json`` has neither ``config`` nor ``vote``: its test summed softmax."""
    write_fold(run, k, perfect())
    config = config_to_dict(load_config(None, ["data.augment=none"]))
    config["data"]["augment"] = False
    config["eval"] = {"checkpoint": "last", "tta": config["eval"]["tta"], "batch_points": 30000}
    (run / f"area_{k}" / "config.yaml").write_text(yaml.safe_dump(config))
    path = run / f"area_{k}" / "metrics.json"
    metrics = json.loads(path.read_text())
    path.write_text(json.dumps({**metrics, "test_areas": [f"Area_{k}"], "checkpoint": "last.pt", "epoch": 2,
                                "tta_views": 1, "eval_seconds": 1.1, "pe": "geope"}))


def test_a_first_version_fold_is_not_pooled_with_a_fold_voted_by_logits(tmp_path, capsys):
    """A fold whose metrics.json records neither ``config`` nor ``vote`` was tested by summing softmax (every
    version before ``eval.vote`` did); pooled with a fold of today's ``logits`` it made one number of two test
    rules, exit 0 and no word. Now refused, naming both folds' rules and the fold to evaluate again."""
    run = tmp_path / "run"
    _first_version_fold(run, 1)
    _fold(run, 2, "data.augment=none", config_in_metrics=True)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "eval.vote (Area_1: 'softmax'; Area_2: 'logits')" in line, line
    assert line.endswith(f"; or evaluate Area_1 again by today's test (the published fragments): pointgeope evaluate "
                         f"{run / 'area_1'} eval.vote=logits eval.max_fragments=null"), line
    assert not (tmp_path / "out").exists()


def test_a_first_version_fold_is_not_pooled_with_todays_test_of_the_same_vote(tmp_path, capsys):
    """Every metrics.json without ``vote`` was written by a test over the first versions' fragments (each point in
    one fragment of at most one point per voxel; the published test's complete grid samples came in the commit that
    added ``vote``): a fold of today's test by ``eval.vote=softmax`` pooled with it silently, two protocols in one
    number. And where such folds were the more, the advice was to test today's fold by softmax, which then pooled.
    Now the protocols are named, and the advice is to test the first-version folds again, whatever their number."""
    run = tmp_path / "run"
    _first_version_fold(run, 1)
    _fold(run, 2, "data.augment=none", "eval.vote=softmax", "eval.max_fragments=3", config_in_metrics=True)
    assert cli(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "eval.protocol (Area_1: 'ptv1, fragments of the first versions'; Area_2: 'ptv1')" in line, line
    said = line.split("; or ")[0]   # the keys compared: Area_1 records no max_fragments, softmax its vote
    assert "eval.vote" not in said and "eval.max_fragments" not in said
    assert line.endswith(f"; or evaluate Area_1 again by today's test (the published fragments): pointgeope "
                         f"evaluate {run / 'area_1'} eval.vote=softmax eval.max_fragments=3"), line
    assert cli(["report", str(run), "--out", str(tmp_path / "out"), "--allow-mixed"]) == 0     # said, then pooled
    _first_version_fold(run, 3)
    _fold(run, 2, "data.augment=none", config_in_metrics=True)                     # two of before, one of logits
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"; or evaluate Area_1, Area_3 again by today's test (the published fragments): pointgeope "
                         f"evaluate {run / 'area_1'} eval.vote=logits eval.max_fragments=null ; pointgeope evaluate "
                         f"{run / 'area_3'} eval.vote=logits eval.max_fragments=null"), line
    _fold(run, 2, "model.planes=[16, 32, 64, 128, 256]", "data.augment=none", config_in_metrics=True)  # no evaluate
    # mends another network: no advice
    assert cli(["report", str(run), "--out", str(tmp_path / "out2")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "model.planes (" in line and line.endswith("differences written in the report"), line
    _first_version_fold(run, 2)                                                    # all of before: one protocol
    assert cli(["report", str(run), "--out", str(tmp_path / "out3")]) == 0
