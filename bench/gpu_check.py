"""The GPU check: in one device call, the CUDA tests, every kernel against its torch path, the point hierarchy
and the training step on its three paths, the published test of one room.

Steps, each a subprocess with its own time limit (a failure or a timeout is recorded and the next step
runs), the JSON rewritten after every step, and with ``$OUT`` set copied there as ``gpu.json`` and
``gpu_logs.tgz`` (so a call cut short still returns what it measured):

    info       GPU name, Python, torch, CUDA, Triton versions; ``pointgeope info``
    tests      ``pytest`` of ``--tests-paths`` (``-k --tests``), with ``-n --tests-workers`` processes; first, with
               the check: whether the figures can be trusted (``--tests-limit`` 180 s: on a machine just started,
               run 8's H200, every test had reported at 120 s but pytest had not printed its summary); without
               a summary the step records the outcomes of its log's progress marks (``progress``)
    check      ``pointgeope info --check``: every Triton kernel once at the recipe's sizes against its torch path
    warm       (CUDA) the kernels of the timed steps compiled first, by processes side by side (Triton's
               cache on disk keeps them): the timed steps then measure steps, not compilers; before ``bench``'s
               steps and before ``graphs`` and ``graphs16`` (without it their first case compiles every kernel in
               one process: run 8's ``graphs`` took 46.6 s after it)
    hierarchy  (CUDA) ``bench_hierarchy.py``: the whole hierarchy at 2 and 16 x 80k (Triton, and at 2 the host's
               numba + pykdtree beside it: the same samples and neighbours?), the Triton ops of the first
               stages alone, the FPS kernels and settings (rounds per chunk and round size, stream)
               and the kNN settings, each checked equal to the default's
    bench      ``bench_train_step.py``: 2 x 80k points, ``--amp`` (float32 by default, as published), rpe /
               geope / lingeope: the step with the hierarchy given, built in line by the model, and built
               beside the step on a second stream (training's path), peak memory, the top kernels of one step
    bench_bf16 (CUDA) the same under bf16 autocast (given and beside)
    bench16    (CUDA) the published recipe's batch, 16 x 80k float32, rpe and geope (given and beside); with
               the published test, every fold's time and the longest (``fold_estimate.py``: each fold's steps
               follow from ``--fold-config``'s loop, batch and epochs and its training rooms)
    published  ``bench_evaluate.py --published``: the published test (every fragment) of one
               ``synth --size bench`` room with ``configs/s3dis/pt_geope.yaml``: seconds per room, points
               and point predictions per second, peak GPU memory
    published_bf16 (CUDA) the same test in bf16 (``eval.amp=bf16``), then once in float32 on the same
               network: both times and the share of points whose voted class agrees
    norm_op    (CUDA) ``bench_norm.py``: batch norm + ReLU and the plain norm (no ReLU) alone, torch's against
               the fused op, forward + backward at the published batch's row counts and widths, bf16 and float32;
               the plain norm in a padded batch, the kernel against the torch ops' prefix statistics, eager
               and as a CUDA graph; and the blocks' tail (norm, residual add, ReLU: ``residual_norm.py``), torch's
               against the kernels, training and eval (``--no-norm-op`` leaves it out)
    norm       (CUDA) ``bench_train_step.py --kernels torch_norm default``: the step at ``--norm-clouds`` x
               ``--points`` (rpe, geope), bf16 and float32, with torch's batch norms and with the fused ones
               (``norm.py``: batch norm and its ReLU as one Triton kernel, the CUDA default since run 6, and
               the plain norm), interleaved; ``vs_torch_norm`` is the ratio; the top kernels of each
    loader     (CUDA) ``bench_loader_compare.py --workers-only``: ``--loader-workers`` (8) loader workers at once on
               the node's CPU, each making 80k-point blocks and their hierarchies (``data.hierarchy: loader``);
               ``batch_s``, their time for the 16 samples of the recipe's batch, against the step's
    graphs     (CUDA) ``bench_graphs.py``: the given-hierarchy step at ``--clouds`` x ``--points`` (rpe, geope;
               float32, bf16) eager and as a CUDA graph of its padded batch (``train.cuda_graphs``), and the padded
               step eagerly, each padded one with its third norm on the plain kernel (the default) and on the torch
               ops' prefix statistics (the former default), interleaved: the times, their ratios
               (``graph_vs_prefix_ops``, ``padded_vs_prefix_ops``), the recordings' seconds and memory, the losses'
               agreement
    graphs16   (CUDA) the same at the recipe's batch, ``--norm-clouds`` (16) x ``--points``, in ``--graphs16-amps``
               (bf16: float32's eager peak and the graphs' pool together need an H200's memory)
    relation_backward  (CUDA) ``bench_relation_backward.py``: the attention's backward (standard GeoPE's and the
               plain relation, the aggregation) summed with atomics and by source point, at every stage of the
               16 x 80k batch, float32 and bf16, each checked equal; the sorted kernels' tiles swept at stages
               0 and 1
    ptv3, ptv3_test  (``--no-ptv3`` skips them; ``gpu_check_ptv3.py``) PTv3's recipe step of ``none``, ``geope``,
               ``point3drope`` in float32 and bf16 (time, peak memory), and PTv3's 10-view test of one room
    kernels    (``--kernels``) ``bench_train_step.py --kernels torch triton``: the same step per preset on the
               torch and the fused (Triton) attention kernels, in ``--kernel-amps`` (float32 and bf16)
    train      (``--train``) ``pointgeope synth --size tiny`` + ``prepare``, then ``train.py --config
               configs/demo.yaml --test-area 5 train.epochs=1`` on the device: seconds and the log's pts/s
               (train.py ends with the fold's full-resolution evaluation)
    evaluate   (``--evaluate``, after ``--train``) ``pointgeope evaluate`` of that run: seconds per room
    predict    (``--predict``, after ``--train``) ``pointgeope predict`` of that run on its test area's
               ``Area_5.h5`` (every room), on the device: seconds per room
    ddp        (``--ddp``, after ``--train``) one epoch of the same fold with ``torchrun --nproc_per_node 2``
               (NCCL) where two GPUs are visible; recorded as skipped, with the reason, on one GPU

``--device cpu`` hides every GPU from the steps (``CUDA_VISIBLE_DEVICES=``): the test suite runs the
script that way, small. Results: ``--out`` (default ``bench/results/gpu.json``), logs beside it in
``gpu_logs/``.

Usage: bench/gpu_check.sh [--train] [--evaluate] [--predict] [--ddp] [--kernels] [--device cpu]
       [--points 80000] [--budget 540] [--no-tests] [--no-hierarchy] [--no-relation-backward] [--no-bench]
       [--no-published] [--no-check] [--no-norm] [--no-norm-op] [--no-graphs] [--no-graphs16] [--no-loader]
       [--no-ptv3]

One call a device session (``bash bench/gpu_wheels.sh`` here first, then carry ``.whl``; ``--budget 480``, the
run tool's timeout 570 s): the steps run in the order of :func:`plan`, and those the budget leaves out are
recorded as skipped (``bench/gpu_check.sh``'s header)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fold_estimate import estimate, recipe
from gpu_check_demo import step_ddp, step_evaluate, step_predict, step_train
from gpu_check_paths import (
    step_graphs,
    step_graphs16,
    step_kernels,
    step_loader,
    step_norm,
    step_norm_op,
    step_relation_backward,
)
from gpu_check_ptv3 import add_ptv3_args, ptv3_steps
from gpu_runner import REPO, Check, published_test, result_path, run_with_result

RESULTS = REPO / "bench" / "results" / "gpu.json"

ENV_PROBE = """
import json, platform, torch
info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "cpu_threads": torch.get_num_threads()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), gpu_count=torch.cuda.device_count())
try:
    import triton
    info["triton"] = triton.__version__
except Exception as err:
    info["triton"] = f"not importable: {err}"
print("ENV " + json.dumps(info))
"""


def step_info(check: Check, py: str) -> None:
    step = check.run("info", [py, "-c", ENV_PROBE], 120, label=f"{py} -c <versions of Python, torch, CUDA, Triton>")
    line = next((ln for ln in step["tail"].splitlines() if ln.startswith("ENV ")), None)
    if line:
        check.result["machine"] = json.loads(line[4:])
    check.run("pointgeope_info", [py, "-m", "pointgeope", "info"], check.args.info_limit)
    check.write()


def step_tests(check: Check, py: str) -> None:
    a = check.args
    workers = ["-n", str(a.tests_workers)] if a.tests_workers > 1 else ["-p", "no:xdist"]
    step = check.run("tests", [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *workers,
                               *(["-k", a.tests] if a.tests else []), *a.tests_paths], a.tests_limit)
    summary = re.findall(r"(\d+ (?:passed|failed|error|skipped|deselected)\S*(?:, \d+ \w+)*) in [\d.]+s", step["tail"])
    step["summary"] = summary[-1] if summary else None
    if step["summary"] is None:           # e.g. the limit ran out before pytest's summary: what had reported
        step["progress"] = progress_marks((check.logs / step["log"]).read_text(errors="replace"))
    if step["rc"] == 5:                   # pytest: no test selected (e.g. no CUDA device)
        step["ok"] = True
    check.write()


MARKS = {".": "passed", "F": "failed", "E": "error", "s": "skipped", "x": "xfailed", "X": "xpassed"}


def progress_marks(log: str) -> dict[str, int]:
    """The outcomes of the tests that reported, counted from ``pytest -q``'s progress lines (``..s.F  [ 42%]``):
    ``{"passed": 941, "skipped": 124, ..., "reported": 1065, "percent": 100}``, zero counts left out; what a run
    cut short before its summary (run 8's tests at 120 s) had done."""
    lines = re.findall(r"^([.FEsxX]+) *\[ *(\d+)%\]", log, flags=re.M)
    marks = "".join(line for line, _ in lines)
    counts = {name: marks.count(mark) for mark, name in MARKS.items() if mark in marks}
    return {**counts, "reported": len(marks), "percent": int(lines[-1][1]) if lines else 0}


def _bench_cmd(check: Check, py: str, data: Path, limit: float, clouds: int, amp: str, presets: list[str],
               in_model: bool = True) -> list[str]:
    a = check.args
    return [py, "bench/bench_train_step.py", "--out", str(data), "--device", "cpu" if a.device == "cpu" else "cuda",
            "--points", str(a.points), "--clouds", str(clouds), "--amp", amp, "--reps", str(a.reps),
            "--warmup", str(a.warmup), "--budget", str(max(20, min(limit, check.left()) - 30)),
            "--beside-steps", str(a.beside_steps), "--presets", *presets, "--hierarchy-clouds",
            *map(str, a.hierarchy_clouds), *([] if in_model else ["--no-in-model"]),
            *(["--profile"] if a.profile else []), *(["--no-point-ops"] if a.device == "cuda" else [])]


def step_bench(check: Check, py: str) -> None:
    """The step at 2 x ``--points`` with ``--amp``: hierarchy given, in line, beside (``bench_train_step``)."""
    a = check.args
    data = result_path(check, "bench_train_step.json")
    run_with_result(check, "bench", _bench_cmd(check, py, data, a.bench_limit, a.clouds, a.amp, a.presets),
                    a.bench_limit, data)


def step_bench_bf16(check: Check, py: str) -> None:
    a = check.args
    data = result_path(check, "bench_train_step_bf16.json")
    cmd = _bench_cmd(check, py, data, a.bench_bf16_limit, a.clouds, "bf16", a.presets, in_model=False)
    run_with_result(check, "bench_bf16", cmd, a.bench_bf16_limit, data)


def step_bench16(check: Check, py: str) -> None:
    """The published recipe's batch (16 clouds, float32), given and beside, and the fold-time estimate."""
    a = check.args
    data = result_path(check, "bench_train_step_16.json")
    cmd = _bench_cmd(check, py, data, a.bench16_limit, 16, "none", ["rpe", "geope"], in_model=False)
    run_with_result(check, "bench16", cmd, a.bench16_limit, data)


def fold_estimate(check: Check) -> None:
    """Every fold's time of the published recipe (``--fold-config``) from bench16's step and the published
    test, and the longest (``fold_estimate.py``: the formula; ``fold_h`` null with ``why`` when either is
    missing or bench16 ran another batch than the recipe's)."""
    spec = recipe(REPO / check.args.fold_config)
    check.result["fold_estimate"] = estimate(check.result["steps"], spec)
    check.write()


def step_warm(check: Check, py: str) -> None:
    """The kernels of the timed steps compiled first, ``--warm-jobs`` processes side by side (one per preset
    and precision, the hierarchy's settings, the relations' backward and its tiles), so that the timed steps
    measure no compiler."""
    a = check.args
    scratch = check.logs / "warm"                        # the jobs' JSON, thrown away (never os.devnull:
    scratch.mkdir(exist_ok=True)                          # the scripts replace their output file)
    jobs = [[py, "bench/bench_train_step.py", "--out", str(scratch / f"{pe}_{amp}.json"), "--device", "cuda",
             "--points", str(a.points), "--clouds", "2", "--amp", amp, "--presets", pe, "--warmup", "1",
             "--warm-only", "--beside-steps",
             "1", "--hierarchy-clouds"] for pe in a.presets for amp in ("none", "bf16")]
    if not a.no_hierarchy:
        jobs.append([py, "bench/bench_hierarchy.py", "--out", str(scratch / "hierarchy.json"), "--device", "cuda",
                     "--clouds", "2", "--points", str(a.points), "--backends", "triton", "cpu", "--reps", "1"])
    if not a.no_relation_backward:              # the same kernels and tiles, at 2 clouds, one job a dtype
        jobs += [[py, "bench/bench_relation_backward.py", "--out", str(scratch / f"relation_backward_{dtype}.json"),
                  "--device", "cuda", "--clouds", "2", "--points", str(a.points), "--reps", "1", "--dtypes", dtype,
                  *sweep] for dtype, sweep in (("float32", ["--sweep-stages"]), ("bfloat16", []))]
    start, limit = time.perf_counter(), max(10.0, min(a.warm_limit, check.left()))
    log = check.logs / "warm.log"
    with open(log, "w") as f:
        procs = [subprocess.Popen(cmd, cwd=REPO, env=check.env, stdout=f, stderr=subprocess.STDOUT) for cmd in jobs]
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(1.0, limit - (time.perf_counter() - start))))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append("timeout")
    check.result["steps"]["warm"] = {"ok": all(c == 0 for c in codes), "rc": codes, "jobs": len(jobs),
                                     "seconds": round(time.perf_counter() - start, 2), "log": log.name,
                                     "tail": log.read_text(errors="replace")[-1500:]}
    check.write()


def step_check(check: Check, py: str) -> None:
    check.run("check", [py, "-m", "pointgeope", "info", "--check"], check.args.check_limit)


def step_hierarchy(check: Check, py: str) -> None:
    """``bench_hierarchy.py`` on CUDA: the Triton ops of the first stages alone and the FPS/kNN kernel
    settings, each checked equal to the default's (which settings to make the default; issue 19)."""
    a = check.args
    data = result_path(check, "bench_hierarchy.json")
    cmd = [py, "bench/bench_hierarchy.py", "--out", str(data), "--device", "cuda", "--clouds", "2", "16",
           "--points", str(a.points), "--backends", "triton", "cpu", "--cpu-clouds", "2", "--reps", "2"]
    run_with_result(check, "hierarchy", cmd, a.hierarchy_limit, data)


def step_published(check: Check, py: str) -> None:
    """``bench_evaluate.py --published``: the published test (every fragment) of one synth room."""
    a = check.args
    published_test(check, py, "published", a.eval_size, a.eval_config, a.eval_reps, a.eval_overrides,
                   a.published_limit)


def step_published_bf16(check: Check, py: str) -> None:
    """The published test in bf16, and the agreement of its votes with float32 (``--agree-amp none``)."""
    a = check.args
    published_test(check, py, "published_bf16", a.eval_size, a.eval_config, a.eval_reps,
                   ["eval.amp=bf16", *a.eval_overrides], a.published_bf16_limit, "--agree-amp", "none")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--device", choices=("cuda", "cpu"), default="cuda")
    add("--out", type=Path, default=RESULTS)
    add("--budget", type=float, default=540.0, help="seconds for all steps together")
    add("--tests", default="", help="pytest -k expression of the tests step (default: every test of --tests-paths)")
    add("--tests-paths", nargs="+", default=["tests/model", "tests/engine/test_build.py",
                                             "tests/engine/test_evaluate.py", "tests/test_geope.py",
                                             "tests/test_metrics.py"])
    add("--tests-workers", type=int, default=12, help="pytest-xdist processes of the tests step (1: none)")
    for name in ("tests", "bench", "hierarchy", "relation_backward", "published", "check", "norm", "norm_op",
                 "graphs", "graphs16", "loader"):
        add(f"--no-{name.replace('_', '-')}", action="store_true")
    add("--hierarchy-clouds", type=int, nargs="*", default=[],
        help="bench: batch sizes of bench_train_step's hierarchy-per-backend timings (default none)")
    add("--eval-size", default="bench", help="synth --size of the published-test room")
    add("--eval-config", default="configs/s3dis/pt_geope.yaml")
    add("--eval-reps", type=int, default=2,
        help="published test: repetitions, the minimum counts (the first room compiles and tunes the kernels)")
    add("--eval-overrides", nargs="*", default=[], metavar="section.key=value",
        help="config overrides of the published test (the test suite shrinks it)")
    for name in ("train", "evaluate", "predict", "ddp"):
        add(f"--{name}", action="store_true")
    add("--kernels", action="store_true", help="the attention kernels' comparison, torch and Triton, float32 and bf16")
    add("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "pointgeope_gpu_check")
    add("--train-overrides", nargs="*", default=[], metavar="section.key=value",
        help="more config overrides of the --train run (the test suite shortens it)")
    add("--threads", type=int, help="OMP_NUM_THREADS of every step (default: unset)")
    add("--points", type=int, default=80_000)
    add("--clouds", type=int, default=2)
    add("--loader-workers", type=int, default=8, help="loader: workers busy at once on the node's CPU")
    add("--norm-clouds", type=int, default=16, help="norm, graphs16: clouds of the recipe's step")
    add("--graphs16-amps", nargs="+", choices=("none", "bf16"), default=["bf16"], help="graphs16's precisions")
    add("--amp", default="none", help="bench's precision (none: float32, as published)")
    add("--presets", nargs="+", default=["rpe", "geope", "lingeope"])
    add("--reps", type=int, default=2)
    add("--warmup", type=int, default=1)
    add("--beside-steps", type=int, default=3)
    add("--profile", action=argparse.BooleanOptionalAction, default=True)
    add("--fold-config", type=Path, default=Path("configs/s3dis/pt_geope.yaml"),
        help="fold_estimate: the recipe whose loop, batch_size, epochs and voxel_max a fold's time follows")
    limits = dict(info=60, warm=100, hierarchy=55, relation_backward=90, bench=60, bench_bf16=45, bench16=60,
                  published=45, tests=180, check=40, train=240, evaluate=120, kernels=300, published_bf16=45,
                  norm_op=40, norm=100, graphs=110, graphs16=150, loader=60)  # graphs: 2 graphs, 2 padded steps a case
    for name, limit in limits.items():
        add(f"--{name.replace('_', '-')}-limit", type=float, default=float(limit))
    add("--kernel-presets", nargs="+", default=["rpe", "geope", "lingeope"])
    add("--kernel-amps", nargs="+", choices=("none", "bf16"), default=["none", "bf16"],
        help="kernels' precisions (the CPU runs bf16 in float32: the same step again)")
    add_ptv3_args(parser)
    return parser.parse_args()


def plan(args: argparse.Namespace) -> list:
    """The steps to run, in the order of what they decide (the module docstring): a device session has 15
    minutes with the machine's start, so one call under ``--budget`` runs the first ones and records the rest
    as skipped; a later session passes ``--no-<step>`` for what an earlier one measured after the last kernel
    change."""
    cuda, bench = args.device == "cuda", not args.no_bench
    steps = [("info", step_info)]
    # the tests and the kernel check first: they decide whether the figures can be trusted, and a call cut
    # short by its budget must have them; then the kernels of the timed steps, compiled side by side
    steps += [] if args.no_tests else [("tests", step_tests)]
    steps += [("check", step_check)] if cuda and not args.no_check else []
    graphs = not (args.no_graphs and args.no_graphs16)      # their first case would compile in one process
    steps += [("warm", step_warm)] if cuda and (bench or graphs) else []
    # the paths whose measure decides a default (run 6: graphs stay opt-in, the fused batch norm became the
    # default, the atomic backward stays; run 8: graphs stay off at the recipe's batch, the plain norm opt-in):
    # CUDA graphs at 2 x 80k, the recipe's step (the fold time, geope / rpe, beside / given), the graph at the
    # recipe's batch, the fused batch norms, the backward by source point
    steps += [("graphs", step_graphs)] if cuda and not args.no_graphs else []
    steps += [("bench16", step_bench16)] if cuda and bench else []
    steps += [("graphs16", step_graphs16)] if cuda and not args.no_graphs16 else []
    # the fused batch norms alone, then in the recipe's step: norm_op (a few seconds) runs here, not among the
    # last steps the budget drops, as the only timing of the op (the plain norm included, unpadded and padded)
    steps += [("norm_op", step_norm_op)] if cuda and not args.no_norm_op else []
    steps += [("norm", step_norm)] if cuda and not args.no_norm else []
    steps += [("relation_backward", step_relation_backward)] if cuda and not args.no_relation_backward else []
    # then the targets measured before, again after the last kernel change, and the loader's route
    steps += [] if not bench else [("bench", step_bench)]
    steps += [] if args.no_published else [("published", step_published)]
    steps += [("fold_estimate", lambda check, py: fold_estimate(check))] if cuda and bench else []
    steps += [("published_bf16", step_published_bf16)] if cuda and not args.no_published else []
    steps += [("hierarchy", step_hierarchy)] if cuda and not args.no_hierarchy else []
    steps += [("loader", step_loader)] if cuda and not args.no_loader else []
    steps += [("bench_bf16", step_bench_bf16)] if cuda and bench else []
    steps += ptv3_steps(args)                                 # PTv3's recipe step and test (gpu_check_ptv3.py)
    steps += [("kernels", step_kernels)] if args.kernels else []
    steps += [(name, fn) for name, fn in (("train", step_train), ("evaluate", step_evaluate),
                                          ("predict", step_predict), ("ddp", step_ddp)) if getattr(args, name)]
    return steps


def main() -> int:
    args = parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    py = os.environ.get("PYTHON", sys.executable)
    check = Check(args)
    check.result["options"] = {k: str(v) for k, v in vars(args).items()}
    for name, fn in plan(args):
        if check.left() < 15:
            check.result["steps"][name] = {"ok": False, "rc": None, "error": "skipped: out of --budget"}
            continue
        try:
            fn(check, py)
        except Exception as err:  # noqa: BLE001 - a bug of this script: recorded, and the next step still runs
            check.result["steps"].setdefault(name, {}).update(ok=False, error=f"{type(err).__name__}: {err}")
        check.write()
    failed = [n for n, s in check.result["steps"].items() if not s.get("ok", True)]
    check.result["failed_steps"] = failed
    check.write()
    print(f"[gpu_check] wrote {args.out} in {check.result['seconds_total']} s; failed steps: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
