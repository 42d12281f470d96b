"""A device or kernel choice that cannot be used ends in one line naming it and what to do, exit code 2: a
device that is no device or that this machine lacks, a kernel choice that is not a path, the kernel check
without a device that runs Triton, and `info --device` without `--check`."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.cli import main as cli
from tests.engine.conftest import one_line
from tests.engine.test_user_errors import train_args


def test_a_device_that_is_no_device_is_one_line(tmp_path, capsys, tiny_run):
    """predict --device xyz, mps or meta ended in torch's traceback (or ran on the meta device into one)."""
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((100, 6)) * [2, 2, 2, 255, 255, 255])
    for device in ("xyz", "mps", "meta"):
        line = one_line(capsys, 2, ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o"),
                                    "--device", device])
        assert line == ("pointgeope predict: error: --device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), "
                        f"got {device!r}")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_lacks_is_one_line(tmp_path, capsys, two_folds, tiny_run):
    """train.device=cuda without CUDA had the right words in a traceback, and so did predict --device cuda:0."""
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, "train.device=cuda"))
    assert line == "pointgeope train: error: train.device='cuda' but CUDA is not available here; use auto or cpu"
    assert not (tmp_path / "area_1").exists()
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((100, 6)) * [2, 2, 2, 255, 255, 255])
    line = one_line(capsys, 2,
                    ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o"), "--device", "cuda:0"])
    assert line == ("pointgeope predict: error: --device cuda:0 but CUDA is not available here; use --device cpu "
                    "(or auto)")
    assert not (tmp_path / "o").exists()


def test_a_kernel_choice_that_is_not_a_path_is_one_line(tmp_path, capsys, two_folds, tiny_run, monkeypatch):
    """POINTGEOPE_KERNELS=bad (or cuda) in train, evaluate and predict: one line naming the variable and its
    values, exit code 2, nothing written (it was a traceback from inside the forward)."""
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((100, 6)) * [2, 2, 2, 255, 255, 255])
    want = "error: POINTGEOPE_KERNELS: expected one of triton, torch (or unset for the device's default), got {!r}"
    for value in ("bad", "cuda"):
        monkeypatch.setenv("POINTGEOPE_KERNELS", value)
        line = one_line(capsys, 2, train_args(two_folds, tmp_path, "train.epochs=1"))
        assert line == "pointgeope train: " + want.format(value)
        line = one_line(capsys, 2, ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o")])
        assert line == "pointgeope predict: " + want.format(value)
    assert not (tmp_path / "area_1").exists() and not (tmp_path / "o").exists()
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")           # Triton on the CPU: only in its interpreter
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    line = one_line(capsys, 2, ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o"), "--device", "cpu"])
    assert line.startswith("pointgeope predict: error: POINTGEOPE_KERNELS=triton on the CPU needs TRITON_INTERPRET=1")
    monkeypatch.delenv("POINTGEOPE_KERNELS")
    monkeypatch.setenv("POINTGEOPE_COMPILE", "garbage")           # a switch: one line too (it meant "compile")
    line = one_line(capsys, 2, ["predict", str(tiny_run), str(scan), "--out", str(tmp_path / "o")])
    assert line == ("pointgeope predict: error: POINTGEOPE_COMPILE: expected one of 1, true, on, yes (on) or 0, "
                    "false, off, no (off), or unset, got 'garbage'")
    assert not (tmp_path / "o").exists()


def test_the_kernel_check_needs_a_device_that_runs_triton(capsys, monkeypatch):
    """``pointgeope info --check``: a device that is not one, or the CPU outside Triton's interpreter, is one
    line (the check forces the Triton kernels itself: the message is not about POINTGEOPE_KERNELS)."""
    line = one_line(capsys, 2, ["info", "--check", "--device", "mps"])
    assert line == "pointgeope info: error: --device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'mps'"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    line = one_line(capsys, 2, ["info", "--check", "--device", "cpu"])
    assert line.startswith("pointgeope info: error: --check: the Triton kernels run on CUDA")


@pytest.mark.parametrize("device, message", [
    ("gpu", "--device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'gpu'"),
    ("cpu", "--device cpu: the device of --check, which was not given; add --check to test the Triton kernels "
            "there (info alone prints the backends of every device)"),
])
def test_info_device_without_check_is_not_ignored(capsys, device, message):
    """``pointgeope info --device gpu`` printed the versions and exited 0 (the option is --check's alone),
    while with --check the same name was refused; now refused alike, before any output."""
    assert cli(["info", "--device", device]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines() == [f"pointgeope info: error: {message}"]
    line = one_line(capsys, 2, ["info", "--check", "--device", "gpu"])
    assert line == "pointgeope info: error: --device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'gpu'"
