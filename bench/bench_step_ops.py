"""Benchmark: the ops a training step dispatches and its seconds, with GeoPE's rotation tables built once per
stage (``stage_memo.shared``, the default) against once per layer (as before).

On a GPU every dispatched op that is not a view is (at least) one kernel launch, and at 2 x 80k points the
published step waits on its launches: about 30 us of host time each, 2,624 for ``rpe`` and 3,470 for
``geope`` on the H200 (``docs/gpu.md``). This script counts the ops of one training step
(``PointTransformerSeg50``, hierarchy given, SGD with ``foreach`` as on CUDA, torch's kernels on the CPU) under
a ``TorchDispatchMode``, views and metadata excluded. The attention's ops differ from CUDA's (there the fused
kernels replace the torch path), but the rotation tables are built by the same torch ops on every device, so
the difference between the two ways is the difference a GPU sees. The step's CPU seconds are the fastest of
``--reps``, the two ways interleaved, at 1 thread and at every core.

Usage: python bench/bench_step_ops.py --out bench/results/bench_step_ops.json [--points 8000] [--clouds 2]
       [--presets rpe geope geope+rpe] [--reps 5] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_io import provenance, save_json
from bench_train_step import make_inputs, sgd_learner, step_batch
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg, stage_memo

# views and metadata: no kernel on a GPU
NO_KERNEL = {"view", "_unsafe_view", "expand", "permute", "t", "transpose", "unsqueeze", "squeeze", "select",
             "slice", "alias", "as_strided", "detach", "_reshape_alias", "split", "split_with_sizes", "unbind",
             "narrow", "lift_fresh", "diagonal", "unfold", "_local_scalar_dense", "is_nonzero", "promote_types",
             "empty", "empty_like", "new_empty", "_record_function_enter_new", "_record_function_exit"}


class OpCounter(TorchDispatchMode):
    """Counts the dispatched ops by name, those in :data:`NO_KERNEL` left out."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name not in NO_KERNEL:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


class Step:
    """One preset's model (seed 0), the benches' SGD (``foreach``, CUDA's default) and the training loop's step."""

    def __init__(self, preset: str, batch, device: torch.device):
        torch.manual_seed(0)
        self.model = PointTransformerSeg(pe=preset).train()
        self.cfg, self.learner = sgd_learner(self.model, "none", device, foreach=True)
        self.batch, self.device = batch, device

    def __call__(self) -> None:
        train_step(self.cfg, self.learner, self.model, self.batch, self.device)


def ways(shared: bool):
    """The tables (and, since `stage_memo`, the pair displacements) shared per stage (the network's own
    ``stage_memo.shared``) or built per layer."""
    return contextlib.nullcontext() if shared else _per_layer()


@contextlib.contextmanager
def _per_layer():
    own = stage_memo.shared
    stage_memo.shared = contextlib.nullcontext
    try:
        yield
    finally:
        stage_memo.shared = own


def measure(preset: str, batch, reps: int, threads: list[int]) -> dict:
    """Ops of a step and its fastest seconds per thread count, shared and per layer."""
    device, out = torch.device("cpu"), {}
    steps = {shared: Step(preset, batch, device) for shared in (True, False)}
    for shared, step in steps.items():
        with ways(shared):
            step()                                                          # warm-up
            with OpCounter() as counter:
                step()
        out["shared" if shared else "per_layer"] = {"ops": sum(counter.ops.values()),
                                                    "top": dict(counter.ops.most_common(8))}
    for n in threads:
        torch.set_num_threads(n)
        best = {True: float("inf"), False: float("inf")}
        for _ in range(reps):                                               # interleaved
            for shared, step in steps.items():
                with ways(shared):
                    start = time.perf_counter()
                    step()
                    best[shared] = min(best[shared], time.perf_counter() - start)
        out[f"threads_{n}"] = {"shared_s": round(best[True], 4), "per_layer_s": round(best[False], 4),
                               "ratio": round(best[True] / best[False], 3)}
    out["ops_saved"] = out["per_layer"]["ops"] - out["shared"]["ops"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--points", type=int, default=8000)
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope", "geope+rpe"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, torch.get_num_threads()])
    args = parser.parse_args()
    x = make_inputs(args.points, args.clouds, torch.device("cpu"), PointTransformerSeg().hierarchy_spec)
    batch = step_batch(x["coord"], x["feat"], x["offset"], x["label"], x["hierarchy"])
    out = {"provenance": provenance(args.threads), "points": args.points, "clouds": args.clouds, "presets": {}}
    for preset in args.presets:
        out["presets"][preset] = measure(preset, batch, args.reps, args.threads)
        print(preset, out["presets"][preset], flush=True)
        save_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
