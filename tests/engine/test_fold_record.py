"""A checkpoint records the fold it was trained for; another fold's is refused (pointgeope/engine/fold_record.py).

``two_folds``: fold 1 tests Area_1 and trains on Area_2, Area_3; fold 2 tests Area_2 and trains on Area_1,
Area_3. Both read the same three area files, so their checksums cannot tell the folds apart.
"""
from __future__ import annotations

import shutil

import torch

from pointgeope.engine.checkpoint import load_checkpoint, save_checkpoint
from tests.engine.conftest import DEMO_CONFIG, TINY, one_line


def test_a_checkpoint_records_its_fold(tiny_run):
    ckpt = load_checkpoint(tiny_run / "last.pt")
    assert ckpt["fold"] == {"index": 1, "test": ["Area_1"], "train": ["Area_2", "Area_3"]}
    assert load_checkpoint(tiny_run / "best.pt")["fold"] == ckpt["fold"]


def test_evaluate_refuses_another_folds_checkpoint_naming_both(tiny_run, two_folds, tmp_path, capsys):
    """Fold 1's weights copied into fold 2's folder trained on Area_2, fold 2's test area: scoring them
    there is a test on training data. One line naming the file and both folds, exit 2, nothing written."""
    fold2 = tmp_path / "area_2"
    shutil.copytree(tiny_run, fold2)
    (fold2 / "metrics.json").unlink(missing_ok=True)
    line = one_line(capsys, 2, ["evaluate", str(fold2), f"data.root={two_folds}"])
    assert line.startswith(f"pointgeope evaluate: error: {fold2 / 'last.pt'}: trained for fold 1 (test Area_1, "
                           "trained on Area_2, Area_3), but this folder is fold 2 (test Area_2 in "), line
    assert "put fold 2's own checkpoint back" in line
    assert not (fold2 / "metrics.json").exists() and not (fold2 / "predictions" / "Area_2.h5").exists()


def test_a_resume_from_another_folds_last_pt_is_refused(tiny_run, two_folds, tmp_path, capsys):
    """``train --test-area 2`` on a folder holding fold 1's last.pt (same config, same area files) would go on
    training fold 1's weights, which saw Area_2, and test them on Area_2."""
    (tmp_path / "area_2").mkdir()
    shutil.copy(tiny_run / "last.pt", tmp_path / "area_2" / "last.pt")
    line = one_line(capsys, 2, ["train", "--config", str(DEMO_CONFIG), "--test-area", "2", "--data-root",
                                str(two_folds), "--run-dir", str(tmp_path), *TINY, "train.epochs=1",
                                "train.val_every=1"])
    assert f"{tmp_path / 'area_2' / 'last.pt'}: trained for fold 1 (test Area_1" in line, line
    assert not (tmp_path / "area_2" / "metrics.json").exists()


def test_a_checkpoint_written_before_the_record_is_used_with_a_warning(tiny_run, tmp_path, capsys):
    """No record (an older pointgeope): evaluated as before, and the log says the fold was not checked."""
    from pointgeope.cli import main as cli

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(fold / name, weights_only=True)
        ckpt.pop("fold", None)
        save_checkpoint(fold / name, {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    assert cli(["evaluate", str(fold), "eval.max_fragments=1"]) == 0
    out = capsys.readouterr().out
    assert (f"warning: {fold / 'last.pt'} does not record the fold it was trained for (written by an older "
            "pointgeope); using it without checking that") in out
