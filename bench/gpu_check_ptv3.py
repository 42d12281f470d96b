"""The PTv3 steps of ``bench/gpu_check.py`` (on by default, ``--no-ptv3`` skips both):

    ptv3       ``bench_ptv3_step.py --recipe``: the recipe's training step of ``configs/s3dis/ptv3_{none, geope,
               point3drope}.yaml`` and of ``none`` at the encodings' widths (``none18``), in float32 and bf16
               autocast, the eight cases interleaved, on ``--ptv3-clouds`` crops (default 3: the recipe's 12 a
               step over Pointcept's 4 GPUs) of the ``synth --size bench`` room through the recipe's pipeline:
               median step after ``--ptv3-warmup`` rounds, peak GPU memory per step (``max_memory_allocated``,
               reset before each), ratios to ``none``, ``none18`` and float32; then one profiled step of
               ``--ptv3-profile``'s cases (top kernels, the GPU's busy share, the host's waits)
    ptv3_test  ``bench_evaluate.py --published`` with ``configs/s3dis/ptv3_geope.yaml`` (``eval.protocol: ptv3``:
               Pointcept's 10 scaled and flipped views, each cut into grid-sample fragments) of one ``synth
               --size bench`` room: the first ``eval.max_fragments`` fragments of every view timed (the minimum
               of ``--ptv3-eval-reps``, the first warming the device up) and projected to all of them, peak GPU
               memory

``--device cpu`` (the test suite) runs both small: ``--ptv3-small`` (the modest network of bench_ptv3_step.py's
CPU mode), ``--ptv3-size tiny``, ``--ptv3-eval-config configs/demo_ptv3.yaml``.
"""
from __future__ import annotations

import argparse

from gpu_runner import Check, published_test, result_path, run_with_result

LIMITS = {"ptv3": 110.0, "ptv3_test": 60.0}   # seconds; the check's --budget caps them


def add_ptv3_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("PTv3 (the ptv3 and ptv3_test steps)")
    g.add_argument("--no-ptv3", action="store_true", help="skip the ptv3 and ptv3_test steps")
    g.add_argument("--ptv3-encodings", nargs="+", default=["none", "none18", "geope", "point3drope"],
                   help="none: the published network (head width 16); none18: none at the encodings' widths (18)")
    g.add_argument("--ptv3-amps", nargs="+", default=["none", "bf16"])
    g.add_argument("--ptv3-clouds", type=int, default=3, help="crops a step (the recipe's 12 over 4 GPUs)")
    g.add_argument("--ptv3-size", default="bench", help="synth --size of the room the crops are cut from")
    g.add_argument("--ptv3-rounds", type=int, default=3, help="timed rounds (each case one step a round)")
    g.add_argument("--ptv3-warmup", type=int, default=1, help="untimed rounds first")
    g.add_argument("--ptv3-small", action="store_true", help="the modest network (the test suite's CPU run)")
    g.add_argument("--ptv3-profile", nargs="*", default=["geope/none", "geope/bf16"], metavar="ENCODING/AMP",
                   help="cases profiled one more step after the rounds (top kernels, GPU busy share, host syncs)")
    g.add_argument("--ptv3-eval-config", default="configs/s3dis/ptv3_geope.yaml")
    g.add_argument("--ptv3-eval-size", default="bench", help="synth --size of the tested room")
    g.add_argument("--ptv3-eval-reps", type=int, default=2, help="repetitions of the test (the minimum counts)")
    g.add_argument("--ptv3-eval-overrides", nargs="*", default=["eval.max_fragments=2"], metavar="section.key=value",
                   help="config overrides of the test (default: 2 fragments a view, projected to all)")
    for name, limit in LIMITS.items():
        g.add_argument(f"--{name.replace('_', '-')}-limit", type=float, default=limit)


def step_ptv3(check: Check, py: str) -> None:
    """``bench_ptv3_step.py --recipe``: the recipe's step per encoding and precision (module docstring)."""
    a = check.args
    data = result_path(check, "bench_ptv3_step.json")
    cmd = [py, "bench/bench_ptv3_step.py", "--recipe", "--out", str(data), "--device",
           "cpu" if a.device == "cpu" else "cuda", "--clouds", str(a.ptv3_clouds), "--size", a.ptv3_size,
           "--rounds", str(a.ptv3_rounds), "--warmup", str(a.ptv3_warmup),
           "--budget", str(max(10, min(a.ptv3_limit, check.left()) - 25)), "--amps", *a.ptv3_amps,
           "--encodings", *a.ptv3_encodings, *(["--small"] if a.ptv3_small else []), "--profile", *a.ptv3_profile]
    run_with_result(check, "ptv3", cmd, a.ptv3_limit, data)


def step_ptv3_test(check: Check, py: str) -> None:
    """``bench_evaluate.py --published`` of one room with PTv3's test (module docstring)."""
    a = check.args
    published_test(check, py, "ptv3_test", a.ptv3_eval_size, a.ptv3_eval_config, a.ptv3_eval_reps,
                   a.ptv3_eval_overrides, a.ptv3_test_limit)


def ptv3_steps(args: argparse.Namespace) -> list:
    """The PTv3 steps of the plan (none with ``--no-ptv3``)."""
    return [] if args.no_ptv3 else [("ptv3", step_ptv3), ("ptv3_test", step_ptv3_test)]
