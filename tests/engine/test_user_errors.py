"""Every expected mistake of a user ends in one line naming the file or key and what to do, exit code 2.

Each case runs the real command line (``pointgeope <command> ...``) and checks the exact line on stderr;
``--debug`` shows the traceback instead. The cases: a mistyped config key, missing or truncated data, a
fold without training rooms, an unusable checkpoint or predictions folder, damaged report inputs.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from pointgeope.cli import main as cli
from pointgeope.engine import build
from pointgeope.engine.checkpoint import save_checkpoint
from pointgeope.engine.config import ConfigError, config_to_dict, load_config, save_config
from pointgeope.lock import READERS_NAME
from tests.engine.conftest import DEMO_CONFIG, TINY, one_line


def train_args(root, run, *extra, fold="1"):
    return ["train", "--config", str(DEMO_CONFIG), "--test-area", fold, "--data-root", str(root),
            "--run-dir", str(run), *TINY, *extra]


def test_mistyped_config_key_suggests_the_closest(tmp_path, capsys, two_folds):
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, "optim.learning_rate=0.1"))
    assert line == ("pointgeope train: error: override 'optim.learning_rate=0.1': unknown key "
                    "'optim.learning_rate'; did you mean 'optim.lr'?")
    config = tmp_path / "mine.yaml"
    config.write_text("base: " + str(DEMO_CONFIG) + "\noptim:\n  learning_rate: 0.1\n")
    line = one_line(capsys, 2, ["train", "--config", str(config), "--cv"])
    assert line == f"pointgeope train: error: {config}:3: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?"
    assert not (tmp_path / "area_1").exists()


def test_missing_data_root_and_area_file(tmp_path, capsys, two_folds):
    line = one_line(capsys, 2, train_args(tmp_path / "nowhere", tmp_path / "run"))
    assert line == (f"pointgeope train: error: data root {tmp_path / 'nowhere'}: expected a folder of prepared "
                    "Area_N.h5 and folds.json, found nothing; set --data-root or data.root")
    root = tmp_path / "root"
    root.mkdir()
    (root / "Area_1.h5").symlink_to(two_folds / "Area_1.h5")
    (root / "folds.json").write_text(json.dumps({"version": 1, "folds": {"1": {"test": ["Area_1"],
                                                                             "train": ["Area_9"]}}}))
    line = one_line(capsys, 2, train_args(root, tmp_path / "run"))
    assert line == (f"pointgeope train: error: expected a prepared area file, found nothing at {root / 'Area_9.h5'}; "
                    "run `pointgeope prepare` or check data.root and folds.json")
    line = one_line(capsys, 2, train_args(root, tmp_path / "run", fold="7"))
    # the areas of this folds.json, not S3DIS's six (it named Area_2..Area_6, which are not there)
    assert line == (f"pointgeope train: error: --test-area 7: {root / 'folds.json'} has folds [1] (test areas "
                    "Area_1); pick one of them, or run `pointgeope prepare` on raw data that holds Area_7")


def test_fold_without_training_rooms(tmp_path, capsys, two_folds):
    (tmp_path / "Area_1.h5").symlink_to(two_folds / "Area_1.h5")
    (tmp_path / "folds.json").write_text(json.dumps({"version": 1, "folds": {"1": {"test": ["Area_1"], "train": []}}}))
    line = one_line(capsys, 2, train_args(tmp_path, tmp_path / "run"))
    assert line == (f"pointgeope train: error: fold 1: {tmp_path / 'folds.json'} lists no training area (it tests "
                    "on Area_1); prepare more than one area, or edit folds.json")


def test_a_truncated_manifest_is_named_before_training(tmp_path, capsys, tiny_root):
    """The audit's case: a room deleted from Area_2.h5 and manifest.json cut in half trained (exit 0), the
    broken manifest read as none, so the area file was not checked against its checksum."""
    import h5py

    root = _copy_root(tiny_root, tmp_path / "root")
    with h5py.File(root / "Area_2.h5", "r+") as f:
        del f["office_1"]
    text = (root / "manifest.json").read_text()
    (root / "manifest.json").write_text(text[: len(text) // 2])
    line = one_line(capsys, 2, train_args(root, tmp_path / "run"))
    assert line.startswith(f"pointgeope train: error: {root / 'manifest.json'}: not valid JSON (")
    assert line.endswith("); run `pointgeope prepare` again")
    assert not (tmp_path / "run" / "area_1" / "last.pt").exists()
    line = one_line(capsys, 2, ["viz", str(root / "Area_2.h5"), "--list"])
    assert line.startswith(f"pointgeope viz: error: {root / 'manifest.json'}: not valid JSON (")
    (root / "manifest.json").unlink()       # no manifest at all: allowed, the room count as the file has it
    assert cli(["viz", str(root / "Area_2.h5"), "--list"]) == 0


def test_truncated_area_file_is_named_before_the_first_epoch(tmp_path, capsys, two_folds):
    root = tmp_path / "root"
    shutil.copytree(two_folds, root)  # copies the files the links point to
    data = (root / "Area_3.h5").read_bytes()
    (root / "Area_3.h5").write_bytes(data[: len(data) // 2])
    line = one_line(capsys, 2, train_args(root, tmp_path / "run"))
    assert line.startswith(f"pointgeope train: error: {root / 'Area_3.h5'}: not a readable HDF5 file (")
    assert line.endswith("; it is truncated or corrupt: run `pointgeope prepare` again")
    assert not (tmp_path / "run" / "area_1" / "last.pt").exists()
    assert not (tmp_path / "run" / "area_1" / ".lock").exists()


def _fold_folder(tmp_path, root):
    """A fold folder as train leaves it after one epoch: config.yaml and last.pt of a tiny model."""
    run = tmp_path / "run" / "area_1"
    cfg = load_config(DEMO_CONFIG, TINY + [f"data.root={root}", f"train.run_dir={run.parent}"])
    save_config(cfg, run / "config.yaml")
    torch.manual_seed(0)
    save_checkpoint(run / "last.pt", {"config": config_to_dict(cfg),
                                      "model": build.model(cfg).state_dict(), "epoch": 1})
    return run


def test_evaluate_refuses_a_checkpoint_and_an_unwritable_predictions_folder(tmp_path, capsys, two_folds):
    run = _fold_folder(tmp_path, two_folds)
    (run / "predictions").write_text("a file where the folder goes")
    line = one_line(capsys, 2, ["evaluate", str(run)])
    assert line == (f"pointgeope evaluate: error: predictions folder {run / 'predictions'}: expected a folder, "
                    "found a file; remove it or give another folder name")
    (run / "predictions").unlink()
    (run / "last.pt").write_bytes(b"PK\x03\x04 truncated")
    line = one_line(capsys, 2, ["evaluate", str(run)])
    assert line.startswith(f"pointgeope evaluate: error: {run / 'last.pt'}: not a readable checkpoint (")
    line = one_line(capsys, 2, ["evaluate", str(run.parent)])
    assert line == (f"pointgeope evaluate: error: expected a fold folder named area_K (RUN/area_K), got {run.parent}; "
                    f"give a fold, e.g. {run} (its folds: area_1)")
    assert not (run / ".lock").exists()


def test_report_of_a_damaged_metrics_file_or_to_a_file(tmp_path, capsys):
    (tmp_path / "run" / "area_1").mkdir(parents=True)
    (tmp_path / "run" / "area_1" / "metrics.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    line = one_line(capsys, 2, ["report", str(tmp_path / "run")])
    assert line == (f"pointgeope report: error: {tmp_path / 'run/area_1/metrics.json'}: not a text file (damaged?); "
                    "evaluate the fold again (pointgeope evaluate RUN/area_K)")
    (tmp_path / "run" / "area_1" / "metrics.json").write_text('{"complete": true,')
    line = one_line(capsys, 2, ["report", str(tmp_path / "run")])
    assert line == (f"pointgeope report: error: {tmp_path / 'run/area_1/metrics.json'}:1: not valid JSON (Expecting "
                    "property name enclosed in double quotes); evaluate the fold again (pointgeope evaluate "
                    "RUN/area_K)")


def test_report_out_that_is_a_file(tmp_path, capsys):
    from tests.test_report import make_runs  # complete runs of made-up confusion matrices

    run, _ = make_runs(tmp_path)
    (tmp_path / "out").write_text("a file")
    line = one_line(capsys, 2, ["report", str(run), "--out", str(tmp_path / "out")])
    assert line == (f"pointgeope report: error: --out {tmp_path / 'out'}: expected a folder for the report, found a "
                    "file; give a folder name (it is created)")


def test_debug_shows_the_traceback(tmp_path, two_folds):
    with pytest.raises(ConfigError, match=re.escape("did you mean 'optim.lr'")):
        cli(["--debug", *train_args(two_folds, tmp_path, "optim.learning_rate=0.1")])
    with pytest.raises(ConfigError):
        cli([*train_args(two_folds, tmp_path, "optim.learning_rate=0.1"), "--debug"])


@pytest.mark.parametrize("override, message", [
    ("train.epochs=0", "train.epochs: expected an integer >= 1, got 0"),
    ("train.epochs=-1", "train.epochs: expected an integer >= 1, got -1"),  # was "expected a checkpoint..."
    ("data.loop=0", "data.loop: expected an integer >= 1, got 0"),
    ("data.batch_size=0", "data.batch_size: expected an integer >= 1, got 0"),
    ("data.grid_size=-0.1", "data.grid_size: expected a finite number >= 1e-06, got -0.1"),
    ("optim.lr=nan", "optim.lr: expected a finite number > 0, got nan"),
    ("model.planes=[8, 0]", "model.planes[1]: expected an integer >= 1, got 0"),
    ("train.epochs_per_run=0", "train.epochs_per_run: expected an integer >= 1, got 0"),  # trained nothing, exit 0
    ("train.device=xyz", "train.device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'xyz'"),
])
def test_a_value_out_of_its_range_is_one_line_naming_key_value_and_range(tmp_path, capsys, two_folds,
                                                                         override, message):
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, override))
    assert line == f"pointgeope train: error: override {override!r}: {message}"
    assert not (tmp_path / "area_1").exists()


def test_a_value_from_a_file_and_model_lists_of_other_lengths(tmp_path, capsys, two_folds):
    config = tmp_path / "mine.yaml"
    config.write_text(f"base: {DEMO_CONFIG}\ntrain:\n  epochs: 0\n")
    line = one_line(capsys, 2, ["train", "--config", str(config), "--cv"])
    assert line == f"pointgeope train: error: {config}:3: train.epochs: expected an integer >= 1, got 0"
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, "model.planes=[16, 32, 64]"))  # TINY: 2 stages
    assert line == (f"pointgeope train: error: {DEMO_CONFIG} with the overrides: model.blocks: expected one "
                    "entry per stage, 3 as in model.planes [16, 32, 64], got 2: [1, 1]")


def test_a_run_dir_or_report_out_that_cannot_be_a_folder(tmp_path, capsys, two_folds, tiny_run):
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    line = one_line(capsys, 2, train_args(two_folds, a_file))
    assert line == (f"pointgeope train: error: run folder (--run-dir, train.run_dir) {a_file}: expected a "
                    "folder, found a file; remove it or give another folder name")
    line = one_line(capsys, 2, train_args(two_folds, a_file / "run"))  # root writes anywhere: not chmod
    assert line == (f"pointgeope train: error: run folder (--run-dir, train.run_dir) {a_file / 'run'}: expected a "
                    f"folder, but {a_file} on its path is a file; remove it or give another folder name")
    line = one_line(capsys, 2, ["report", str(tiny_run.parent), "--out", str(a_file / "report")])
    assert line == (f"pointgeope report: error: report folder (--out) {a_file / 'report'}: expected a folder, but "
                    f"{a_file} on its path is a file; remove it or give another folder name")


def test_a_prepared_data_folder_as_the_run_folder_is_refused(tmp_path, capsys, two_folds):
    """`train --run-dir DATA` (the data folder itself, or a copy of one) trained and wrote area_1/ among the area
    files and folds.json. Refused in one line before anything is written; a folder with an area file alone too."""
    def refused(run, held):
        return (f"pointgeope train: error: run folder (--run-dir, train.run_dir) {run}: it holds {held}, a prepared "
                "data folder (pointgeope prepare's output), where the run's area_K/ folders would mix with the data: "
                f"give the run a folder of its own, e.g. --run-dir {run.parent / (run.name + '_runs')}")

    def files(folder):      # the reader lock train takes on its data folder (made by the first reader) aside
        return sorted(p.name for p in folder.iterdir() if p.name != READERS_NAME)

    before = files(two_folds)
    assert one_line(capsys, 2, train_args(two_folds, two_folds)) == refused(two_folds, "folds.json")
    assert files(two_folds) == before
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(two_folds / "Area_3.h5", other / "Area_3.h5")
    assert one_line(capsys, 2, train_args(two_folds, other)) == refused(other, "Area_3.h5")
    assert sorted(p.name for p in other.iterdir()) == ["Area_3.h5"]


def test_a_data_folder_refused_as_the_run_folder_names_how_to_move_its_fold_folders(tmp_path, capsys, two_folds,
                                                                                    tiny_run):
    """A data folder that a training wrote area_K/ into (before train refused such a folder) was refused with
    another --run-dir to give, and no word of the folds trained there: they were left behind, trained again.
    The line names them, in their order, and the command that moves them; the moved fold is then skipped as
    complete under the proposed folder."""
    data = tmp_path / "data"
    shutil.copytree(two_folds, data, ignore=shutil.ignore_patterns(READERS_NAME, ".lock"))
    shutil.copytree(tiny_run, data / "area_1")
    (data / "area_10").mkdir()
    (data / "area_2").mkdir()
    line = one_line(capsys, 2, train_args(data, data, "train.epochs=1", "train.val_every=1"))
    runs = tmp_path / "data_runs"
    assert line.endswith(f"e.g. --run-dir {runs}; the fold folders trained in it (area_1/, area_2/, area_10/) are "
                         f"resumed or skipped there once moved: mkdir -p {runs} && mv {data / 'area_1'} "
                         f"{data / 'area_2'} {data / 'area_10'} {runs}/")
    subprocess.run(line.split(" once moved: ")[1], shell=True, check=True)
    assert sorted(p.name for p in runs.iterdir()) == ["area_1", "area_10", "area_2"]
    assert cli(train_args(data, runs, "train.epochs=1", "train.val_every=1")) == 0
    assert f"fold 1: {runs / 'area_1' / 'metrics.json'} is complete, skipped" in capsys.readouterr().out


def test_a_run_folder_that_cannot_be_searched_is_named_in_one_line(tmp_path, capsys, two_folds, monkeypatch):
    """Another user's folder (mode 0700) as --run-dir: its entries cannot be looked at (EACCES), nor can a file
    be made in it. Root reads anywhere, so both are simulated for that folder alone. The look for prepared
    data in it raised PermissionError (a traceback) before the writable-folder check could say it."""
    import pathlib
    import tempfile

    run = tmp_path / "theirs"
    run.mkdir()
    denied = PermissionError(13, "Permission denied")
    stat, temporary = pathlib.Path.stat, tempfile.TemporaryFile

    def no_search(self, *args, **kwargs):
        if self.parent == run:
            raise denied
        return stat(self, *args, **kwargs)

    def no_write(*args, **kwargs):
        if Path(kwargs.get("dir") or "") == run:
            raise denied
        return temporary(*args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "stat", no_search)
    monkeypatch.setattr(tempfile, "TemporaryFile", no_write)
    assert one_line(capsys, 2, train_args(two_folds, run)) == (
        f"pointgeope train: error: run folder (--run-dir, train.run_dir) {run}: cannot write into it (Permission "
        "denied); make it writable or give a folder you can write")


def test_a_checkpoint_without_its_config(tmp_path, capsys, tiny_run):
    ckpt = torch.load(tiny_run / "last.pt", weights_only=True)
    del ckpt["config"]
    path = tmp_path / "no_config.pt"
    torch.save(ckpt, path)
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((100, 3), dtype=np.float32))
    line = one_line(capsys, 2, ["predict", str(path), str(scan), "--out", str(tmp_path / "pred")])
    message = f"{path}: expected a model checkpoint with a config (last.pt or best.pt of a run), got one without"
    assert line == f"pointgeope predict: error: {message}"
    run = tmp_path / "run/area_1"  # evaluate (and a resume) of a fold whose last.pt has no config
    shutil.copytree(tiny_run, run)
    shutil.copy(path, run / "last.pt")
    line = one_line(capsys, 2, ["evaluate", str(run)])
    assert line == f"pointgeope evaluate: error: {message.replace(str(path), str(run / 'last.pt'))}"


def _copy_root(root, to):
    """A copy of a prepared root (its files, not the links to them), to change without touching it."""
    to.mkdir(parents=True)
    for path in root.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


def _edit_room(path, room, **arrays):
    """Replace arrays of one room of an area file in place (as a hand edit would)."""
    import h5py

    with h5py.File(path, "r+") as f:
        for key, value in arrays.items():
            del f[room][key]
            f[room].create_dataset(key, data=value)


def test_evaluate_checks_the_data_it_reads_as_training_does(tmp_path, capsys, two_folds, tiny_run):
    """evaluate scored what data.root held: labels changed in a copy gave other metrics marked complete
    (exit 0), a NaN coordinate ended in IndexError: index 4294967295, a room of 0 points in a ValueError."""
    from pointgeope.h5 import read_room

    run = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, run)
    metrics = (run / "metrics.json").read_bytes()
    root = _copy_root(two_folds, tmp_path / "root")
    label = read_room(root / "Area_1.h5", "office_1")["label"]
    _edit_room(root / "Area_1.h5", "office_1", label=(label + 1) % 13)
    line = one_line(capsys, 2, ["evaluate", str(run), "--data-root", str(root)])
    assert line.startswith(f"pointgeope evaluate: error: {run / 'last.pt'} was trained on other data than {root} "
                           "holds now (Area_1.h5 trained on sha256:")
    coord = read_room(root / "Area_1.h5", "office_1")["coord"]
    coord[5, 1] = np.nan
    _edit_room(root / "Area_1.h5", "office_1", coord=coord)
    line = one_line(capsys, 2, ["evaluate", str(run), "--data-root", str(root)])
    assert line == (f"pointgeope evaluate: error: {root / 'Area_1.h5'}: room 'office_1': 1 point with a "
                    f"non-finite coordinate, the first point 5: {coord[5].tolist()}; run `pointgeope prepare` again")
    _edit_room(root / "Area_1.h5", "office_1", coord=np.zeros((0, 3), np.float32), color=np.zeros((0, 3), np.uint8),
               label=np.zeros(0, np.uint8), instance=np.zeros(0, np.int32))
    line = one_line(capsys, 2, ["evaluate", str(run), "--data-root", str(root)])
    assert line == (f"pointgeope evaluate: error: {root / 'Area_1.h5'}: room 'office_1': holds no point; run "
                    "`pointgeope prepare` again")
    assert (run / "metrics.json").read_bytes() == metrics and not (run / ".lock").exists()


def test_evaluate_uses_the_same_points_prepared_from_another_path(tmp_path, capsys, two_folds, tiny_run):
    """The same raw data prepared from a moved folder (or its zip) differs only in the rooms' source and
    signature attributes: evaluate refused it as other data. The checkpoint records its points' checksums."""
    import h5py

    from pointgeope.checksum import points_checksum
    from pointgeope.engine.checkpoint import load_checkpoint

    run = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, run)
    assert load_checkpoint(run / "last.pt")["data_points"] == {
        a: points_checksum(two_folds / f"{a}.h5") for a in ("Area_1", "Area_2", "Area_3")}
    root = _copy_root(two_folds, tmp_path / "root")
    with h5py.File(root / "Area_1.h5", "r+") as f:
        for room in f.values():
            room.attrs["source"], room.attrs["signature"] = "/moved/Area_1/room", "0" * 40
    assert cli(["evaluate", str(run), "--data-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert (f"note: {run / 'last.pt'} trained on other files than {root} holds now (Area_1.h5 trained on sha256:"
            in out and "), of the same points: only where they were prepared from differs" in out), out
    recorded = json.loads((run / "metrics.json").read_text())["data_points"]["Area_1"]
    assert recorded == points_checksum(root / "Area_1.h5")
