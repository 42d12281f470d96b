"""`pointgeope predict`'s records name the machine that predicted each scan (engine/predict_record.py's
``made_on``): recorded, not compared, so that a rerun on another machine resumes, and a scan it skips that was
made elsewhere is said so, naming what differs."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import pointgeope.engine.predict as predict_module
from pointgeope.cli import main as cli
from pointgeope.engine.machine_record import machine
from pointgeope.engine.predict_record import other_machine


@pytest.fixture()
def threads():
    """torch's CPU threads put back after the test (``train.threads=N`` sets them for the process)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_scan_made_with_another_thread_count_is_skipped_and_said_to(tiny_run, tmp_path, capsys, monkeypatch,
                                                                      threads, code_at):
    """Before: the record named no machine, and the skip line said nothing of a scan predicted with 1 thread
    skipped by a rerun with 2 (whose floats may differ: other sums)."""
    code_at()   # committed code: the skip line the same in a clone with edits
    scan = tmp_path / "b.npy"
    np.save(scan, np.random.default_rng(1).random((350, 6)) * [3, 3, 2, 255, 255, 255])
    out = tmp_path / "out"
    calls = []
    original = predict_module.predict_scan
    monkeypatch.setattr(predict_module, "predict_scan", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert cli(["predict", str(tiny_run), str(scan), "--out", str(out), "train.threads=1"]) == 0
    record = json.loads((out / "b_pred.json").read_text())
    assert record["made_on"] == {"device": "cpu", "processes": 1, "threads": 1, "precision": "float32",
                                 "torch": str(torch.__version__)}
    capsys.readouterr()
    assert cli(["predict", str(tiny_run), str(scan), "--out", str(out), "train.threads=2"]) == 0
    assert len(calls) == 1    # skipped: the threads choose how the same prediction runs
    skip = [line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped")]
    assert skip == [f"skipped {scan}: its outputs in {out} are complete, from the same model, input, options and "
                    "code, predicted on another machine (threads: 1 there, 2 here) (--force predicts it again)"]
    assert cli(["predict", str(tiny_run), str(scan), "--out", str(out), "train.threads=1"]) == 0
    assert "another machine" not in capsys.readouterr().out and len(calls) == 1


def test_the_words_name_each_aspect_that_differs_and_nothing_for_an_older_record():
    now = machine("cpu", "none")
    assert other_machine(now, now) == "" and other_machine(None, now) == "" and other_machine("x", now) == ""
    gpu = {**now, "device": "cuda", "device_name": "NVIDIA H200", "precision": "bf16"}
    assert other_machine(gpu, now) == (", predicted on another machine (device: cuda (NVIDIA H200) there, cpu here; "
                                       "precision: bf16 there, float32 here)")


def test_the_cpu_threads_of_a_prediction_on_cuda_are_not_another_machine():
    """On CUDA the model's math runs on the device (the report does not compare a CUDA run's CPU threads either:
    report/machine.py); before, the same GPU at another thread count read 'predicted on another machine
    (threads: 8 there, 16 here)'."""
    gpu = {**machine("cpu", "none"), "device": "cuda", "device_name": "NVIDIA H200", "precision": "float32"}
    assert other_machine({**gpu, "threads": 8}, {**gpu, "threads": 16}) == ""
    cpu = {**machine("cpu", "none"), "threads": 8}
    assert other_machine({**gpu, "threads": 16}, cpu) == (
        ", predicted on another machine (device: cuda (NVIDIA H200) there, cpu here)")


def test_a_damaged_machine_of_a_record_is_said_in_bounds_and_marked():
    """A hand-edited _pred.json whose torch is a megabyte and whose device model holds a newline: the skip line's
    words stay short and one line, each such value marked. Before: the megabyte in the skip line."""
    now = machine("cpu", "none")
    damaged = {**now, "torch": "2" * 10**6, "device": "cuda", "device_name": "H\n200"}
    words = other_machine(damaged, now)
    assert words == (", predicted on another machine (device: cuda ('H\\n200' (looks damaged)) there, cpu here; "
                     f"torch: '{'2' * 60}... (1,000,002 characters) (looks damaged) there, {now['torch']} here)")


def test_a_value_the_record_lacks_is_not_recorded_and_a_blank_one_damaged():
    """A record without its torch version (null) read ``torch: None there``, a precision of spaces
    ``precision:    there``: a value that reads as a word, and one that reads as nothing, unmarked."""
    now = machine("cpu", "none")
    assert other_machine({**now, "torch": None, "precision": "   "}, now) == (
        f", predicted on another machine (precision: '   ' (looks damaged) there, float32 here; torch: not recorded "
        f"there, {now['torch']} here)")
