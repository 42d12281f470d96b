"""train and evaluate read the data root under pointgeope.lock.reader_lock: a prepare into it meanwhile is
refused (it used to replace Area_N.h5 under a running training, whose loader workers reopen the files by
path each epoch), and they are refused while a prepare writes it."""
from __future__ import annotations

import os
import shutil

from pointgeope.cli import main as cli
from pointgeope.engine import train as train_module
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

    monkeypatch.setattr(train_module, "run_folds", run_folds)
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
