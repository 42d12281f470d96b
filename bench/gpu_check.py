"""The GPU check: in a few minutes on one GPU, the suite's CUDA tests and the full network's training step.

Steps, each a subprocess with its own time limit (a failure or a timeout is recorded and the next step
runs), the JSON rewritten after every step:

    info       GPU name, Python, torch, CUDA, Triton versions; ``pointgeope info``
    tests      ``pytest -k cuda`` (the ``[cuda]`` variants of the device tests, and tests named for CUDA)
    bench      ``bench_train_step.py``: 2 x 80k points (halved until it fits), bf16 autocast, rpe / geope /
               lingeope: step time with the loader's hierarchy and in the model, peak memory, the point
               ops' share, the top kernels of one step; the hierarchy alone per backend pair at 2 and
               16 x 80k, on the host and on the device
    published  ``bench_evaluate.py --published``: the published test (every fragment) of one
               ``synth --size bench`` room with ``configs/s3dis/pt_geope.yaml``: seconds per room, points
               and point predictions per second, peak GPU memory
               lingeope: step time, peak memory, the point ops' share, the top kernels of one step
    hierarchy  (CUDA) ``bench_hierarchy.py``: the Triton FPS/kNN/3-NN ops of the first stages alone at 2 and
               16 x 80k, and the kernels' settings (block sizes, warps, pruned vs stream FPS), each checked
               equal to the default's
    kernels    ``bench_train_step.py --kernels torch triton``: the same step per preset on today's and the
               fused (Triton) attention kernels, float32 and bf16, top kernels of each (``--no-kernels``;
               with ``--device cpu`` only by ``--kernels``, and torch's kernels only)
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
``gpu_logs/``; copies of both go to ``$OUT`` when that variable is set.

Usage: bench/gpu_check.sh [--train] [--evaluate] [--predict] [--ddp] [--device cpu] [--points 80000] [--budget 450]
       [--no-tests] [--no-hierarchy] [--no-kernels] [--no-bench] [--no-published]

The check of issues 19 and 20 in one device call under its 10-minute limit (``bash bench/gpu_wheels.sh`` here
first, then carry ``.whl``; the run tool's timeout 590 s):

    PYTHON=python3 bash bench/gpu_check.sh --budget 540 --tests-limit 100 --hierarchy-limit 80 \
        --kernels-limit 130 --bench-limit 120 --published-limit 90
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


class Check:
    """Runs the steps and keeps the JSON up to date (here and under ``$OUT``)."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.out = args, args.out
        self.logs = self.out.parent / "gpu_logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        self.env = dict(os.environ, PYTHONPATH=path)
        if args.device == "cpu":
            self.env["CUDA_VISIBLE_DEVICES"] = ""
        if args.threads:
            self.env["OMP_NUM_THREADS"] = str(args.threads)
        self.result = {"device": args.device, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "host": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                "load_average_start": os.getloadavg()},
                       "steps": {}}

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.start)

    def write(self) -> None:
        self.result["seconds_total"] = round(time.perf_counter() - self.start, 1)
        self.result["host"]["load_average_now"] = os.getloadavg()
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1))
        os.replace(tmp, self.out)
        target = os.environ.get("OUT")
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.out, Path(target) / self.out.name)
            shutil.copytree(self.logs, Path(target) / self.logs.name, dirs_exist_ok=True)

    def run(self, name: str, cmd: list[str], limit: float, label: str | None = None) -> dict:
        """Run ``cmd`` with at most ``limit`` seconds (less if the budget is short); record and return it."""
        limit = max(10.0, min(limit, self.left()))
        log = self.logs / f"{name}.log"
        label = label or " ".join(cmd)
        print(f"[gpu_check] {name}: {label} (limit {limit:.0f} s)", flush=True)
        start = time.perf_counter()
        with open(log, "w") as f:
            try:
                rc = subprocess.run(cmd, cwd=REPO, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=limit).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        seconds = round(time.perf_counter() - start, 2)
        text = log.read_text(errors="replace")
        step = {"ok": rc == 0, "rc": rc, "seconds": seconds, "command": label, "log": str(log.name),
                "tail": text[-1500:]}
        print(f"[gpu_check] {name}: rc={rc} in {seconds} s", flush=True)
        self.result["steps"].setdefault(name, {}).update(step)
        self.write()
        return self.result["steps"][name]


def result_path(check: Check, name: str) -> Path:
    """Where a benchmark step's script writes its JSON (``gpu_logs/name``), emptied first."""
    data = check.out.parent / "gpu_logs" / name
    data.unlink(missing_ok=True)
    return data


def run_with_result(check: Check, name: str, cmd: list[str], limit: float, data: Path) -> None:
    """Run a benchmark step whose script writes JSON to ``data``; whatever it measured goes into the step,
    also after a failure or a timeout (the scripts rewrite their JSON after every case)."""
    step = check.run(name, cmd, limit)
    if data.exists():
        step["result"] = json.loads(data.read_text())
    check.write()


def step_info(check: Check, py: str) -> None:
    step = check.run("info", [py, "-c", ENV_PROBE], 120, label=f"{py} -c <versions of Python, torch, CUDA, Triton>")
    line = next((ln for ln in step["tail"].splitlines() if ln.startswith("ENV ")), None)
    if line:
        check.result["machine"] = json.loads(line[4:])
    check.run("pointgeope_info", [py, "-m", "pointgeope", "info"], 60)
    check.write()


def step_tests(check: Check, py: str) -> None:
    step = check.run("tests", [py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", check.args.tests, "tests"],
                     check.args.tests_limit)
    summary = re.findall(r"(\d+ (?:passed|failed|error|skipped|deselected)\S*(?:, \d+ \w+)*) in [\d.]+s", step["tail"])
    step["summary"] = summary[-1] if summary else None
    if step["rc"] == 5:                   # pytest: no test selected (e.g. no CUDA device)
        step["ok"] = True
    check.write()


def step_bench(check: Check, py: str) -> None:
    a = check.args
    data = result_path(check, "bench_train_step.json")
    cmd = [py, "bench/bench_train_step.py", "--out", str(data), "--device", "cpu" if a.device == "cpu" else "cuda",
           "--points", str(a.points), "--clouds", str(a.clouds), "--amp", a.amp, "--reps", str(a.reps),
           "--warmup", str(a.warmup), "--budget", str(max(30, min(a.bench_limit, check.left()) - 60)), "--profile",
           "--hierarchy-clouds", *map(str, a.hierarchy_clouds)]
    run_with_result(check, "bench", cmd, a.bench_limit, data)


def step_hierarchy(check: Check, py: str) -> None:
    """``bench_hierarchy.py`` on CUDA: the Triton ops of the first stages alone and the FPS/kNN kernel
    settings, each checked equal to the default's (which settings to make the default; issue 19)."""
    a = check.args
    data = result_path(check, "bench_hierarchy.json")
    cmd = [py, "bench/bench_hierarchy.py", "--out", str(data), "--device", "cuda", "--clouds", "2", "16",
           "--points", str(a.points), "--backends", "triton", "--reps", "3"]
    run_with_result(check, "hierarchy", cmd, a.hierarchy_limit, data)


def step_published(check: Check, py: str) -> None:
    """``bench_evaluate.py --published``: the published test (every fragment) of one synth room."""
    a = check.args
    data = result_path(check, "bench_evaluate_published.json")
    cmd = [py, "bench/bench_evaluate.py", "--published", "--out", str(data), "--device",
           "cpu" if a.device == "cpu" else "cuda", "--size", a.eval_size, "--config", a.eval_config,
           "--reps", str(a.eval_reps), "--set", *a.eval_overrides]
    run_with_result(check, "published", cmd, a.published_limit, data)


def step_kernels(check: Check, py: str) -> None:
    """``bench_train_step.py --kernels torch triton``: every preset's step on today's and the fused attention
    kernels, float32 and bf16, with the top kernels of each (issue 20)."""
    a = check.args
    data = result_path(check, "bench_kernels.json")
    cmd = [py, "bench/bench_train_step.py", "--out", str(data), "--device", "cpu" if a.device == "cpu" else "cuda",
           "--points", str(a.points), "--clouds", str(a.clouds), "--reps", str(a.reps), "--warmup", str(a.warmup),
           "--kernels", "torch", *([] if a.device == "cpu" else ["triton"]), "--amps", "none", "bf16", "--presets", *a.kernel_presets,
           "--budget", str(max(30, min(a.kernels_limit, check.left()) - 90)), "--profile"]
    run_with_result(check, "kernels", cmd, a.kernels_limit, data)


def step_train(check: Check, py: str) -> None:
    a = check.args
    work = a.work
    raw, root, runs = work / "raw", work / "s3dis", work / "runs"
    shutil.rmtree(work, ignore_errors=True)
    device = "cpu" if a.device == "cpu" else "cuda"
    check.run("synth", [py, "-m", "pointgeope", "synth", str(raw), "--size", "tiny"], 120)
    check.run("prepare", [py, "-m", "pointgeope", "prepare", str(raw), str(root)], 120)
    step = check.run("train", [py, "train.py", "--config", "configs/demo.yaml", "--test-area", "5",
                               "--data-root", str(root), "--run-dir", str(runs), "train.epochs=1",
                               f"train.device={device}", "train.progress=false", *a.train_overrides], a.train_limit)
    log = runs / "area_5" / "log.txt"
    if log.exists():
        text = log.read_text()
        step["points_per_s"] = [float(v.replace(",", "")) for v in re.findall(r"([\d,]+) pts/s", text)]
        step["log_txt"] = text[-2000:]
    check.write()


def step_evaluate(check: Check, py: str) -> None:
    run = check.args.work / "runs" / "area_5"
    if not (run / "last.pt").exists():
        check.result["steps"]["evaluate"] = {"ok": False, "rc": None, "error": f"no {run / 'last.pt'} (run --train)"}
        check.write()
        return
    device = "cpu" if check.args.device == "cpu" else "cuda"
    step = check.run("evaluate", [py, "-m", "pointgeope", "evaluate", str(run), f"train.device={device}"],
                     check.args.evaluate_limit)
    metrics, predictions = run / "metrics.json", run / "predictions" / "Area_5.h5"
    if step["ok"] and metrics.exists() and predictions.exists():
        import h5py

        m = json.loads(metrics.read_text())
        with h5py.File(predictions, "r") as f:
            rooms = len(f.keys())
        step.update(rooms=rooms, points=m.get("num_points"), eval_seconds=m.get("eval_seconds"), miou=m.get("miou"))
        step["eval_seconds_per_room"] = round(m["eval_seconds"] / rooms, 3) if rooms else None
        step["command_seconds_per_room"] = round(step["seconds"] / rooms, 3) if rooms else None
    check.write()


def step_predict(check: Check, py: str) -> None:
    run, area = check.args.work / "runs" / "area_5", check.args.work / "s3dis" / "Area_5.h5"
    if not (run / "last.pt").exists():
        check.result["steps"]["predict"] = {"ok": False, "rc": None, "error": f"no {run / 'last.pt'} (run --train)"}
        check.write()
        return
    device = "cpu" if check.args.device == "cpu" else "cuda"
    out = check.args.work / "predict"
    step = check.run("predict", [py, "-m", "pointgeope", "predict", str(run), str(area), "--out", str(out),
                                 "--device", device, "--format", "npy"], check.args.evaluate_limit)
    rooms = len(list(out.rglob("*_pred.npy"))) if out.exists() else 0
    step.update(rooms=rooms, seconds_per_room=round(step["seconds"] / rooms, 3) if rooms else None)
    check.write()


def step_ddp(check: Check, py: str) -> None:
    gpus = check.result.get("machine", {}).get("gpu_count", 0)
    if check.args.device == "cpu" or gpus < 2:
        check.result["steps"]["ddp"] = {"ok": True, "skipped": f"needs two GPUs, {gpus} visible"}
        check.write()
        return
    root, runs = check.args.work / "s3dis", check.args.work / "runs_ddp"
    cmd = [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "train.py", "--config",
           "configs/demo.yaml", "--test-area", "5", "--data-root", str(root), "--run-dir", str(runs),
           "train.epochs=1", "train.device=cuda", "train.progress=false", *check.args.train_overrides]
    check.run("ddp", cmd, check.args.train_limit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all steps together")
    parser.add_argument("--tests", default="cuda", help="pytest -k expression of the tests step")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--no-bench", action="store_true")
    parser.add_argument("--hierarchy-clouds", type=int, nargs="*", default=[2, 16],
                        help="bench: batch sizes of the hierarchy-per-backend timings (none: skip them)")
    parser.add_argument("--no-hierarchy", action="store_true", help="skip the Triton point ops' settings (CUDA)")
    parser.add_argument("--hierarchy-limit", type=float, default=120.0)
    parser.add_argument("--no-published", action="store_true", help="skip the published test of one room")
    parser.add_argument("--eval-size", default="bench", help="synth --size of the published-test room")
    parser.add_argument("--eval-config", default="configs/s3dis/pt_geope.yaml")
    parser.add_argument("--eval-reps", type=int, default=2, help="published test: repetitions (the minimum counts)")
    parser.add_argument("--eval-overrides", nargs="*", default=[], metavar="section.key=value",
                        help="config overrides of the published test (the test suite shrinks it)")
    parser.add_argument("--published-limit", type=float, default=180.0)
    parser.add_argument("--train", action="store_true", help="synth tiny + prepare + train.py one epoch")
    parser.add_argument("--evaluate", action="store_true", help="pointgeope evaluate the --train run")
    parser.add_argument("--predict", action="store_true", help="pointgeope predict with the --train run")
    parser.add_argument("--ddp", action="store_true", help="the --train fold with 2 processes (NCCL), 2 GPUs")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "pointgeope_gpu_check")
    parser.add_argument("--train-overrides", nargs="*", default=[], metavar="section.key=value",
                        help="more config overrides of the --train run (the test suite shortens it)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of every step (default: unset)")
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--amp", default="bf16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tests-limit", type=float, default=180.0)
    parser.add_argument("--bench-limit", type=float, default=240.0)
    parser.add_argument("--train-limit", type=float, default=240.0)
    parser.add_argument("--evaluate-limit", type=float, default=120.0)
    parser.add_argument("--kernels", action=argparse.BooleanOptionalAction, default=None,
                        help="the attention kernels' comparison (default: on with --device cuda; the CPU runs torch's)")
    parser.add_argument("--kernels-limit", type=float, default=300.0)
    parser.add_argument("--kernel-presets", nargs="+", default=["rpe", "geope", "lingeope"])
    args = parser.parse_args()
    args.train = args.train or os.environ.get("GPU_CHECK_TRAIN") == "1"
    args.evaluate = args.evaluate or os.environ.get("GPU_CHECK_EVALUATE") == "1"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    py = os.environ.get("PYTHON", sys.executable)
    check = Check(args)
    check.result["options"] = {k: str(v) for k, v in vars(args).items()}
    steps = [("info", step_info)]
    steps += [] if args.no_tests else [("tests", step_tests)]
    steps += [] if args.no_hierarchy or args.device == "cpu" else [("hierarchy", step_hierarchy)]
    kernels = args.device == "cuda" if args.kernels is None else args.kernels
    steps += [("kernels", step_kernels)] if kernels else []
    steps += [] if args.no_bench else [("bench", step_bench)]
    steps += [] if args.no_published else [("published", step_published)]
    steps += [("train", step_train)] if args.train else []
    steps += [("evaluate", step_evaluate)] if args.evaluate else []
    steps += [("predict", step_predict)] if args.predict else []
    steps += [("ddp", step_ddp)] if args.ddp else []
    for name, fn in steps:
        if check.left() < 15:
            check.result["steps"][name] = {"ok": False, "rc": None, "error": "skipped: out of --budget"}
            continue
        try:
            fn(check, py)
        except Exception as err:          # a bug of this script: recorded, and the next step still runs
            check.result["steps"].setdefault(name, {}).update(ok=False, error=f"{type(err).__name__}: {err}")
        check.write()
    failed = [n for n, s in check.result["steps"].items() if not s.get("ok")]
    check.result["failed_steps"] = failed
    check.write()
    print(f"[gpu_check] wrote {args.out} in {check.result['seconds_total']} s; failed steps: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
