"""A run of ``data.normal`` whose files held normals of several estimates: an area whose rooms hold several (each
recorded with the rooms that hold it), and a training resumed on files of another estimate (the estimates recorded
in order, with the step where it changed); evaluate, predict and report compare and name them."""
from __future__ import annotations

import json
import shutil

import h5py
import pytest

from pointgeope.cli import main as cli
from pointgeope.data import normal_record
from pointgeope.data.normal_record import current
from pointgeope.engine.checkpoint import load_checkpoint
from tests.engine.test_ptv3_engine import train3

K, VERSION = current()["normal_k"], current()["normal_version"]


def _root(two_folds, to, versions: dict[str, dict[int, int]] | None = None):
    """A copy of the prepared ``two_folds`` (its files, not links); ``versions``: area -> {room index (in name
    order): normal_version} for rooms that hold another estimate."""
    to.mkdir(parents=True)
    for path in two_folds.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    set_versions(to, versions or {})
    return to


def set_versions(root, versions: dict[str, dict[int, int]]) -> None:
    for area, rooms in versions.items():
        with h5py.File(root / f"{area}.h5", "r+") as f:
            for index, version in rooms.items():
                f[sorted(f)[index]].attrs["normal_version"] = version


def _rooms(root, area) -> list[str]:
    with h5py.File(root / f"{area}.h5", "r") as f:
        return sorted(f)


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if "another estimate" in line]


def test_an_area_whose_rooms_hold_several_estimates_is_recorded_with_the_rooms_of_each(two_folds, tmp_path):
    """Before: such an area was recorded as ``None`` (no estimate), and no later command could compare it."""
    root = _root(two_folds, tmp_path / "root", {"Area_3": {0: 9}})
    rooms = _rooms(root, "Area_3")
    several = [{"normal_k": K, "normal_version": VERSION, "rooms": rooms[1:]},
               {"normal_k": K, "normal_version": 9, "rooms": rooms[:1]}]
    assert len(rooms) == 2 and VERSION < 9
    assert normal_record.area_estimates(root, ["Area_2", "Area_3"]) == {"Area_2": current(), "Area_3": several}
    assert normal_record.describe(several) == f"k={K}, version {VERSION} in 1 room and k={K}, version 9 in 1 room"
    ckpt = {"config": {"data": {"normal": True}}, "data_normals": {"Area_2": current(), "Area_3": several,
                                                                   "Area_1": [{"normal_k": "30"}], "Area_4": None}}
    assert normal_record.recorded(ckpt) == {"Area_2": current(), "Area_3": several}   # a damaged entry left out
    assert normal_record.differing_line("last.pt", normal_record.recorded(ckpt), {"Area_3": current()}) == (
        f"warning: last.pt read normals of another estimate than the files hold now (Area_3 k={K}, version {VERSION} "
        f"in 1 room and k={K}, version 9 in 1 room then, k={K}, version {VERSION} now): the same points, other "
        "normals, so its scores on them may differ from those it was measured with; retrain it to use the estimate "
        "of the files now")
    assert normal_record.differing_line("last.pt", normal_record.recorded(ckpt), {"Area_3": several}) is None
    set_versions(root, {"Area_3": {0: 9, 1: 9}})
    assert normal_record.area_estimates(root, ["Area_3"]) == {"Area_3": {"normal_k": K, "normal_version": 9}}


def test_the_estimates_read_in_turn_are_said_in_order_with_the_point_each_was_read_until():
    v = [{"normal_k": 30, "normal_version": n} for n in range(4)]
    earlier = [{"data_normals": {"Area_2": v[1], "Area_3": v[1]}, "until": {"epoch": 0, "batch": 1, "step": 1}},
               {"data_normals": {"Area_2": v[2], "Area_3": v[1]}, "until": {"epoch": 2, "batch": 0, "step": 5}}]
    assert normal_record.read_text("Area_2", v[3], earlier) == ("k=30, version 1 until batch 1 of epoch 1 (step 1), "
                                                                "then k=30, version 2 until epoch 2 (step 5), "
                                                                "then k=30, version 3")
    assert normal_record.read_text("Area_3", v[3], earlier) == ("k=30, version 1 until epoch 2 (step 5), "
                                                                "then k=30, version 3")
    assert normal_record.read_text("Area_3", v[1], earlier) == "k=30, version 1"      # one throughout
    assert normal_record.read_text("Area_3", v[1], []) == "k=30, version 1"
    assert normal_record.earlier_of({"data_normals_earlier": [*earlier, {"until": {}}, "x"]}) == earlier
    assert normal_record.earlier_of({"data_normals_earlier": {"x": 1}}) == []


def test_a_run_on_an_area_of_several_estimates_records_them_and_later_commands_compare_them(two_folds, tmp_path,
                                                                                           capsys):
    root = _root(two_folds, tmp_path / "root", {"Area_1": {0: 9}})
    rooms = _rooms(root, "Area_1")
    several = [{"normal_k": K, "normal_version": VERSION, "rooms": rooms[1:]},
               {"normal_k": K, "normal_version": 9, "rooms": rooms[:1]}]
    assert train3(root, tmp_path / "run") == 0
    run = tmp_path / "run" / "area_1"
    read = {"Area_1": several, "Area_2": current(), "Area_3": current()}
    assert load_checkpoint(run / "last.pt")["data_normals"] == read
    assert json.loads((run / "metrics.json").read_text())["data_normals"] == read
    capsys.readouterr()
    assert cli(["evaluate", str(run)]) == 0                     # the same files: nothing to say
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []
    other = _root(two_folds, tmp_path / "other")                # Area_1's rooms all of this version's estimate
    assert cli(["evaluate", str(run), "--data-root", str(other)]) == 0
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == [
        f"warning: {run / 'last.pt'} read normals of another estimate than the files hold now (Area_1 k={K}, version "
        f"{VERSION} in 1 room and k={K}, version 9 in 1 room then, k={K}, version {VERSION} now): the same points, "
        "other normals, so its scores on them may differ from those it was measured with; retrain it to use the "
        "estimate of the files now"]
    argv = ["--out", str(tmp_path / "p"), "--max-fragments", "1", "--format", "npy", "--force"]
    assert cli(["predict", str(run), str(other / "Area_1.h5"), *argv]) == 0     # an estimate it read
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []
    set_versions(other, {"Area_1": {0: 7, 1: 7}})
    assert cli(["predict", str(run), str(other / "Area_1.h5"), *argv]) == 0     # one it never read
    out = capsys.readouterr()
    lines = _warnings(out.out + out.err)
    assert len(lines) == 1 and (f"its normals are of another estimate (k={K}, version 7) than {run / 'last.pt'}'s run "
                                f"read in training (k={K}, version {VERSION}; k={K}, version 9)") in lines[0], lines


MORE = ["train.epochs=3", "train.epochs_per_run=1"]


@pytest.fixture(scope="module")
def two_epochs_of_three(two_folds, tmp_path_factory):
    """A copy of ``two_folds`` and a run of ``train.epochs=3`` trained two epochs on it, one a command (the
    second on the same files): what both cases of the resume test start from, trained once; each copies it
    (data.root and the run folder may move: free keys, and the copies' checksums are the files')."""
    base = tmp_path_factory.mktemp("two_epochs_of_three")
    root = _root(two_folds, base / "root")
    assert train3(root, base / "run", *MORE) == 0               # epoch 1
    assert train3(root, base / "run", *MORE) == 0               # epoch 2, the same files
    return base


@pytest.mark.parametrize("changed", [False, True], ids=["same estimate", "another estimate"])
def test_a_training_resumed_on_files_of_another_estimate_records_both_and_report_says_so(two_epochs_of_three,
                                                                                        tmp_path, capsys, changed,
                                                                                        figures_not_drawn):
    """Before: the checkpoint and metrics.json recorded the later estimate alone (only log.txt's resume warning
    said the first one had been read), so the report named one estimate for a network trained on two. (The
    report's notes are read, never its figures: not drawn.)"""
    root, runs = tmp_path / "root", tmp_path / "run"
    shutil.copytree(two_epochs_of_three / "root", root)
    shutil.copytree(two_epochs_of_three / "run", runs)
    more = MORE
    if changed:
        set_versions(root, {"Area_2": {0: 9, 1: 9}})            # a training area's normals estimated again
    assert train3(root, runs, *more) == 0                       # epoch 3
    run = runs / "area_1"
    ckpt, metrics = load_checkpoint(run / "last.pt"), json.loads((run / "metrics.json").read_text())
    assert (ckpt["epoch"], metrics["complete"]) == (3, True)
    now = {"Area_1": current(), "Area_2": {"normal_k": K, "normal_version": 9 if changed else VERSION},
           "Area_3": current()}
    assert ckpt["data_normals"] == now and metrics["data_normals"] == now
    steps = ckpt["step"] // 3                                   # the steps of one epoch
    earlier = [{"data_normals": {a: current() for a in now}, "until": {"epoch": 2, "batch": 0, "step": 2 * steps}}]
    assert ckpt.get("data_normals_earlier") == (earlier if changed else None)
    assert metrics.get("data_normals_earlier") == (earlier if changed else None)
    resumes = [line.split(" ", 2)[-1] for line in (run / "log.txt").read_text().splitlines()
               if "read normals of another estimate" in line]
    assert resumes == ([f"warning: {run / 'last.pt'} read normals of another estimate than the files hold now (Area_2 "
                        f"k={K}, version {VERSION} then, k={K}, version 9 now): the same points, other normals; "
                        "training goes on with those of the files now, and its checkpoints record both "
                        "(data_normals_earlier); `pointgeope train --force` trains the fold on one estimate from "
                        "scratch"] if changed else [])
    capsys.readouterr()
    assert cli(["report", str(runs), "--out", str(tmp_path / "out")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "normal" in line]
    assert notes == ([f"note: {runs}: fold Area_1 was resumed on files of another normal estimate, so its network "
                      f"trained on the normals of both: Area_2's k={K}, version {VERSION} until epoch 2 "
                      f"(step {2 * steps}), then k={K}, version 9"] if changed else [])


def test_predict_takes_the_estimates_a_resumed_training_read_earlier_as_read(two_folds, tmp_path, capsys):
    """A training that read this version's estimate of every area, then resumed on files of another (version 9):
    a scan of this version's estimate is one it read (until the resume), so predict has nothing to say of it; a
    scan of an estimate it never read names both. Before: predict took the last estimate alone as read, and said
    of a scan of the first that the run had read only version 9 in training."""
    root, runs = _root(two_folds, tmp_path / "root"), tmp_path / "run"
    more = MORE             # epochs 1 and 2 of 3: the fold's test (PTv3's ten views) after a third is not needed
    assert train3(root, runs, *more) == 0
    set_versions(root, {area: {0: 9, 1: 9} for area in ("Area_1", "Area_2", "Area_3")})
    assert train3(root, runs, *more) == 0
    run = runs / "area_1"
    assert [e["data_normals"] for e in load_checkpoint(run / "last.pt")["data_normals_earlier"]] == [
        {area: current() for area in ("Area_1", "Area_2", "Area_3")}]
    scans = _root(two_folds, tmp_path / "scans")                # this version's estimate: read until the resume
    argv = ["--out", str(tmp_path / "p"), "--max-fragments", "1", "--format", "npy", "--force"]
    capsys.readouterr()
    assert cli(["predict", str(run), str(scans / "Area_1.h5"), *argv]) == 0
    out = capsys.readouterr()
    assert _warnings(out.out + out.err) == []
    set_versions(scans, {"Area_1": {0: 7, 1: 7}})               # one it never read
    assert cli(["predict", str(run), str(scans / "Area_1.h5"), *argv]) == 0
    out = capsys.readouterr()
    lines = _warnings(out.out + out.err)
    assert len(lines) == 1 and (f"its normals are of another estimate (k={K}, version 7) than {run / 'last.pt'}'s run "
                                f"read in training (k={K}, version {VERSION}; k={K}, version 9)") in lines[0], lines


@pytest.mark.parametrize("until", [{"epoch": True, "batch": 1, "step": 3}, {"epoch": 2, "batch": False, "step": 3},
                                   {"epoch": 2, "batch": 0, "step": True}])
def test_a_record_of_a_bool_for_a_count_is_left_out_as_an_estimate_of_a_bool_is(until):
    """A true where an epoch, batch or step count was (a hand-edited record) is no count, as it is no ``normal_k``:
    both left out. Before: earlier_of kept it, and read_text said "until batch 1 of epoch 2" of ``"epoch": true``."""
    v = {"normal_k": 30, "normal_version": 1}
    earlier = [{"data_normals": {"Area_2": v}, "until": until}]
    assert normal_record.earlier_of({"data_normals_earlier": earlier}) == []
    assert normal_record.read_text("Area_2", {"normal_k": 30, "normal_version": 2},
                                   normal_record.earlier_of({"data_normals_earlier": earlier})) == "k=30, version 2"
    assert normal_record.estimates_in(normal_record.recorded({"config": {"data": {"normal": True}},
                                                              "data_normals": {"Area_2": {**v, "normal_k": True}}}
                                                             ).get("Area_2")) == []
