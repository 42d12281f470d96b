"""train, evaluate, viz and predict read the data root under pointgeope.lock.reader_lock: a prepare into it
meanwhile is refused (it used to replace Area_N.h5 under a running training, whose loader workers reopen the
files by path each epoch), and they are refused while a prepare writes it. viz and predict take it where they
read a prepared area file (Area_N.h5), not for a file of another name."""
from __future__ import annotations

import os
import shutil

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine import fold_runs
from pointgeope.h5 import list_rooms
from pointgeope.lock import folder_lock
from tests.engine.conftest import DEMO_CONFIG, TINY, train_fold


def _copy(tiny_root, root):
    root.mkdir()
    for name in ("Area_1.h5", "Area_2.h5", "manifest.json", "folds.json"):
        shutil.copy(tiny_root / name, root / name)
    return root


def test_a_prepare_into_the_data_root_of_a_running_training_is_refused(tiny_root, tmp_path, monkeypatch, capsys):
    root, raw = _copy(tiny_root, tmp_path / "root"), tiny_root.parent / "raw"
    before = {p.name: p.read_bytes() for p in root.glob("Area_*.h5")}
    codes = []

    def run_folds(cfg, test_area, env, force=False):  # stands for the epochs: a prepare starts meanwhile
        codes.append(cli(["prepare", str(raw), str(cfg.data.root)]))
        return []

    monkeypatch.setattr(fold_runs, "run_folds", run_folds)
    assert train_fold(root, tmp_path / "run") == 0
    assert codes == [2]
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"pointgeope prepare: error: {root} is being read by pid {os.getpid()} (`")
    assert line.endswith("`); wait for it to end, or write into another folder")
    assert {p.name: p.read_bytes() for p in root.glob("Area_*.h5")} == before  # nothing replaced
    assert cli(["prepare", str(raw), str(root)]) == 0  # once the training has ended


def test_train_and_evaluate_are_refused_while_a_prepare_writes_the_data_root(tiny_root, tiny_run, tmp_path, capsys):
    root = _copy(tiny_root, tmp_path / "root")
    with folder_lock(root, f"pointgeope prepare raw {root}", readers=True):
        assert cli(["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(root),
                    "--run-dir", str(tmp_path / "run"), *TINY]) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"pointgeope train: error: {root} is being written by pid {os.getpid()} on ")
        assert line.endswith(f"`pointgeope prepare raw {root}`; wait for it to end or stop it (its lock: "
                             f"{root / '.lock'})")
        assert not (tmp_path / "run").exists()
        assert cli(["evaluate", str(tiny_run), f"data.root={root}"]) == 2
        assert f"{root} is being written by pid {os.getpid()}" in capsys.readouterr().err


def _refused_prepare(raw, root, codes):
    """A prepare into ``root`` made while a command reads it: its exit code appended to ``codes``."""
    codes.append(cli(["prepare", str(raw), str(root)]))


def _read_by(pid_line: str, root) -> bool:
    return (pid_line.startswith(f"pointgeope prepare: error: {root} is being read by pid {os.getpid()} (`")
            and pid_line.endswith("`); wait for it to end, or write into another folder"))


def test_a_prepare_into_the_data_root_that_viz_reads_is_refused(tiny_root, tmp_path, monkeypatch, capsys):
    from pointgeope.viz import scene

    root, raw = _copy(tiny_root, tmp_path / "root"), tiny_root.parent / "raw"
    before, codes, load_room = (root / "Area_1.h5").read_bytes(), [], scene.load_room

    def reading_room(*args, **kwargs):  # a prepare starts while viz reads the room
        _refused_prepare(raw, root, codes)
        return load_room(*args, **kwargs)

    monkeypatch.setattr(scene, "load_room", reading_room)
    room = next(iter(list_rooms(root / "Area_1.h5")))
    assert cli(["viz", str(root / "Area_1.h5"), "--room", room, "--ply", str(tmp_path / "r.ply")]) == 0
    assert codes == [2] and _read_by(capsys.readouterr().err.strip().splitlines()[-1], root)
    assert (root / "Area_1.h5").read_bytes() == before and (tmp_path / "r.ply").is_file()


@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_prepare_into_the_data_root_that_predict_reads_is_refused(tiny_root, tiny_run, tmp_path, monkeypatch,
                                                                     capsys, given):
    from pointgeope.scans import sources

    root, raw = tmp_path / "root", tiny_root.parent / "raw"
    root.mkdir()
    shutil.copy(tiny_root / "Area_1.h5", root / "Area_1.h5")
    before, codes, read_scan = (root / "Area_1.h5").read_bytes(), [], sources.read_scan

    def reading_scan(ref, **kwargs):  # a prepare starts while predict reads each room
        _refused_prepare(raw, root, codes)
        return read_scan(ref, **kwargs)

    monkeypatch.setattr(sources, "read_scan", reading_scan)
    source = root / "Area_1.h5" if given == "file" else root
    assert cli(["predict", str(tiny_run), str(source), "--out", str(tmp_path / "o"), "--max-fragments", "1"]) == 0
    assert codes == [2, 2] and _read_by(capsys.readouterr().err.strip().splitlines()[-1], root)
    assert (root / "Area_1.h5").read_bytes() == before and len(list((tmp_path / "o").rglob("*_pred.npy"))) == 2


def test_viz_and_predict_are_refused_while_a_prepare_writes_the_data_root(tiny_root, tiny_run, tmp_path, capsys):
    root = _copy(tiny_root, tmp_path / "root")
    with folder_lock(root, f"pointgeope prepare raw {root}", readers=True):
        for argv in (["viz", str(root / "Area_1.h5"), "--list"],
                     ["predict", str(tiny_run), str(root / "Area_1.h5"), "--out", str(tmp_path / "o")]):
            assert cli(argv) == 2
            line = capsys.readouterr().err.strip().splitlines()[-1]
            assert line.startswith(f"pointgeope {argv[0]}: error: {root} is being written by pid {os.getpid()} on ")
        assert not (tmp_path / "o").exists()


def test_a_file_no_prepare_writes_is_read_without_the_lock(tiny_root, tiny_run, tmp_path):
    # a file under another name than prepare's (here a prepared area renamed, as predict --format h5 names
    # its outputs) is no data root: a writer of its folder does not stop the reading, and no lock file is
    # made beside it
    mine = tmp_path / "mine" / "office_pred.h5"
    mine.parent.mkdir()
    shutil.copy(tiny_root / "Area_1.h5", mine)
    with folder_lock(mine.parent, "a writer of the folder", readers=True):
        assert cli(["viz", str(mine), "--list"]) == 0
        assert cli(["predict", str(tiny_run), str(mine), "--out", str(tmp_path / "o"), "--max-fragments", "1"]) == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(mine, fresh / "office_pred.h5")
    assert cli(["viz", str(fresh / "office_pred.h5"), "--list"]) == 0
    assert cli(["predict", str(tiny_run), str(fresh), "--out", str(tmp_path / "o2"), "--max-fragments", "1"]) == 0
    assert sorted(p.name for p in fresh.iterdir()) == ["office_pred.h5"]


def test_train_is_refused_in_one_line_where_a_folder_stands_for_the_readers_lock(tiny_root, tmp_path, monkeypatch,
                                                                                 capsys):
    """It trained on the data root without the readers' lock, so a prepare into it was not refused."""
    root = _copy(tiny_root, tmp_path / "root")
    (root / ".readers.lock").mkdir()
    monkeypatch.setattr(fold_runs, "run_folds", lambda *args, **kwargs: pytest.fail("trained without the lock"))
    assert cli(["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(root),
                "--run-dir", str(tmp_path / "run"), *TINY]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"pointgeope train: error: {root / '.readers.lock'}: expected the lock file of {root}, found a folder; "
        "remove that folder (once no pointgeope command works there) and run again")
