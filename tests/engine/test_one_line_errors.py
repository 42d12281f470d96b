"""The fuzz's tracebacks that are now one line with exit code 2 (issue 38, class 5): an overflowing
device index, a config that is not UTF-8 (itself or its ``base:``), a fold folder that is a file or a
link to itself, a ``last.pt`` that is a folder (refused before any training), ``ablate --digits -1``
(refused before any trial)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.engine.conftest import REPO, one_line
from tests.engine.test_user_errors import train_args

HUGE = "cuda:99999999999999999999"


@pytest.mark.parametrize("argv", [
    ["info", "--check", "--device", HUGE],
    ["predict", "{run}", "{run}/../../x.npy", "--out", "{tmp}/p", "--device", HUGE],
    ["predict", "{run}", "{run}/../../x.npy", "--out", "{tmp}/p", "--device", "cuda:128"],
    ["evaluate", "{run}", f"train.device={HUGE}"],
])
def test_an_overflowing_device_index_is_one_line(argv, tiny_run, tmp_path, capsys):
    """Before: torch's RuntimeError "Could not parse device index" (and cuda:128 became cuda:-128)."""
    argv = [a.format(run=tiny_run, tmp=tmp_path) for a in argv]
    line = one_line(capsys, 2, argv)
    assert "expected cuda:N with a GPU number N from 0 to 127, got 'cuda:" in line, line


def test_train_py_with_an_overflowing_device_is_one_line(two_folds, tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "train.py"), *train_args(two_folds, tmp_path)[1:],
                           f"train.device={HUGE}"], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "train.device: expected cuda:N with a GPU number N from 0 to 127" in done.stderr


def test_a_config_or_its_base_that_is_not_utf8(tmp_path, capsys, two_folds):
    """Before: UnicodeDecodeError from yaml."""
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"model:\n  pe: geope  # caf\xe9 in latin-1\n")
    top = tmp_path / "top.yaml"
    top.write_text("base: bad.yaml\n")
    for config in (bad, top):
        line = one_line(capsys, 2,
                        ["train", "--config", str(config), "--test-area", "1", "--run-dir", str(tmp_path / "r")])
        assert line == (f"pointgeope train: error: {bad}:2: not UTF-8 text (byte 0xe9); a config is a UTF-8 YAML "
                        "file: save it as UTF-8")


def test_a_binary_file_given_as_config_is_called_binary_not_told_to_be_saved_as_utf8(tiny_run, tmp_path, capsys):
    """``--config RUN/area_1/last.pt`` (or an array) said ``not UTF-8 text (byte 0x80); a config is a UTF-8 YAML file:
    save it as UTF-8``, advice no checkpoint can follow. (A UTF-16 config, which holds NUL bytes too, is read:
    tests/engine/test_config_text.py.)"""
    array = tmp_path / "a.yaml"
    array.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'}\n\x00\x00\x80?")
    for config in (tiny_run / "last.pt", array):
        line = one_line(capsys, 2, ["train", "--config", str(config), "--test-area", "1", "--run-dir", str(tmp_path)])
        assert line == (f"pointgeope train: error: {config}: a binary file (it holds NUL bytes; a checkpoint or an "
                        "array?), not a YAML config; give a config such as configs/demo.yaml, or a fold's config.yaml")


@pytest.mark.parametrize("kind", ["file", "loop", "nowhere"])
def test_a_fold_folder_that_cannot_be_a_folder(kind, tmp_path, capsys, two_folds):
    """Before: FileExistsError from lock.py's mkdir."""
    run = tmp_path / "run"
    run.mkdir()
    fold = run / "area_1"
    if kind == "file":
        fold.write_text("x")
    else:
        fold.symlink_to("area_1" if kind == "loop" else "elsewhere")
    line = one_line(capsys, 2, train_args(two_folds, run))
    found = {"file": "a file", "loop": "a symbolic link that loops (", "nowhere": "a symbolic link to nothing ("}[kind]
    assert line.startswith(f"pointgeope train: error: output folder {fold}: expected a folder, found {found}"), line
    assert line.endswith("remove it or give another folder name")


def test_a_last_pt_that_is_a_folder_is_refused_before_training(tmp_path, capsys, two_folds):
    """Before: epoch 1 trained from scratch, then IsADirectoryError on saving last.pt."""
    (tmp_path / "area_1" / "last.pt").mkdir(parents=True)
    line = one_line(capsys, 2, train_args(two_folds, tmp_path))
    assert line == (f"pointgeope train: error: {tmp_path / 'area_1' / 'last.pt'}: expected the fold's checkpoint "
                    "file, found a folder; move it away (or --force, which starts the fold again)")
    log = (tmp_path / "area_1" / "log.txt").read_text()
    assert "epoch 1/" not in log


def test_ablate_digits_is_checked_before_any_trial(tmp_path, capsys, two_folds):
    """Before: every trial trained, then the report failed in formatting, leaving an empty report/."""
    with pytest.raises(SystemExit) as stop:
        from pointgeope.cli import main as cli
        cli(["ablate", "--config", str(REPO / "configs/demo.yaml"), "--test-area", "1", "--presets", "rpe",
             "--seeds", "0", "--run-dir", str(tmp_path / "ab"), "--digits", "-1"])
    assert stop.value.code == 2
    assert "argument --digits: expected --digits in 0..6, got '-1'" in capsys.readouterr().err
    assert not (tmp_path / "ab").exists()
