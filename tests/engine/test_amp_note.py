"""``train.amp=bf16`` on the CPU trains in float32 (autocast is CUDA's only): the log says so in one line
(issue 38, class 11); before, it was ignored without a word."""
from __future__ import annotations

from tests.engine.conftest import train_fold


def test_bf16_on_the_cpu_is_one_line_in_the_log(two_folds, tmp_path):
    assert train_fold(two_folds, tmp_path, "train.epochs=1", "train.amp=bf16") == 0
    log = (tmp_path / "area_1" / "log.txt").read_text().splitlines()
    said = [line for line in log if "precision" in line]
    assert len(said) == 1 and said[0].endswith(
        "precision: float32 (train.amp=bf16 is for CUDA, and this run is on cpu)"), said


def test_no_word_of_it_without_amp(two_folds, tmp_path):
    assert train_fold(two_folds, tmp_path, "train.epochs=1") == 0
    assert "precision" not in (tmp_path / "area_1" / "log.txt").read_text()
