"""The runner of ``bench/gpu_check.py``: each step a subprocess with its own time limit, recorded in one JSON that
is rewritten after every step (and with ``$OUT`` set copied there, with one archive of the logs: the device
tool returns at most 8 files, and a call cut short still returns what it measured)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from bench_io import host, save_json
from gpu_record import tree_state

REPO = Path(__file__).resolve().parents[1]

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
        # the tree as the call found it, before any step writes (its outputs under bench/results/ do not count)
        self.result = {"device": args.device, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "tree": tree_state(),
                       "host": host(),   # the load average at the start; write() adds the latest
                       "steps": {}}

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.start)

    def write(self) -> None:
        self.result["seconds_total"] = round(time.perf_counter() - self.start, 1)
        self.result["host"]["load_average_now"] = os.getloadavg()
        save_json(self.out, self.result, indent=1)
        target = os.environ.get("OUT")
        if target:                    # two files: the device tool returns at most 8 files from $OUT
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.out, Path(target) / self.out.name)
            with tarfile.open(Path(target) / f"{self.logs.name}.tgz", "w:gz") as tar:
                tar.add(self.logs, arcname=self.logs.name)

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
                                    timeout=limit, check=False).returncode
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


def published_test(check: Check, py: str, name: str, size: str, config: str, reps: int, settings: list[str],
                   limit: float, *extra: str) -> None:
    """Step ``name``: ``bench_evaluate.py --published`` (every fragment of one ``synth --size`` room) with
    ``config`` and its ``settings`` overrides on the check's device, saved as ``bench_evaluate_<name>.json``."""
    data = result_path(check, f"bench_evaluate_{name}.json")
    cmd = [py, "bench/bench_evaluate.py", "--published", "--out", str(data), "--device", check.args.device,
           "--size", size, "--config", config, "--reps", str(reps), *extra, "--set", *settings]
    run_with_result(check, name, cmd, limit, data)
