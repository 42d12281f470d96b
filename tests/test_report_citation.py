"""pointgeope/report/citation.py: report.md's "What made the numbers" and report.json's ``made_by``: the code,
config, data and machines a reader needs to cite and reproduce each run's numbers."""
from __future__ import annotations

import hashlib
import json

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.config import config_to_dict, load_config
from tests.test_report import perfect, write_fold

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # they read no figure

COMMIT = "5e1c1896a8d84bf745915e7b9d75fd5f38530a6f"
POINTS = {f"Area_{k}": f"points:sha256:{k:064x}" for k in range(1, 7)}
CPU = {"device": "cpu", "processes": 1, "threads": 1, "precision": "float32", "torch": "2.13.0"}


def _run(root, name, *overrides, code=None, trained_code=None):
    """Six complete folds recording what evaluate records: config (defaults with ``overrides``), the points
    checksums, the test's code (``code``: ``{k: (version, commit)}``, default 0.2.0 at COMMIT), the machines
    and the training's code in them (``trained_code``: ``{k: [(version, commit), ...]}``, default the test's)."""
    run = root / name
    for k in range(1, 7):
        write_fold(run, k, perfect())
        path = run / f"area_{k}" / "metrics.json"
        version, commit = (code or {}).get(k, ("0.2.0", COMMIT))
        trained = [{**CPU, "pointgeope": v, "pointgeope_commit": c}
                   for v, c in (trained_code or {}).get(k, [(version, commit)])]
        extra = {"config": config_to_dict(load_config(None, list(overrides))), "data_points": POINTS,
                 "trained_on": trained, "tested_on": CPU, "pointgeope": version, "pointgeope_commit": commit}
        path.write_text(json.dumps({**json.loads(path.read_text()), **{k: v for k, v in extra.items()
                                                                       if v is not None}}))
    return run


def _report(tmp_path, capsys, *runs) -> tuple[str, list[dict]]:
    out = tmp_path / "out"
    assert cli(["report", *map(str, runs), "--out", str(out)]) == 0
    capsys.readouterr()
    md = (out / "report.md").read_text()
    return md.split("## What made the numbers\n", 1)[1].split("## Per fold", 1)[0], \
        [run["made_by"] for run in json.loads((out / "report.json").read_text())["runs"]]


def test_each_run_says_its_code_config_data_and_machines(tmp_path, capsys):
    """Before: report.md named the runs' folders alone: no commit, no config, no data, no machine."""
    run = _run(tmp_path, "geope", "model.pe=geope", "eval.max_fragments=2", "train.epochs=5")
    block, (made,) = _report(tmp_path, capsys, run)
    lines = [line for line in block.strip().splitlines() if line]
    assert lines[0] == "### geope (6 folds)"
    assert lines[1] == "- code: pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test)"
    assert lines[2].startswith(f"- config: {made['config_sha256'][:23]} of the compared settings")
    assert "model.pe `geope`, train.epochs `5`, train.seed `0`" in lines[2]
    assert "eval.max_fragments `2`" in lines[2]   # a test that is not the published one is said
    digest = "sha256:" + hashlib.sha256("".join(f"Area_{k} {POINTS[f'Area_{k}']}\n" for k in range(1, 7))
                                        .encode()).hexdigest()
    assert made["data"] == {"kind": "points", "sha256": digest, "areas": [f"Area_{k}" for k in range(1, 7)]}
    assert lines[3] == f"- data: points {digest[:23]} of Area_1..Area_6"
    assert lines[4] == ("- machines: trained on device cpu, precision float32, DDP processes 1, CPU threads 1, torch "
                        "2.13.0; tested on device cpu, precision float32, DDP processes 1, CPU threads 1, torch 2.13.0")
    assert made["settings"]["model.pe"] == "geope"
    assert made["code"]["Area_3"] == "pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test)"


def test_the_config_hash_is_one_method_s_and_protocol_s(tmp_path, capsys):
    """Runs of one method and protocol that differ in place, speed, folder or seed show one hash; another
    encoding or test shows another."""
    runs = [_run(tmp_path, "a"), _run(tmp_path, "b", "train.seed=3", "train.device=cpu", "data.num_workers=0",
                                      "train.run_dir=/x", "data.root=/elsewhere"),
            _run(tmp_path, "c", "model.pe=geope"), _run(tmp_path, "d", "eval.vote=softmax")]
    _, made = _report(tmp_path, capsys, *runs)
    hashes = [m["config_sha256"] for m in made]
    assert hashes[0] == hashes[1] and len(set(hashes)) == 3


def test_folds_of_other_code_are_named_and_an_older_fold_says_not_recorded(tmp_path, capsys):
    """Fold 5 tested by another commit than it trained with; fold 4 resumed under another commit; fold 6 of an
    older version (no code anywhere). Before: report.md said no code at all."""
    a, b = ("0.2.0", COMMIT), ("0.2.1", "a" * 40)
    run = _run(tmp_path, "geope", code={5: b, 6: (None, None)}, trained_code={4: [a, b, b], 5: [a], 6: [(None, None)]})
    block, (made,) = _report(tmp_path, capsys, run)
    assert block.strip().splitlines()[2] == (
        "- code: Area_1..Area_3: pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test); Area_4: pointgeope "
        "0.2.0, commit 5e1c1896a8d8, then pointgeope 0.2.1, commit aaaaaaaaaaaa (training); pointgeope 0.2.0, "
        "commit 5e1c1896a8d8 (test); Area_5: pointgeope 0.2.0, commit 5e1c1896a8d8 (training); pointgeope 0.2.1, "
        "commit aaaaaaaaaaaa (test); Area_6: not recorded")
    assert made["code"]["Area_6"] == "not recorded"


def test_a_run_that_records_nothing_says_so(tmp_path, capsys):
    run = tmp_path / "old"
    for k in range(1, 7):
        write_fold(run, k, perfect())
    block, (made,) = _report(tmp_path, capsys, run)
    assert block.strip().splitlines()[2:] == ["- code: not recorded", "- config: not recorded",
                                              "- data: not recorded", "- machines: not recorded"]
    assert made["config_sha256"] is None and made["data"] is None


def test_a_training_begun_by_an_older_version_is_not_cited_as_this_commit_s(tmp_path, capsys):
    """Fold 2 began training under an older version (its checkpoint's first ``trained_on`` entry holds the
    thread count alone) and was resumed and tested under COMMIT; fold 3's checkpoint is entirely older (tested
    under COMMIT). Before: fold 2 read ``... (training and test)``, as if COMMIT had trained it all, and fold 3
    named the test's code alone."""
    run = _run(tmp_path, "geope")
    now = {**CPU, "pointgeope": "0.2.0", "pointgeope_commit": COMMIT}
    for k, trained in ((2, [{"threads": 1}, now]), (3, [{"threads": 1}])):
        path = run / f"area_{k}" / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "trained_on": trained}))
    _, (made,) = _report(tmp_path, capsys, run)
    assert made["code"]["Area_1"] == "pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test)"
    assert made["code"]["Area_2"] == ("not recorded, then pointgeope 0.2.0, commit 5e1c1896a8d8 (training); "
                                      "pointgeope 0.2.0, commit 5e1c1896a8d8 (test)")
    assert made["code"]["Area_3"] == "not recorded (training); pointgeope 0.2.0, commit 5e1c1896a8d8 (test)"


def test_code_edited_after_its_commit_is_not_cited_as_that_commit(tmp_path, capsys):
    """Folds trained or tested by a clone whose code differed from its commit (``"pointgeope_modified": true``,
    :mod:`pointgeope.provenance`) read ``with uncommitted changes``; ``false`` and an older record without the
    key read as the commit. Before: every fold read ``commit 5e1c1896a8d8 (training and test)``, which a reader
    would check out to reproduce numbers that commit does not give."""
    run = _run(tmp_path, "geope")
    for k, trained, tested in ((1, True, True), (2, True, False), (3, False, False)):
        path = run / f"area_{k}" / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["trained_on"] = [{**e, "pointgeope_modified": trained} for e in metrics["trained_on"]]
        path.write_text(json.dumps({**metrics, "pointgeope_modified": tested}))
    _, (made,) = _report(tmp_path, capsys, run)
    assert made["code"]["Area_1"] == ("pointgeope 0.2.0, commit 5e1c1896a8d8 with uncommitted changes "
                                      "(training and test)")
    assert made["code"]["Area_2"] == ("pointgeope 0.2.0, commit 5e1c1896a8d8 with uncommitted changes (training); "
                                      "pointgeope 0.2.0, commit 5e1c1896a8d8 (test)")
    assert made["code"]["Area_3"] == made["code"]["Area_4"] == \
        "pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test)"


def test_a_damaged_version_or_commit_is_said_on_one_line_and_marked(tmp_path, capsys):
    """A hand-edited metrics.json whose version holds a newline, or whose commit is no hex digits: each said as
    repr writes it (one line), marked (looks damaged); a commit of hex digits is cut to 12 as before. Before:
    the newline split report.md's ``- code`` item into a second item ``- injected``."""
    run = _run(tmp_path, "geope", code={2: ("0.2.0\n- injected", COMMIT), 3: ("0.2.0", "HEAD\n- injected")})
    text, (made,) = _report(tmp_path, capsys, run)
    assert not any(line.startswith("- injected") for line in text.splitlines())
    assert made["code"]["Area_1"] == "pointgeope 0.2.0, commit 5e1c1896a8d8 (training and test)"
    assert made["code"]["Area_2"] == ("pointgeope '0.2.0\\n- injected' (looks damaged), commit 5e1c1896a8d8 "
                                      "(training and test)")
    assert made["code"]["Area_3"] == ("pointgeope 0.2.0, commit 'HEAD\\n- injected' (looks damaged) "
                                      "(training and test)")


def test_a_damaged_setting_is_said_on_one_line_and_marked(tmp_path, capsys):
    """A hand-edited metrics.json whose config holds a newline in ``model.pe``: the runs' difference and the
    config's line each say it as repr writes it, marked (looks damaged); a sound setting as an override writes
    it. Before: the newline split both into a second list item ``- injected``."""
    sound, edited = _run(tmp_path, "a"), _run(tmp_path, "b")
    for k in range(1, 7):
        path = edited / f"area_{k}" / "metrics.json"
        metrics = json.loads(path.read_text())
        metrics["config"]["model"]["pe"] = "rpe\n- injected"
        path.write_text(json.dumps(metrics))
    assert cli(["report", str(sound), str(edited), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    lines = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert not any(line.startswith("- injected") for line in lines)
    assert "- the runs were trained or tested with one setting apart: `model.pe` (a `rpe`; b `'rpe\\n- injected' " \
           "(looks damaged)`)." in lines
    assert [line.split("; ", 1)[1].split(", train.")[0] for line in lines if line.startswith("- config: ")] == [
        "model.backbone `ptv1`, model.pe `rpe`", "model.backbone `ptv1`, model.pe `'rpe\\n- injected' (looks damaged)`"]
