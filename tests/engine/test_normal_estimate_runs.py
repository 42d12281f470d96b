"""The normal estimate a run of ``data.normal`` read (``normal_k``, ``normal_version``): recorded in its
checkpoints and metrics.json; ``evaluate`` and ``predict`` on files (or scans) of another estimate use them, the
same points, and say so in one line; a PTv1 run records none and never mentions normals."""
from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.data.normal_record import current
from pointgeope.engine.checkpoint import load_checkpoint


def _copy_root(root, to, version=None):
    """A copy of a prepared root; with ``version``, Area_1's rooms hold another estimate of their normals (other
    normals, ``normal_version`` = ``version``), as a newer estimator's prepare writes them."""
    to.mkdir(parents=True)
    for path in root.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    if version is not None:
        with h5py.File(to / "Area_1.h5", "r+") as f:
            for room in f.values():
                room["normal"][...] = -room["normal"][()]
                room.attrs["normal_version"] = version
    return to


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if "of another estimate" in line]


def _evaluate_on_another_estimate(run, two_folds, tmp_path):
    """``evaluate`` (exit 0) of a copy of the fold folder ``run``, ``<tmp_path>/run/area_1``, on a copy of the
    prepared root ``two_folds`` whose Area_1 holds another estimate of its normals (``normal_version`` 9);
    returns the copy."""
    copy = tmp_path / "run" / "area_1"
    shutil.copytree(run, copy)
    root = _copy_root(two_folds, tmp_path / "root", version=9)
    assert cli(["evaluate", str(copy), "--data-root", str(root)]) == 0
    return copy


def test_a_normal_run_records_the_estimate_it_read_and_ptv1_none(normal_run, tiny_run):
    read = {area: current() for area in ("Area_1", "Area_2", "Area_3")}
    assert load_checkpoint(normal_run / "last.pt")["data_normals"] == read
    assert json.loads((normal_run / "metrics.json").read_text())["data_normals"] == read
    assert "data_normals" not in load_checkpoint(tiny_run / "last.pt")
    assert "data_normals" not in json.loads((tiny_run / "metrics.json").read_text())


def test_evaluate_on_files_of_another_estimate_uses_them_and_says_so(normal_run, two_folds, tmp_path,
                                                                    capsys):
    """Before: the normals were part of the points checksum, so a file of the same points with another estimate
    of its normals was refused as other data (exit 2)."""
    capsys.readouterr()
    run = _evaluate_on_another_estimate(normal_run, two_folds, tmp_path)
    out = capsys.readouterr()
    k = current()["normal_k"]
    assert _warnings(out.out + out.err) == [
        f"warning: {run / 'last.pt'} read normals of another estimate than the files hold now (Area_1 k={k}, "
        f"version {current()['normal_version']} then, k={k}, version 9 now): the same points, other normals, so its "
        "scores on them may differ from those it was measured with; retrain it to use the estimate of the files now"]
    assert "of the same points" in out.out
    root = _copy_root(two_folds, tmp_path / "same")
    assert cli(["evaluate", str(run), "--data-root", str(root)]) == 0
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []


def test_predict_says_once_when_a_scans_normals_are_of_another_estimate(normal_run, two_folds, tmp_path,
                                                                      capsys, monkeypatch):
    import pointgeope.data.normals as normals

    root = _copy_root(two_folds, tmp_path / "root", version=9)
    argv = ["--out", str(tmp_path / "p"), "--max-fragments", "1", "--format", "npy"]
    assert cli(["predict", str(normal_run), str(root / "Area_1.h5"), *argv]) == 0
    out = capsys.readouterr()
    lines = _warnings(out.out + out.err)
    assert len(lines) == 1 and "(k=30, version 9) than " in lines[0], lines  # its rooms: one line
    assert cli(["predict", str(normal_run), str(two_folds / "Area_1.h5"), *argv, "--force"]) == 0
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []
    scans = []
    for seed in (1, 2):
        scans.append(tmp_path / f"scan{seed}.npy")
        np.save(scans[-1], np.random.default_rng(seed).random((200, 6)) * [3, 2, 2, 255, 255, 255])
    assert cli(["predict", str(normal_run), *map(str, scans), *argv]) == 0
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []  # estimated now, as the run's were
    monkeypatch.setattr(normals, "NORMAL_VERSION", 5)  # a newer estimator
    assert cli(["predict", str(normal_run), *map(str, scans), *argv]) == 0
    out = capsys.readouterr()
    lines = _warnings(out.out + out.err)
    assert len(lines) == 1 and f"{scans[0]}: its normals are of another estimate (k=30, version 5)" in lines[0], lines
    assert "skipped " not in out.out  # predicted again: the resume record names the estimate
    assert json.loads((tmp_path / "p" / "scan2_pred.json").read_text())["made_by"]["options"]["normal_version"] == 5


def test_a_ptv1_run_never_mentions_normals(tiny_run, two_folds, tmp_path, capsys):
    capsys.readouterr()
    _evaluate_on_another_estimate(tiny_run, two_folds, tmp_path)
    out = capsys.readouterr()
    assert "normal" not in (out.out + out.err).lower()


def test_metrics_record_the_estimate_of_the_test_files_evaluated(normal_run, two_folds, tmp_path):
    """metrics.json's data_normals name the normals its scores came from: the test area's as evaluated (another
    estimate than in training, which evaluate warns of), the training areas' as the checkpoint read them. It
    copied the checkpoint's, so the report said the fold's numbers came from the estimate of the training."""
    run = _evaluate_on_another_estimate(normal_run, two_folds, tmp_path)
    recorded = json.loads((run / "metrics.json").read_text())["data_normals"]
    assert recorded == {"Area_1": {**current(), "normal_version": 9}, "Area_2": current(), "Area_3": current()}
    assert load_checkpoint(run / "last.pt")["data_normals"]["Area_1"] == current()  # the training's, kept


def _start_of_training(root, tmp_path, monkeypatch, capsys) -> tuple[str, str]:
    """``train`` of fold 1 of ``root`` (PTv3, ``data.normal``) stopped right after the fold's checks (a refusal of
    its batch): what it printed and what its log.txt holds."""
    import pointgeope.engine.train as train
    from pointgeope.errors import UserError
    from tests.engine.test_ptv3_engine import train3

    monkeypatch.setattr(train, "batch_norm_problem", lambda *args: "stopped after the checks")
    capsys.readouterr()
    with pytest.raises(UserError, match=r"^stopped after the checks$"):
        train3(root, tmp_path / "run")
    out = capsys.readouterr()
    return out.out + out.err, (tmp_path / "run" / "area_1" / "log.txt").read_text()


def test_training_on_files_of_an_older_estimate_says_so_once(two_folds, tmp_path, monkeypatch, capsys):
    """Before: a data.normal run trained on an older prepare's normals without a word (and recorded them)."""
    root = _copy_root(two_folds, tmp_path / "root")
    with h5py.File(root / "Area_2.h5", "r+") as f:      # a prepare before normal_version: k alone (version 1)
        for room in f.values():
            del room.attrs["normal_version"]
    with h5py.File(root / "Area_3.h5", "r+") as f:      # one room of another estimate
        next(iter(f.values())).attrs["normal_version"] = 9
    (root / "manifest.json").write_text(json.dumps({"source": "/data/my raw", "checksums": {}}))
    printed, log = _start_of_training(root, tmp_path, monkeypatch, capsys)
    k, version = current()["normal_k"], current()["normal_version"]
    rooms = {area: len(h5py.File(root / f"{area}.h5", "r")) for area in ("Area_2", "Area_3")}
    line = (f"warning: {root}: Area_2.h5 ({rooms['Area_2']} of {rooms['Area_2']} rooms: k={k}, version 1 "
            f"(not recorded)); Area_3.h5 (1 of {rooms['Area_3']} rooms: k={k}, version 9) hold normals of another "
            f"estimate than this version's (k={k}, version {version}); training reads them as they are; "
            f"`pointgeope prepare '/data/my raw' {root}` estimates them again from the files' own coordinates "
            "(seconds per room, no raw file parsed again)")
    assert [x.split(" ", 2)[-1] for x in printed.splitlines() if "warning:" in x] == [line]
    assert [x.split(" ", 2)[-1] for x in log.splitlines() if "warning:" in x] == [line]


@pytest.mark.parametrize("older", [("Area_2",), ("Area_1", "Area_2")], ids=["one file", "two files"])
def test_the_older_estimate_warning_is_printed_once_a_command_and_logged_in_every_fold(two_folds, tmp_path,
                                                                                      capsys, older):
    """Before: each fold's checks printed it again (six identical lines for a 6-fold run); with several older
    files, each fold named them in its own order (its training areas first), so each printed it again."""
    import torch

    from pointgeope.data.folds import load_folds
    from pointgeope.engine.config import load_config
    from pointgeope.engine.distributed import DistEnv
    from pointgeope.engine.fold_check import check_fold
    from pointgeope.engine.runio import Log
    from tests.engine.test_ptv3_engine import PTV3_DEMO

    root = _copy_root(two_folds, tmp_path / "root")
    for area in older:
        with h5py.File(root / f"{area}.h5", "r+") as f:
            for room in f.values():
                room.attrs["normal_version"] = 9
    cfg = load_config(PTV3_DEMO, [f"data.root={root}"])
    env, said = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu")), set()
    folds, printed = load_folds(root), []
    for fold in sorted(load_folds(root)):
        check_fold(cfg, fold, folds, env, Log(tmp_path / f"log_{fold}.txt"), said)
        printed += [line for line in capsys.readouterr().out.splitlines() if "another estimate" in line]
        logged = (tmp_path / f"log_{fold}.txt").read_text().splitlines()
        assert len([line for line in logged if "another estimate" in line]) == 1, fold
    assert len(folds) >= 2 and len(printed) == 1


def test_training_on_current_files_or_without_normals_says_nothing_of_them(two_folds, tmp_path, monkeypatch,
                                                                          capsys):
    printed, log = _start_of_training(two_folds, tmp_path, monkeypatch, capsys)
    assert "estimate" not in printed and "estimate" not in log and "checked Area_2 (2 rooms)" in log


def test_the_older_estimate_warning_counts_one_room_in_the_singular(two_folds, tmp_path):
    from pointgeope.data.normal_record import not_current_line

    root = _copy_root(two_folds, tmp_path / "root")
    with h5py.File(root / "Area_2.h5", "r+") as f:
        for name in list(f)[1:]:
            del f[name]                 # one room left
        next(iter(f.values())).attrs["normal_version"] = 9
    k = current()["normal_k"]
    assert f"Area_2.h5 (1 of 1 room: k={k}, version 9) hold normals" in not_current_line(root, ["Area_2"])
