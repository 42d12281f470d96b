"""The demo pipeline steps of ``bench/gpu_check.py`` (``--train --evaluate --predict --ddp``): a tiny synthetic
S3DIS prepared, one epoch of ``configs/demo.yaml`` trained on the device, its evaluation and ``predict``, and the
same fold with two processes where two GPUs are visible."""
from __future__ import annotations

import json
import re
import shutil

from gpu_runner import Check


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
