"""Tests of bench/gpu_check.sh with its device forced to the CPU: every step runs and is recorded, a failing
step does not stop the others, and the results are copied under $OUT."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.sh"


# The CPU run's step limits and budget, larger than the GPU's defaults: a loaded CI machine (load 7 on 2 cores)
# took more than bench's 60 s and the published test's 45 s at these sizes (the timed parts are fixed by
# --reps 1 and --ptv3-rounds 1: a larger limit measures nothing more, and the ptv3 step still profiles).
# pointgeope info's 60 s too (load 15: over it)
LOADED_STEPS = ("bench", "published", "ptv3", "ptv3-test", "tests", "kernels", "train", "evaluate", "info")
LOADED_LIMITS = ("--budget", "1700", *(arg for step in LOADED_STEPS for arg in (f"--{step}-limit", "400")))


def _run(tmp_path: Path, *args: str, timeout: int = 420) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path / "out"))
    proc = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--out", str(tmp_path / "gpu.json"),
                           "--work", str(tmp_path / "work"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return proc, json.loads((tmp_path / "gpu.json").read_text())


@pytest.mark.slow
def test_every_step_runs_on_the_cpu_and_is_recorded(tmp_path):
    """One call of the script with every step it runs on the CPU, ``--kernels`` included, at the smallest sizes
    (400 points a cloud, two PTv3 crops): each step is recorded with what it measured, the tests first, and $OUT
    gets the JSON and the logs. ``--kernels``: the torch kernels of rpe and geope in float32 and bf16, with
    ratios (a call of its own until it joined this one: each call pays the info steps and the imports again).
    ``--no-profile``: ``bench``'s profiled step per preset is the call of ``step_profile.profile`` that the kernels
    step makes and checks (one profile per case); on the CPU it cost 13 of bench's 30 CPU s. PTv3 profiles
    ``geope/none`` alone. PTv3 and the kernels step run float32 alone (``--ptv3-amps none``, ``--kernel-amps
    none``): on the CPU bf16 runs in float32, the same step again (four of PTv3's eight steps, two of the kernels
    step's four with their profiles: 12 of the two steps' 50 CPU s), and the bf16 rows' ratios are checked on
    given times (test_gpu_check_rows.py). ``bench`` times the
    two presets asked (``--presets``: lingeope's step is the same code with another ``pe``). The demo run trains,
    evaluates and predicts at a 16 cm grid, one fragment a room: each step is recorded all the same, and the
    pipeline's figures are the engine's tests' (tests/engine)."""
    proc, result = _run(tmp_path, "--points", "400", "--reps", "1", "--warmup", "0", "--threads", "1", "--train",
                        "--evaluate", "--predict", "--ddp", "--tests", "test_cuda_without_torch_cluster",
                        "--tests-paths", "tests/model/test_ops.py", "--tests-workers", "1", "--beside-steps", "1",
                        "--hierarchy-clouds", "2", "--presets", "rpe", "geope", "--eval-size", "tiny",
                        "--eval-config", "configs/demo.yaml", "--eval-reps", "1", "--eval-overrides",
                        "eval.max_fragments=1",
                        "--ptv3-small", "--ptv3-amps", "none", "--ptv3-size", "tiny", "--ptv3-rounds", "1",
                        "--ptv3-warmup", "0",
                        "--ptv3-clouds", "2", "--ptv3-eval-size", "tiny", "--ptv3-eval-config",
                        "configs/demo_ptv3.yaml", "--ptv3-eval-reps", "1", "--ptv3-eval-overrides",
                        "eval.max_fragments=1", "--ptv3-profile", "geope/none", "--kernels", "--kernel-presets",
                        "rpe", "geope", "--kernel-amps", "none",
                        "--train-overrides", "data.loop=1", "data.voxel_max=1500", "data.grid_size=0.16",
                        "eval.max_fragments=1", "--no-profile", *LOADED_LIMITS,
                        timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["failed_steps"] == []
    steps = result["steps"]
    assert list(steps) == ["info", "pointgeope_info", "tests", "bench", "published", "ptv3", "ptv3_test", "kernels",
                           "synth", "prepare", "train", "evaluate", "predict", "ddp"]  # the tests first: they decide
    assert result["machine"]["cuda_available"] is False and result["machine"]["torch"]
    assert steps["tests"]["summary"].startswith("1 passed")
    bench = steps["bench"]["result"]
    assert bench["device"] == "cpu" and bench["points_per_cloud"] == 400 and bench["clouds"] == 2
    assert bench["run"]["gpu"] is None and bench["run"]["commit"] == result["tree"]["commit"] and bench["run"]["torch"]
    assert sorted(bench["presets"]) == ["geope", "rpe"]                                # the presets asked
    assert all(row["given_s"] > 0 and row["in_model_s"] > 0 and row["beside_s"] > 0
               for row in bench["presets"].values())
    assert bench["presets"]["rpe"]["given_ratio"] == 1.0
    assert bench["point_ops"]["loader_cpu_s"] > 0 and bench["point_ops"]["fps_torch_points"] == 400
    per_backend = bench["hierarchy"]["2x400"]                              # the hierarchy per backend, side by side
    assert sorted(per_backend) == ["cpu", "default"] and all(row["seconds"] > 0 for row in per_backend.values())
    assert per_backend["default"]["agree"] == 1.0 and per_backend["default"]["same_samples"]
    published = steps["published"]["result"]                                  # one tiny room, its first fragment
    assert published["size"] == "tiny" and published["fragments_run"] == 1 and published["seconds_per_room"] > 0
    assert 0 < published["predictions"] < published["points"] and "peak_gpu_mib" not in published  # one per voxel
    check_ptv3_rows(steps["ptv3"]["result"], steps["ptv3_test"]["result"])
    check_kernels_rows(steps["kernels"]["result"])
    assert len(steps["train"]["points_per_s"]) == 1 and steps["train"]["points_per_s"][0] > 0
    assert steps["evaluate"]["rooms"] == 2 and steps["evaluate"]["eval_seconds_per_room"] > 0
    assert steps["predict"]["ok"] and steps["predict"]["rooms"] == 2
    assert steps["ddp"]["skipped"].startswith("needs two GPUs")
    copied = json.loads((tmp_path / "out" / "gpu.json").read_text())      # $OUT gets the final JSON and logs
    assert copied["steps"].keys() == steps.keys()
    with tarfile.open(tmp_path / "out" / "gpu_logs.tgz") as tar:                # the logs in one file
        assert "gpu_logs/train.log" in tar.getnames()


def check_kernels_rows(kernels: dict) -> None:
    """``--kernels`` on the CPU: the torch kernels of rpe and geope in float32 (no Triton there; ``--kernel-amps``
    the precisions asked), each with its time, geope's ratio to rpe's, one profiled step each."""
    cases = kernels["cases"]
    assert sorted(cases) == ["geope/torch/none", "rpe/torch/none"]
    assert all(row["step_s"] > 0 for row in cases.values())
    assert (cases["geope/torch/none"]["vs_rpe_time"]
            == cases["geope/torch/none"]["step_s"] / cases["rpe/torch/none"]["step_s"])
    assert all(kernels["profile"][name]["top"] for name in cases) and set(kernels["profile"]) == set(cases)


def check_ptv3_rows(step: dict, test: dict) -> None:
    """The rows of the ptv3 steps on the CPU: the four encodings' float32 cases of two crops of the tiny room
    (``--ptv3-amps none``), ratios from the same rounds, no GPU memory; the 10-view test."""
    assert step["device"] == "cpu" and step["clouds"] == 2 and step["rounds"] == 1
    assert step["points"] == sum(step["points_per_cloud"]) and 0 < max(step["points_per_cloud"]) <= 204_800
    cases = step["cases"]
    assert sorted(cases) == ["geope/none", "none/none", "none18/none", "point3drope/none"]
    for key, row in cases.items():
        assert row["step_s"] > 0 and len(row["steps_s"]) == 1 and row["autocast"] == "float32", key
        assert row["loss"] > 0 and row["state_mib"] > 0 and "peak_mib" not in row and "error" not in row, key
    assert cases["geope/none"]["vs_none_time"] == cases["geope/none"]["step_s"] / cases["none/none"]["step_s"]
    assert cases["geope/none"]["vs_none18_time"] == cases["geope/none"]["step_s"] / cases["none18/none"]["step_s"]
    assert cases["none18/none"]["config"] == "configs/s3dis/ptv3_geope.yaml model.pe=none"
    assert sorted(step["profile"]) == ["geope/none"]     # the case asked
    assert step["profile"]["geope/none"]["top"] and "host_syncs" not in step["profile"]["geope/none"]  # CUDA only
    assert test["config"] == "configs/demo_ptv3.yaml" and len(test["fragments_per_view"]) == 10   # PTv3's views
    assert test["fragments_run_all_views"] == 10 and test["seconds_per_room"] > 0 and "peak_gpu_mib" not in test
    ratio = sum(test["fragments_per_view"]) / 10
    assert test["seconds_projected"] == pytest.approx(test["seconds_per_room"] * ratio, rel=1e-2)


def test_a_failing_step_is_recorded_and_the_others_still_run(tmp_path):
    """--evaluate without a trained run fails; the steps before it still ran, the JSON says which failed."""
    proc, result = _run(tmp_path, "--no-tests", "--no-bench", "--no-published", "--no-ptv3", "--evaluate", timeout=120)
    assert proc.returncode == 1
    assert result["failed_steps"] == ["evaluate"]
    assert result["steps"]["info"]["ok"] and "no " in result["steps"]["evaluate"]["error"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=False).stdout.strip()
    assert result["tree"]["commit"] == head and result["tree"]["dirty"] in ((True, False) if head else (None,))
    assert (tmp_path / "out" / "gpu.json").is_file()


def test_busy_seconds_counts_overlapping_kernels_once():
    """The GPU's busy time of a profiled step: the union of the kernels' intervals, checked against a count
    of the covered points of a fine grid."""
    from step_profile import busy_seconds

    rng = __import__("random").Random(3)
    for _ in range(20):
        intervals = [(a, a + rng.randint(0, 30)) for a in (rng.randint(0, 200) for _ in range(rng.randint(0, 12)))]
        covered = sum(any(a <= t + 0.5 < b for a, b in intervals) for t in range(260))
        assert busy_seconds(intervals) == covered
    assert busy_seconds([(0.0, 2.5), (1.0, 2.0), (2.5, 4.0)]) == 4.0


def _header_calls() -> list[list[str]]:
    """The arguments of the calls that ``gpu_check.sh``'s header prescribes."""
    calls = []
    for line in SCRIPT.read_text().splitlines():
        text = line.lstrip("# ").split("#")[0].split()
        if "bench/gpu_check.sh" in text and "--budget" in text:
            calls.append(text[text.index("bench/gpu_check.sh") + 1:])
    return calls


def test_the_documented_calls_measure_first_what_decides_a_default(monkeypatch):
    """On a GPU (the plan only: nothing runs) the header's calls parse; a plain run takes every step once, the
    tests and the kernel check before any timing, and the paths no GPU has measured (each deciding a default)
    before the targets measured earlier; the header's second call is docs/gpu.md's next call, word for word:
    the tests, the kernel check, the compiles (which the graph steps need, ``--no-bench`` or not), the two graph
    steps and the norm alone."""
    import gpu_check

    def steps(args: list[str]) -> list[str]:
        monkeypatch.setattr(sys, "argv", ["gpu_check.py", *args])
        return [name for name, _ in gpu_check.plan(gpu_check.parse_args())]

    first, later = (steps(call) for call in _header_calls())
    assert len(set(first)) == len(first) and first == steps([])
    assert first[:4] == ["info", "tests", "check", "warm"]
    assert first[4:10] == ["graphs", "bench16", "graphs16", "norm_op", "norm", "relation_backward"]
    assert later == ["info", "tests", "check", "warm", "graphs", "graphs16", "norm_op"]
    assert _header_calls()[1] == _next_call()


def test_the_compiles_run_before_every_timed_step_that_compiles(monkeypatch):
    """``warm`` (the kernels compiled side by side) is planned where ``bench``'s steps or a graph step will time
    kernels, and not where neither runs; the norm alone (``norm_op``) runs without ``bench``'s steps and goes with
    ``--no-norm-op``."""
    import gpu_check

    def steps(*args: str) -> list[str]:
        monkeypatch.setattr(sys, "argv", ["gpu_check.py", *args])
        return [name for name, _ in gpu_check.plan(gpu_check.parse_args())]

    assert steps("--no-bench", "--no-graphs")[3:6] == ["warm", "graphs16", "norm_op"]
    assert steps("--no-bench", "--no-graphs16")[3:6] == ["warm", "graphs", "norm_op"]
    assert "warm" not in steps("--no-bench", "--no-graphs", "--no-graphs16")
    assert "norm_op" not in steps("--no-norm-op") and "norm" in steps("--no-norm-op")


@pytest.mark.parametrize("config, train_amp, eval_amp, tested", [
    ("configs/s3dis/ptv3_geope.yaml", "fp16", "none", "none"),
    ("configs/s3dis/ptv3_geope.yaml", "none", "fp16", "fp16"),
    ("configs/s3dis/pt_geope.yaml", "bf16", "none", "none"), ("configs/s3dis/pt_geope.yaml", "none", "bf16", "bf16"),
])
def test_the_published_tests_record_names_the_precision_the_test_ran_in(config, train_amp, eval_amp, tested):
    """``bench_evaluate.py``'s ``amp`` is the test's precision on a CUDA device, ``eval.amp``'s, never
    ``train.amp``'s: both backbones' tests run in float32 unless ``eval.amp`` says otherwise (run 7 recorded
    PTv3's float32 test as fp16)."""
    import torch

    import evaluate_published
    from pointgeope.engine.config import load_config

    cfg = load_config(REPO / config, [f"train.amp={train_amp}", f"eval.amp={eval_amp}"])
    assert evaluate_published.tested_precision(cfg, torch.device("cuda")) == tested
    assert evaluate_published.tested_precision(cfg, torch.device("cpu")) == "none"


def test_the_bf16_published_test_sets_eval_amp_and_its_agreement_run_too(monkeypatch):
    """The ``published_bf16`` step measures a bf16 test: it must set ``eval.amp`` (``train.amp`` no longer
    changes the test), and ``--agree-amp``'s second run of the room changes ``eval.amp`` likewise."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    import evaluate_published
    import gpu_check
    from pointgeope.engine import evaluate
    from pointgeope.engine.config import load_config

    calls = []
    monkeypatch.setattr(gpu_check, "published_test", lambda check, py, name, *rest: calls.append((name, rest)))
    a = SimpleNamespace(eval_size="tiny", eval_config="configs/demo.yaml", eval_reps=1, eval_overrides=["x=1"],
                        published_bf16_limit=45)
    gpu_check.step_published_bf16(SimpleNamespace(args=a), "python")
    (name, rest), = calls
    assert name == "published_bf16" and rest[3] == ["eval.amp=bf16", "x=1"] and rest[-2:] == ("--agree-amp", "none")

    seen = []

    def vote_room(model, coord, color, cfg, device, seed, normal=None):
        seen.append((cfg.train.amp, cfg.eval.amp, normal))
        return SimpleNamespace(scores=np.eye(3, dtype=np.float32))

    monkeypatch.setattr(evaluate, "vote_room", vote_room)
    cfg = load_config(None, ["train.amp=fp16", "eval.amp=bf16"])
    row = evaluate_published.votes_agreement(SimpleNamespace(agree_amp="none"), None, None, None, cfg,
                                             torch.device("cpu"), np.eye(3, dtype=np.float32), {"normal": "normals"})
    assert seen == [("fp16", "none", "normals")] and row["agree_amp"] == "none" and row["votes_agreement"] == 1.0


def test_the_steps_budget_starts_after_the_warm_up(monkeypatch):
    """bench16's second rep (audit F5): ``--budget`` counts from the end of the inputs and warm-up, so a slow
    warm-up (16 x 80k on a GPU: most of bench16's limit) no longer leaves the row one sample. The budget's
    clock is the test's: on the real one a step of a busy machine (2.7 s with both cores busy) outlasted the
    budget alone and left one rep, whatever the warm-up."""
    from types import SimpleNamespace

    import bench_train_step

    step = bench_train_step.Case.step
    warm, clock = {"left": 1}, {"now": 0.0}

    def slow_warm_up(self, given):
        if warm["left"]:                      # the warm-up step: longer than the whole budget
            warm["left"] -= 1
            clock["now"] += 2.5
        else:                                 # a rep: 1.5 s, so the 2 s budget holds two of the three asked
            clock["now"] += 1.5
        step(self, given)

    monkeypatch.setattr(bench_train_step.Case, "step", slow_warm_up)
    monkeypatch.setattr(bench_train_step, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    args = SimpleNamespace(device="cpu", amp="none", points=1500, clouds=1, presets=["rpe"], warmup=1, reps=3,
                           budget=2.0, warm_only=False, no_in_model=True, beside_steps=0, no_point_ops=True,
                           profile=False)
    out = {}
    bench_train_step.run(args, out, lambda: None)
    assert warm["left"] == 0 and out["presets"]["rpe"]["reps"] == 2


def _limits(monkeypatch, call: list[str]) -> dict[str, float]:
    """The planned steps of ``gpu_check.sh`` ``call`` and each one's limit (``info``: its two probes' 120 + 60 s)."""
    import gpu_check

    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *call])
    args = gpu_check.parse_args()
    return {name: 180.0 if name == "info" else float(getattr(args, f"{name}_limit", 0) or 0)
            for name, _ in gpu_check.plan(args)}


def test_a_plain_call_plans_more_than_one_session_holds(monkeypatch):
    """gpu_check.sh's header and docs/gpu.md: the steps' limits add up to more than a device session's 15
    minutes (the machine's start included), so the budget orders them and records the rest as skipped."""
    plain = _limits(monkeypatch, [])
    assert sum(plain.values()) > 15 * 60
    for text in (SCRIPT.read_text(), (REPO / "docs" / "gpu.md").read_text()):
        assert "limits add up to more than" in " ".join(text.replace("\n#", "\n").split())


def _next_call() -> list[str]:
    """The arguments of docs/gpu.md's next call."""
    text = " ".join((REPO / "docs" / "gpu.md").read_text().split("**The next call.**")[1].split("\n\n")[0].split())
    return re.search(r"`PYTHON=python3 bash bench/gpu_check.sh ([^`]+)`", text).group(1).split()


def _took(run: dict, name: str, limit: float) -> float | None:
    """A step's seconds in a gpu_check result's ``steps`` (``info``: with ``pointgeope_info``); its limit where it
    ran out of it (it needed more: run 8's tests at 120 s); None if the run has no seconds of it."""
    if name == "info":
        return run["info"]["seconds"] + run["pointgeope_info"]["seconds"]
    step = run.get(name, {})
    return limit if step.get("rc") == "timeout" else step.get("seconds")


def _timeline(limits: dict[str, float], runs: list[dict]) -> dict[str, tuple[float, float]]:
    """Each planned step's start and end (seconds into the call): the longest of ``runs``' times of it, its limit
    where none has it, and bench16 at its limit (two reps since audit F5, whatever a run took)."""
    times, started = {}, 0.0
    for name, limit in limits.items():
        took = [t for t in (_took(run, name, limit) for run in runs) if t is not None and name != "bench16"]
        times[name] = (started, started + (max(took) if took else limit))
        started = times[name][1]
    return times


def _run_steps(*names: str) -> list[dict]:
    return [json.loads((REPO / f"bench/results/gpu/{name}_gpu.json").read_text())["steps"] for name in names]


def test_the_next_call_fits_its_budget_at_run_8s_times(monkeypatch):
    """docs/gpu.md's next call (after the next kernel change): at the seconds run 8 (an H200) took, with the
    tests at their whole limit (run 8's ran out of its former 120 s) and bench16 and the steps run 8 did not
    finish at theirs, every step starts with the 15 s a step needs left of --budget, and every one but the last
    (bench_bf16, which the budget may shorten) ends within it."""
    call = _next_call()
    limits = _limits(monkeypatch, call)
    budget = float(call[call.index("--budget") + 1])
    times = _timeline(limits, _run_steps("h200_run8"))
    ran_out = [run["tests"]["seconds"] for run in _run_steps("h100_run7", "h200_run8")
               if run["tests"]["rc"] == "timeout"]
    assert {"tests", "check", "warm", "graphs", "graphs16", "norm_op"} <= set(limits)
    assert limits["tests"] > max(ran_out), (limits["tests"], ran_out)
    assert all(budget - start >= 15 for start, _ in times.values()), times
    assert max(end for name, (_, end) in times.items() if name != list(times)[-1]) <= budget, times


def test_the_next_calls_seconds_in_docs_are_run_8s(monkeypatch):
    """docs/gpu.md's arithmetic of its next call: the steps before the last end at about N s of its --budget B
    and the last, named, has B - N s left, N the timeline's at run 8's times (the test above), to the second."""
    call = _next_call()
    times = _timeline(_limits(monkeypatch, call), _run_steps("h200_run8"))
    text = " ".join((REPO / "docs" / "gpu.md").read_text().split("**The next call.**")[1].split("\n\n")[0].split())
    said = re.search(r"the steps up to `(\w+)` end at about (\d+) s of the (\d+), and `(\w+)`, the last, has the "
                     r"(\d+) s left", text)
    assert said, "docs/gpu.md's next call no longer says when its steps end"
    before, end, budget, last, left = said.groups()
    assert [before, last] == list(times)[-2:] and budget == call[call.index("--budget") + 1]
    assert (int(end), int(left)) == (round(times[before][1]), int(budget) - round(times[before][1])), times


def test_the_next_call_times_both_graph_steps_even_at_their_limits(monkeypatch):
    """docs/gpu.md's next call (the padded step's third norm on the plain kernel) runs ``graphs`` and ``graphs16``
    after the compiles, the latter in float32 and bf16, then the norm alone; with ``graphs`` at its whole limit (it
    now records two graphs a case and times two more steps than run 8's) and the steps before it at run 8's seconds
    (the tests at their limit), ``graphs16`` still starts with over twice run 8's seconds of it left (it times five
    sides a case where run 8's timed three), and the docs say those seconds."""
    call = _next_call()
    limits = _limits(monkeypatch, call)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *call])
    import gpu_check

    assert list(limits)[-4:] == ["warm", "graphs", "graphs16", "norm_op"]
    assert gpu_check.parse_args().graphs16_amps == ["none", "bf16"]
    run8 = _run_steps("h200_run8")
    run8_graphs16 = run8[0]["graphs16"]["seconds"]
    times = _timeline(limits, [{name: step for name, step in run.items() if name != "graphs"} for run in run8])
    budget = float(call[call.index("--budget") + 1])
    left = budget - times["graphs16"][0]
    assert left >= 2 * run8_graphs16, times
    text = " ".join((REPO / "docs" / "gpu.md").read_text().split("**The next call.**")[1].split("\n\n")[0].split())
    said = re.search(r"it may take its whole (\d+) s limit: then (\d+) s, and `graphs16` still has (\d+) s, over "
                     r"twice run 8's (\d+) s", text)
    assert said, "docs/gpu.md's next call no longer says when graphs ends at its limit"
    assert [int(x) for x in said.groups()] == [round(limits["graphs"]), round(times["graphs"][1]), int(left),
                                                round(run8_graphs16)], times
