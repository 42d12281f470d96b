"""The published test of one room, for ``bench_evaluate.py --published`` (and ``--compare``, which runs it in
fresh processes on each checkout): ``vote_room`` of a ``synth --size`` room with a config, timed; the
precision it ran in; with ``--agree-amp``, the same room in another precision and how many votes agree; and a
test cut to ``eval.max_fragments`` a view projected to every fragment."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def published_room(args):
    """``coord`` float32 (metres) and ``color`` uint8 of the room the case tests: ``--room``'s ``.npz``
    (``--compare`` writes it once with this checkout's generator, so every checkout, an older one too, tests
    the same points), else ``Area_5``'s first room of ``synth --size``, sampled in memory."""
    import numpy as np

    if getattr(args, "room", None):
        with np.load(args.room) as saved:
            return saved["coord"], saved["color"]
    from data_prep.synth.dataset import synth_room

    room = synth_room(args.size, 5, 0)
    return room.coord(), room.rgb


def case_normals(cfg, coord) -> dict:
    """``{"normal": (N, 3)}`` for ``vote_room`` where the config feeds ``[rgb | normal]`` (PTv3's recipe): prepare's
    estimate, made once, outside the timing; else ``{}``, so that a checkout older than ``data.normal`` (whose
    config and ``vote_room`` know no normals; ``--compare``'s baseline) runs the case as it did."""
    if not getattr(cfg.data, "normal", False):
        return {}
    from pointgeope.data.normals import estimate_normals

    return {"normal": estimate_normals(coord)}


def published_case(args) -> dict:
    """``vote_room`` of one synthetic room with ``--config`` and ``--set`` overrides on ``--device``
    (imports whichever pointgeope PYTHONPATH names: ``--compare`` runs the same case on another checkout)."""
    import torch

    from pointgeope.engine import build, evaluate, placement
    from pointgeope.engine.config import load_config
    from pointgeope.model.kernel_check import timed

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = load_config(REPO / args.config, args.set)
    if args.variant != "auto":                      # the new path only: force one way (see --variants)
        placement.pipelined = lambda device: args.variant != "inline"
        where = "loader" if args.variant == "thread" and device.type == "cpu" else "model"   # thread, or model
        placement.hierarchy_place = lambda cfg, dev, *a, **k: placement.HierarchyPlace(where, args.variant, dev)
    model = build.model(cfg).to(device).eval()
    forwarded = []                                  # points of every forward: the point predictions made
    model.register_forward_pre_hook(lambda module, inputs: forwarded.append(int(inputs[0].shape[0])))
    coord, color = published_room(args)
    normal = case_normals(cfg, coord)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def one_room():
        forwarded.clear()                           # the last room's forwards are the ones counted
        return evaluate.vote_room(model, coord, color, cfg, device, seed=0, **normal)

    result, rows = timed(one_room, device, args.reps, warmup=0)   # the package's one timer
    n, used = coord.shape[0], min(result.fragments[0], cfg.eval.max_fragments or result.fragments[0])
    seconds = min(rows)
    out = {"size": args.size, "points": int(n), "fragments": result.fragments[0], "fragments_run": used,
           "predictions": sum(forwarded), "forwards": len(forwarded), "seconds_per_room": round(seconds, 3),
           "seconds_all": rows, "points_per_s": round(n / seconds),
           "predictions_per_s": round(sum(forwarded) / seconds),
           "batch_points": cfg.eval.batch_points, "device": str(device), "threads": torch.get_num_threads(),
           "variant": args.variant, "config": args.config, "set": args.set, "amp": tested_precision(cfg, device),
           "train_amp": cfg.train.amp, "eval_amp": cfg.eval.amp}
    out.update(projected(result.fragments, cfg.eval.max_fragments, seconds))
    if device.type == "cuda":
        out.update(peak_gpu_mib=round(torch.cuda.max_memory_allocated() / 2**20),
                   gpu=torch.cuda.get_device_name(0))
    if args.agree_amp:                              # after the counts and the peak: they are the timed run's
        out.update(votes_agreement(args, model, coord, color, cfg, device, result.scores, normal))
    return out


def tested_precision(cfg, device) -> str:
    """The precision the test ran in (``build.eval_precision``, of ``eval.amp`` on CUDA): ``none`` (float32),
    ``bf16`` or ``fp16``; never ``train.amp``'s."""
    import torch

    from pointgeope.engine import build

    dtype = build.eval_precision(cfg, device)
    return {None: "none", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def votes_agreement(args, model, coord, color, cfg, device, scores, normal: dict) -> dict:
    """The same room once more with ``eval.amp = --agree-amp`` (the same network): its time (one run after
    this process's first, so compiled) and the share of points whose voted class (argmax of the summed
    scores) is the same as in the timed run's."""
    import dataclasses

    from pointgeope.engine import evaluate
    from pointgeope.model.kernel_check import timed

    other = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, amp=args.agree_amp))
    result, rows = timed(lambda: evaluate.vote_room(model, coord, color, other, device, seed=0, **normal),
                         device, 1, warmup=0)
    same = (result.scores.argmax(1) == scores.argmax(1))
    return {"agree_amp": args.agree_amp, "agree_seconds_per_room": round(min(rows), 3),
            "votes_agreement": round(float(same.mean()), 6), "points_disagreeing": int((~same).sum())}


def projected(per_view: list[int], max_fragments: int | None, seconds: float) -> dict:
    """The fragments of every view, those run (``eval.max_fragments`` a view) and, when fewer ran, the room's
    time projected to all of them: every fragment holds one point of each voxel (the same size), so the time
    is linear in the fragments run."""
    ran = sum(min(f, max_fragments) if max_fragments else f for f in per_view)
    row = {"fragments_per_view": list(per_view), "fragments_run_all_views": ran}
    if ran < sum(per_view):
        row["seconds_projected"] = round(seconds * sum(per_view) / ran, 3)
    return row
