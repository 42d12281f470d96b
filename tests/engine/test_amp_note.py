"""``train.amp=bf16`` on the CPU trains in float32 (autocast is CUDA's only): the log says so in one line
(issue 38, class 11); before, it was ignored without a word. The rules themselves: ``build.mixed_precision`` and
``build.eval_precision`` (the test's, of ``eval.amp``)."""
from __future__ import annotations

import shutil

from pointgeope.cli import main as cli
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


def test_mixed_precision_is_cudas_only_and_autocast_and_the_scaler_follow_it():
    import torch

    from pointgeope.engine import build
    from pointgeope.engine.config import Config, TrainConfig

    want = {("cuda", "bf16"): torch.bfloat16, ("cuda", "fp16"): torch.float16}
    for device in ("cpu", "cuda"):
        for amp in ("bf16", "fp16", "none"):
            cfg = Config(train=TrainConfig(amp=amp))
            assert build.mixed_precision(cfg, torch.device(device)) == want.get((device, amp)), (device, amp)
            if device == "cpu" or torch.cuda.is_available():   # without CUDA, torch disables CUDA's autocast itself
                with build.autocast(cfg, torch.device(device)):
                    on = torch.is_autocast_enabled(device)
                    dtype = torch.get_autocast_dtype(device)
                assert on == ((device, amp) in want) and (not on or dtype == want[device, amp]), (device, amp)
                scaled = build.grad_scaler(cfg, torch.device(device)).is_enabled()
                assert scaled == (want.get((device, amp)) == torch.float16), (device, amp)


def test_the_tests_precision_is_eval_amps_alone_and_cudas_only():
    """``eval.amp`` picks the test's autocast dtype (``build.eval_precision``) on CUDA, for both protocols and
    whatever ``train.amp``; on the CPU the test is float32. Both authors' tests are float32: the default."""
    import torch

    from pointgeope.engine import build
    from pointgeope.engine.config import Config, EvalConfig, TrainConfig

    assert EvalConfig().amp == "none"
    want = {("cuda", "bf16"): torch.bfloat16, ("cuda", "fp16"): torch.float16}
    for device in ("cpu", "cuda"):
        for protocol in ("ptv1", "ptv3"):
            for train_amp in ("bf16", "fp16", "none"):
                for amp in ("bf16", "fp16", "none"):
                    cfg = Config(train=TrainConfig(amp=train_amp), eval=EvalConfig(amp=amp, protocol=protocol))
                    got = build.eval_precision(cfg, torch.device(device))
                    assert got == want.get((device, amp)), (device, protocol, train_amp, amp)
                    if device == "cpu" or torch.cuda.is_available():   # torch disables CUDA's autocast without it
                        with build.autocast(cfg, torch.device(device), evaluation=True):
                            on = torch.is_autocast_enabled(device)
                            dtype = torch.get_autocast_dtype(device)
                        assert on == ((device, amp) in want) and (not on or dtype == want[device, amp])


def test_eval_amp_on_the_cpu_is_one_line_of_evaluate_and_predict(tiny_run, two_folds, tmp_path, capsys):
    # as train.amp's: the test runs in float32 on the CPU, and says so once, rather than ignoring the key
    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    assert cli(["evaluate", str(fold), "eval.amp=bf16", "eval.max_fragments=1"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "precision" in line]
    assert said == ["precision: float32 (eval.amp=bf16 is for CUDA, and this test is on cpu)"]
    assert cli(["predict", str(fold), str(two_folds / "Area_1.h5"), "--out", str(tmp_path / "o"),
                "--max-fragments", "1", "eval.amp=fp16"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "precision" in line]
    assert said == ["precision: float32 (eval.amp=fp16 is for CUDA, and this test is on cpu)"]
    assert cli(["evaluate", str(fold), "eval.max_fragments=1"]) == 0
    assert "precision" not in capsys.readouterr().out
