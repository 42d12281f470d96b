"""Benchmark: the network's point hierarchy (FPS, kNN, 3-NN of every stage) per ops backend, side by side.

PTv1's S3DIS layout (strides 1, 4, 4, 4, 4; k = 8, 16, 16, 16, 16) on ``--clouds`` synthetic rooms of
``--points`` points each, one point per 4 cm voxel (``bench_model.synthetic_room``), packed in one batch
on ``--device``. Backends (labels):

    cpu       numba FPS + numba kd-tree kNN on the host: what a data loader worker pays (coordinates copied to
              the host)
    cpu_pykdtree   the same with pykdtree's kNN (its candidates re-ranked by ``knn_ties``): the baseline of the
              numba kd-tree, the same result bit for bit
    cpu_unordered  ``cpu_pykdtree`` with the trees' queries in their given order (``knn._ORDERED_QUERIES`` out of
              reach): the baseline of the Morton order of the queries, the same result bit for bit
    cpu_any_ties   ``cpu_pykdtree`` with the trees' own answer for ties (``k`` candidates taken as they come, not
              ``knn_ties.exact_knn``): the baseline of the tie rule, the same result up to tied rows
    cpu_searched_up  the same with every row of the 3-NN up searched (``up_known`` out of reach): the baseline
              of reading the rows the neighbourhoods settle, the same result bit for bit
    cpu_separate   the same backends with every kNN its own tree and its own search (``_separate``: the
              hierarchy before a stage's tree served all its kNN and the transition down was gathered from
              the stage before), the baseline of both, the same result bit for bit
    default   the device's default backends (on CUDA: the Triton kernels where Triton imports)
    triton    the Triton kernels (CUDA tensors; on the CPU only under TRITON_INTERPRET=1, far too slow to time)
    cluster   torch-cluster's kNN, where installed (with the device's default FPS: its FPS is not a backend)
    torch     pure torch (kNN by chunked brute force, FPS one Python step per sample: slow)

The backends are interleaved (``bench/interleave.py``: ``--reps`` rounds, each running every backend once in a
rotated order, after ``--warmup`` untimed calls each: the first Triton call compiles its kernels); a backend's
time is the minimum over the rounds of the wall time of one hierarchy between device synchronisations, beside
the median and range of its per-round ratios to the first backend timed (paired); ``cpu_seconds`` and
``cpu_paired_median`` the same of the process's CPU time (on a shared host, what the other jobs' load
changes least). ``agree`` is the
share of stage-0 neighbourhoods (independent of FPS) whose sets equal those of the first backend timed,
``same_samples`` whether the FPS samples of every stage are equal and ``identical`` whether every tensor of
the hierarchy is (bit for bit: the CPU labels against each other). A backend that cannot run is
recorded with its error and the run goes on. Results go to ``--out`` (JSON, rewritten after every case).

On a CUDA device two more tables (``--ops``, ``--fps-variants``; both on by default there):

    ops           the Triton ops of the first stages alone: FPS 80k -> 20k, kNN k = 8 of stage 0, the
                  transition down (k = 16) and the 3-NN up, seconds each
    fps_variants  the first FPS stage with the ``rounds`` kernel per (chunk blocks, samples a round) and
                  the ``stream`` one, each checked equal to the default's samples: which to make
                  the default
    knn_variants  the stage-0 kNN (k = 16) per (BLOCK_Q, BLOCK_S, num_warps), each checked equal

With ``--parts`` (CPU labels) a third table: the seconds of one hierarchy spent in FPS and in kNN
(``parts``: the labels interleaved again, the minimum of each over ``--reps`` rounds with the total's, and the
median share of the kNN), the kNN share of the CPU's hierarchy.

Usage: python bench/bench_hierarchy.py --out bench/results/hierarchy.json [--device cuda] [--clouds 2 16]
       [--points 80000] [--backends cpu default triton] [--reps 5] [--warmup 1] [--threads N] [--no-extra]
Other scripts call ``time_hierarchy(backends, clouds, points, device)``; the Triton ops alone and their kernel
settings swept (``ops``, ``fps_variants``, ``knn_variants``) are timed by ``hierarchy_kernels.py``.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import fields
from itertools import accumulate
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interleave
from bench_io import provenance, save_json
from bench_model import synthetic_room
from pointgeope.model.kernel_check import sync
from pointgeope.model.ops import HierarchySpec, OpsBackends, PointHierarchy, counts, fps, knn, sample_counts
from pointgeope.model.ops.hierarchy import UP_NEIGHBOURS

STRIDES, NEIGHBOURS = (1, 4, 4, 4, 4), (8, 16, 16, 16, 16)
LABELS = {"cpu": OpsBackends(), "cpu_pykdtree": OpsBackends(knn="pykdtree"),
          "cpu_unordered": OpsBackends(knn="pykdtree"), "cpu_any_ties": OpsBackends(knn="pykdtree"),
          "cpu_searched_up": OpsBackends(), "cpu_separate": OpsBackends(),
          "default": OpsBackends(),
          "triton": OpsBackends("triton", "triton"),
          "cluster": OpsBackends(knn="cluster"), "torch": OpsBackends("torch", "torch")}


def batch(clouds: int, points: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``clouds`` synthetic rooms of ``points`` points, packed: ``coord (clouds * points, 3)``, ``offset``."""
    coord = torch.cat([synthetic_room(points, seed=c) for c in range(clouds)])
    return coord, torch.arange(1, clouds + 1) * points


def _run(label: str, coord: torch.Tensor, offset: torch.Tensor, device: torch.device):
    """One hierarchy with ``label``'s backends; ``cpu`` copies the coordinates to the host first."""
    spec = HierarchySpec(STRIDES, NEIGHBOURS, LABELS[label])
    if label == "cpu_any_ties":
        with _any_ties():
            return spec(coord.to("cpu"), offset.to("cpu"))
    if label == "cpu_unordered":
        with _unordered_queries():
            return spec(coord.to("cpu"), offset.to("cpu"))
    if label == "cpu_searched_up":
        with patched((sys.modules["pointgeope.model.ops.hierarchy"],), known_up=_search_every_row):
            return spec(coord.to("cpu"), offset.to("cpu"))
    if label == "cpu_separate":
        return _separate(spec, coord.to("cpu"), offset.to("cpu").tolist())
    if label in ("cpu", "cpu_pykdtree"):
        return spec(coord.to("cpu"), offset.to("cpu"))
    return spec(coord, offset)


def _separate(spec: HierarchySpec, coord: torch.Tensor, off: list[int]) -> PointHierarchy:
    """``spec``'s hierarchy by one ``fps`` or ``knn`` call per op of ``hierarchy``'s definition, each kNN with
    its own tree (outside ``knn.shared_trees``), the transition down searched at every stage."""
    be = spec.backends
    offsets, samples, down, neighbours, coords, c = [], [], [], [], [], coord
    for stride, k in zip(spec.strides, spec.neighbours, strict=True):
        sample = group = None
        if stride > 1:
            sample, _ = fps(c, off, stride, backend=be.fps, check_finite=False)
            new_off, new_c = list(accumulate(sample_counts(counts(off), stride))), c[sample]
            group, _ = knn(new_c, c, k, new_off, off, backend=be.knn, check_finite=False)
            c, off = new_c, new_off
        samples.append(sample)
        down.append(group)
        neighbours.append(knn(c, c, k, off, off, backend=be.knn, check_finite=False)[0])
        offsets.append(torch.tensor(off))
        coords.append((c, off))
    up = [knn(coords[s][0], coords[s + 1][0], UP_NEIGHBOURS, coords[s][1], coords[s + 1][1], backend=be.knn,
              check_finite=False) for s in range(len(coords) - 1)]
    return PointHierarchy(tuple(offsets), tuple(samples), tuple(down), tuple(neighbours),
                          tuple(i for i, _ in up), tuple(d for _, d in up))


def _search_every_row(sample, offsets, fine, coarse, up, search):
    """``up_known.known_up`` as it was before it: every row of the 3-NN up searched."""
    return search(None, offsets[0])


@contextlib.contextmanager
def _unordered_queries():
    """The CPU trees search every query in the caller's order (no cloud reaches ``_ORDERED_QUERIES``)."""
    module = sys.modules["pointgeope.model.ops.knn"]
    saved, module._ORDERED_QUERIES = module._ORDERED_QUERIES, sys.maxsize
    try:
        yield
    finally:
        module._ORDERED_QUERIES = saved


@contextlib.contextmanager
def _any_ties():
    """The CPU trees' ``k`` nearest as the tree gives them (ties in its order, either point at a k-th tie)."""
    module = sys.modules["pointgeope.model.ops.knn"]
    saved = module._exact
    def rows(candidates, k: int, q):
        idx, dist2 = candidates(q, k)
        return idx.astype("int64"), dist2                     # as the trees' own answer was returned
    module._exact = lambda candidates, _tree, query, _support, k: module._in_morton_order(
        functools.partial(rows, candidates, k), query)
    try:
        yield
    finally:
        module._exact = saved


def _agreement(h, ref) -> dict:
    same = (h.neighbours[0].sort(1).values.cpu() == ref.neighbours[0].sort(1).values.cpu()).all(1)
    samples = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(h.samples[1:], ref.samples[1:], strict=True))
    pairs = [(a, b) for f in fields(h) for a, b in zip(getattr(h, f.name), getattr(ref, f.name), strict=True)]
    identical = all(a is b is None or (a is not None and b is not None and a.dtype == b.dtype
                                       and torch.equal(a.cpu(), b.cpu())) for a, b in pairs)
    return {"agree": round(same.float().mean().item(), 6), "same_samples": samples, "identical": identical}


FAILURES = (ValueError, RuntimeError, ImportError)     # a backend that cannot run (CUDA's OOM is a RuntimeError)


class _SideFailed(Exception):
    """A backend's call failed inside the timed rounds: its ``label`` and the error."""

    def __init__(self, label: str, err: Exception):
        super().__init__(label)
        self.label, self.err = label, err


def _failing_as(label: str, fn):
    """``fn`` whose failure names its backend, so the rounds can go on without it."""
    def call():
        try:
            return fn()
        except FAILURES as err:
            raise _SideFailed(label, err) from err
    return call


def _error(err: Exception, where: str = "") -> dict:
    return {"error": f"{type(err).__name__}: {err}".splitlines()[0] + where}


def time_hierarchy(backends: list[str], clouds: int, points: int, device: str | torch.device, reps: int = 5,
                   warmup: int = 1) -> dict[str, dict]:
    """Seconds of one hierarchy per backend label of ``LABELS``, the labels interleaved (``interleave.rounds``:
    ``reps`` rounds, each running every label once in a rotated order, the device's queue waited for around
    each): ``seconds`` the minimum, ``all_seconds`` per round, ``paired_median`` / ``paired_range`` the
    median and range of the per-round ratios to the first label that ran, and the agreement of each with
    it. Each label first runs ``max(warmup, 1)`` untimed times (they compile). A backend that cannot run is
    recorded as ``{"error": ...}`` and the others go on: failing in its warm-up, or in the timed rounds (a
    CUDA OOM at round 2), after which the rounds start again without it."""
    device = torch.device(device)
    coord, offset = batch(clouds, points)
    coord, offset = coord.to(device), offset.to(device)
    out, fns = {}, {}
    for label in backends:
        fn = (lambda label=label: _run(label, coord, offset, device))  # noqa: E731
        try:
            for _ in range(max(warmup, 1)):
                fn()
        except FAILURES as err:
            out[label] = _error(err)
            continue
        fns[label] = _failing_as(label, fn)
    while fns:
        try:
            last, wall, cpu = interleave.rounds(fns, reps, warmup=0, sync=functools.partial(sync, device))
            break
        except _SideFailed as failed:
            out[failed.label] = _error(failed.err, " (in the timed rounds)")
            del fns[failed.label]
    if not fns:
        return {label: out[label] for label in backends}
    first = next(iter(fns))
    on_cpu = interleave.paired(cpu, first)
    for label, summary in interleave.paired(wall, first).items():
        out[label] = {"seconds": summary["min_s"], "all_seconds": wall[label],
                      "paired_median": summary["paired_median"], "paired_range": summary["paired_range"],
                      "cpu_seconds": on_cpu[label]["min_s"], "cpu_paired_median": on_cpu[label]["paired_median"],
                      **_agreement(last[label], last[first])}
    return {label: out[label] for label in backends}


def time_parts(labels: list[str], clouds: int, points: int, reps: int = 5) -> dict[str, dict]:
    """Per CPU label, the seconds of one hierarchy spent in ``fps`` and in ``knn`` (their calls from
    ``hierarchy`` and from ``_separate`` timed) and its total, the labels interleaved (``interleave.rounds``,
    one warm-up each): each the minimum over the ``reps`` rounds, and ``knn_share`` the median over the rounds of
    the kNN's seconds over the total."""
    import pointgeope.model.ops.hierarchy as hierarchy_module

    coord, offset = batch(clouds, points)
    spent = {"fps": 0.0, "knn": 0.0}
    rows = {label: [] for label in labels}

    def clocked(name, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start
        return call

    def run(label):
        spent.update(fps=0.0, knn=0.0)
        _run(label, coord, offset, torch.device("cpu"))
        rows[label].append(dict(spent))

    with patched((hierarchy_module, sys.modules[__name__]), fps=clocked("fps", fps), knn=clocked("knn", knn)):
        _, wall, _ = interleave.rounds({label: functools.partial(run, label) for label in labels}, reps)
    out = {}
    for label in labels:
        parts = rows[label][-reps:]                             # the rounds' (after the warm-up)
        out[label] = {"total_s": min(wall[label]), "fps_s": min(p["fps"] for p in parts),
                      "knn_s": min(p["knn"] for p in parts),
                      "knn_share": round(statistics.median(p["knn"] / t for p, t in zip(parts, wall[label],
                                                                                          strict=True)), 4)}
    return out


@contextlib.contextmanager
def patched(modules, **names):
    """``names`` set on every module of ``modules`` inside the block, then restored."""
    saved = [(m, n, getattr(m, n)) for m in modules for n in names]
    try:
        for m, n, _ in saved:
            setattr(m, n, names[n])
        yield
    finally:
        for m, n, value in saved:
            setattr(m, n, value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--clouds", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("--backends", nargs="+", default=["cpu", "default", "triton"], choices=sorted(LABELS))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's); pykdtree's are OMP_NUM_THREADS's")
    parser.add_argument("--parts", action="store_true", help="the fps and knn seconds of the CPU labels' hierarchy")
    parser.add_argument("--no-extra", action="store_true", help="skip the ops and fps_variants tables on CUDA")
    parser.add_argument("--cpu-clouds", type=int, nargs="*", default=None,
                        help="run the cpu backend at these batch sizes only (default: at all of --clouds)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from pointgeope.info import device_summary

    result = {"device": args.device, "device_summary": device_summary(),
              "provenance": provenance(torch.get_num_threads(), ("numpy", "torch", "numba", "pykdtree")),
              "cpu_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "points": args.points, "strides": STRIDES,
              "neighbours": NEIGHBOURS, "cases": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for clouds in args.clouds:
        labels = [b for b in args.backends if b != "cpu" or args.cpu_clouds is None or clouds in args.cpu_clouds]
        result["cases"][f"{clouds}x{args.points}"] = time_hierarchy(labels, clouds, args.points, args.device,
                                                                    args.reps, args.warmup)
        _write(result, args.out)
        print(json.dumps({f"{clouds}x{args.points}": result["cases"][f"{clouds}x{args.points}"]}), flush=True)
    if args.parts:
        cpu_labels = [b for b in args.backends if b.startswith("cpu")]
        result["parts"] = {f"{c}x{args.points}": time_parts(cpu_labels, c, args.points, args.reps) for c in args.clouds}
        _write(result, args.out)
        print(json.dumps({"parts": result["parts"]}), flush=True)
    if torch.device(args.device).type == "cuda" and not args.no_extra:
        from hierarchy_kernels import time_fps_variants, time_knn_variants, time_ops

        result["ops"] = {f"{c}x{args.points}": time_ops(c, args.points, args.device) for c in args.clouds}
        _write(result, args.out)
        result["fps_variants"] = time_fps_variants(min(args.clouds), args.points, args.device)
        _write(result, args.out)
        result["knn_variants"] = time_knn_variants(min(args.clouds), args.points, args.device)
        _write(result, args.out)
        print(json.dumps({k: result[k] for k in ("ops", "fps_variants", "knn_variants")}), flush=True)


def _write(result: dict, out: Path) -> None:
    save_json(out, result)


if __name__ == "__main__":
    main()
