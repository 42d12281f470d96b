"""Keys of speed and memory only (``config_diff.FREE_KEYS``: ``data.hierarchy``, ``data.cache``,
``train.cuda_graphs``) may change between training and evaluate or predict, as docs/gpu.md promises
(``data.hierarchy`` applies to all three commands); each was refused as "written with another config".
The resume of a fold with them changed: ``tests/engine/test_train.py``."""
from __future__ import annotations

import json
import shutil

import numpy as np

from pointgeope.cli import main as cli
from pointgeope.engine.config_diff import FREE_KEYS
from pointgeope.engine.predict_model import PREDICT_KEYS
from tests.engine.conftest import one_line

SPEED = ["data.hierarchy=loader", "data.cache=false", "train.cuda_graphs=true"]   # tiny_run: auto, true, false


def test_evaluate_takes_the_keys_of_speed_and_memory_changed(tmp_path, tiny_run, capsys):
    run = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, run)
    (run / "metrics.json").unlink()
    assert cli(["evaluate", str(run), *SPEED]) == 0
    assert "(data.hierarchy=loader)" in capsys.readouterr().out
    metrics, trained = (json.loads((folder / "metrics.json").read_text()) for folder in (run, tiny_run))
    assert metrics["complete"] is True and metrics["confusion"] == trained["confusion"]   # the same votes
    line = one_line(capsys, 2, ["evaluate", str(run), "data.grid_size=0.2"])   # what the network trained on
    assert "written with another config (data.grid_size: checkpoint 0.1, now 0.2)" in line


def test_predict_takes_where_the_hierarchy_is_built(tmp_path, tiny_run, capsys):
    assert PREDICT_KEYS <= FREE_KEYS        # predict reads the checkpoint's config: only free keys may change
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((200, 6)) * [2, 2, 2, 255, 255, 255])
    args = ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o"), "--format", "npy"]
    assert cli([*args, "data.hierarchy=loader"]) == 0
    assert "(data.hierarchy=loader)" in capsys.readouterr().out
    assert np.load(tmp_path / "o" / "scan_pred.npy").shape[0] == 200
    for unused in ("data.cache=false", "train.cuda_graphs=true"):    # predict has no loader cache, no step
        line = one_line(capsys, 2, [*args, unused])
        assert line.startswith(f"pointgeope predict: error: override {unused!r}: predict takes overrides of "
                               "eval.* and of data.hierarchy, train.threads, not of what the network was trained")


def test_the_training_docs_name_every_free_key():
    from tests.engine.conftest import REPO

    text = " ".join((REPO / "docs" / "s3dis" / "training.md").read_text().split())
    assert all(f"`{key}`" in text for key in FREE_KEYS) and "`eval.*`" in text
    assert f"`pointgeope predict` `eval.*`, {' and '.join(f'`{k}`' for k in sorted(PREDICT_KEYS))};" in text
