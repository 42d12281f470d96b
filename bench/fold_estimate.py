"""The time of one fold of the published S3DIS recipe, from the GPU check's measured step and test.

Fold ``k`` trains on the five other areas and tests on area ``k``. An epoch is ``rooms x loop`` samples
(``data/dataset.py``) and the training loader drops the last incomplete batch (``engine/build.py``:
``drop_last=True``), so with the recipe's ``data.loop``, ``data.batch_size`` and ``train.epochs`` (read from
its config) and the rooms of each area (``pointgeope.constants.AREA_ROOMS``)::

    R_k     = sum(AREA_ROOMS) - AREA_ROOMS[k]                  training rooms of fold k
    steps_k = floor(R_k * loop / batch_size) * epochs
    hours_k = (steps_k * step_s + AREA_ROOMS[k] * room_s) / 3600

``step_s`` is bench16's step at the recipe's batch (``batch_size`` clouds of ``voxel_max`` points, float32)
with the hierarchy built beside the step, training's path on CUDA (``given_s`` where beside was not
measured; ``step_mode`` says which); ``room_s`` is the published test of one ``synth --size bench`` room
(0.85M points, every fragment), standing in for every test room. With 30 x 16 x 100 the folds take 38,200
(Area_5, the most test rooms) to 46,600 (Area_3) steps: the estimate (``fold_h``) is the longest fold, since
a target "one fold <= 4 h" holds only where every fold's does.

``fold_h`` and each fold's ``hours`` are null, with ``why``, when the test time is missing (the
``published`` step skipped, failed or not planned) or bench16 ran another batch than the recipe's (fewer
points a cloud: it halves ``--points`` when out of memory): neither is one fold's time. The parts measured
stay (``train_h`` from the step bench16 ran, ``test_h`` where the test time exists).

Usage (recompute the estimate of committed results):
    python bench/fold_estimate.py bench/results/gpu/h100_run7_gpu.json [...] [--config configs/s3dis/pt_geope.yaml]
           [--out bench/results/gpu/fold_estimates.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pointgeope.constants import AREA_ROOMS

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "s3dis" / "pt_geope.yaml"


def recipe(config: Path = RECIPE) -> dict:
    """The numbers of ``config`` a fold's time depends on: ``loop``, ``batch_size``, ``epochs``, ``voxel_max``."""
    from pointgeope.engine.config import load_config

    cfg, path = load_config(config), Path(config).resolve()
    return {"config": str(path.relative_to(REPO) if path.is_relative_to(REPO) else path), "loop": cfg.data.loop,
            "batch_size": cfg.data.batch_size, "epochs": cfg.train.epochs, "voxel_max": cfg.data.voxel_max,
            "drop_last": True}


def fold_steps(train_rooms: int, loop: int, batch_size: int, epochs: int) -> int:
    """Optimiser steps of one fold: ``floor(train_rooms * loop / batch_size) * epochs`` (last batch dropped)."""
    return (train_rooms * loop // batch_size) * epochs


def folds(step_s: float, room_s: float | None, spec: dict) -> dict:
    """Every fold's steps, test rooms and hours (``None`` without ``room_s``), keyed by its test area."""
    total, rows = sum(AREA_ROOMS.values()), {}
    for area, test_rooms in AREA_ROOMS.items():
        steps = fold_steps(total - test_rooms, spec["loop"], spec["batch_size"], spec["epochs"])
        train_h = steps * step_s / 3600
        rows[area] = {"train_rooms": total - test_rooms, "steps": steps, "test_rooms": test_rooms,
                      "train_h": train_h, "test_h": None if room_s is None else test_rooms * room_s / 3600,
                      "hours": None if room_s is None else train_h + test_rooms * room_s / 3600}
    return rows


def test_time(steps: dict) -> tuple[float | None, str | None]:
    """``(seconds per room of the published test, why it is missing)`` from the check's ``steps``."""
    published = steps.get("published")
    if published is None:
        return None, "no test time: the published step was not run (--no-published)"
    seconds = published.get("result", {}).get("seconds_per_room")
    if seconds:
        return float(seconds), None
    what = published.get("error") or f"rc {published.get('rc')}"
    return None, f"no test time: the published step gave none ({what})"


def estimate(steps: dict, spec: dict) -> dict:
    """Per preset of bench16: the step, every fold's time and the longest (``fold_h``), or ``fold_h`` null
    with ``why``. ``steps`` is the check's ``result["steps"]``, ``spec`` :func:`recipe`'s."""
    bench16 = steps.get("bench16", {}).get("result", {})
    room_s, why = test_time(steps)
    points, clouds = bench16.get("points_per_cloud"), bench16.get("clouds", spec["batch_size"])
    if points != spec["voxel_max"] or clouds != spec["batch_size"]:
        why = (f"bench16 ran {clouds} x {points} points, not the recipe's {spec['batch_size']} x {spec['voxel_max']} "
               "(it halves --points when out of memory): not one fold's step")
    out = {}
    for pe, row in bench16.get("presets", {}).items():
        mode = "beside" if row.get("beside_s") else "given"
        step_s = row.get(f"{mode}_s")
        if not step_s:
            continue
        rows = folds(step_s, room_s, spec)
        if why:                                  # not one fold's time: no fold's hours (its parts stay)
            rows = {area: {**r, "hours": None} for area, r in rows.items()}
        longest = max(rows, key=lambda a: rows[a]["train_h"] + (rows[a]["test_h"] or 0))
        out[pe] = {"step_s": step_s, "step_mode": mode, "reps": row.get("reps"), "points_per_cloud": points,
                   "clouds": clouds, "seconds_per_test_room": room_s, "recipe": spec, "folds": rows,
                   "longest": longest, "fold_h": None if why else rows[longest]["hours"], "why": why}
    return out


def table(name: str, est: dict) -> str:
    """One line per preset: the step, each fold's hours (test area: hours) and the longest."""
    lines = []
    for pe, e in est.items():
        hours = "  ".join(f"{a[-1]}: {r['hours']:.2f}" if r["hours"] is not None else f"{a[-1]}: -"
                          for a, r in e["folds"].items())
        lines.append(f"{name:<32} {pe:<6} {e['step_s']:.3f} s ({e['step_mode']}, {e['reps']} rep) "
                     f"room {e['seconds_per_test_room'] or float('nan'):.2f} s  {hours}  longest "
                     f"{e['longest']} {e['fold_h'] if e['fold_h'] is None else round(e['fold_h'], 2)}"
                     + (f"  ({e['why']})" if e["why"] else ""))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="gpu_check JSONs (gpu.json, a run's *_gpu.json)")
    parser.add_argument("--config", type=Path, default=RECIPE, help="the recipe: loop, batch_size, epochs, voxel_max")
    parser.add_argument("--out", type=Path, help="also write {file name: estimate} as JSON here")
    args = parser.parse_args()
    spec, out = recipe(args.config), {}
    for path in args.results:
        try:
            steps = json.loads(path.read_text())["steps"]
        except (OSError, ValueError, KeyError) as err:
            print(f"{path}: expected a gpu_check JSON with a 'steps' object ({type(err).__name__}: {err})",
                  file=sys.stderr)
            return 2
        out[path.name] = estimate(steps, spec)
        print(table(path.name, out[path.name]))
    if args.out:
        from bench_io import provenance, save_json
        save_json(args.out, {"provenance": provenance(None, ()),   # the commit of this formula; nothing timed
                             "formula": "hours_k = (floor(R_k * loop / batch_size) * epochs * step_s + "
                                        "AREA_ROOMS[k] * room_s) / 3600; fold_h = max_k hours_k",
                             "recipe": spec, "runs": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
