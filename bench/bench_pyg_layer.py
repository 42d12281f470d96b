"""Benchmark: ``pointgeope.nn.GeoPEPointTransformerConv`` per positional encoding vs PyG's
``PointTransformerConv``, forward + backward on one kNN graph, on the CPU.

One step is ``conv(x, pos, edge_index)`` and the backward of ``(out * w).sum()`` into ``x`` and the
parameters, on ``N`` points uniform in a 4 x 4 x 3 m box with their ``k`` nearest neighbours as edges (PyG's
layer adds one self-loop a node), ``C -> C`` channels in float32, the layers' default ``pos_nn``
(``Linear(3, C)``) and no ``attn_nn``, ``pos_scale = 25`` (4 cm voxels). Defaults: N = 20000, k = 16, C = 64.

The cases take turns (round ``r`` times every case once, after one warm-up step each), so a load that comes
and goes on shared cores falls on all of them; a case's figure is its minimum over the rounds, and its
ratio is to PyG's layer of the same thread count in the same run. Wall time (``time_s``) and the process's
CPU time (``cpu_s``, user + system of all its threads: on a machine shared with other jobs it counts the work,
not the waits) are both recorded.

``--compare FILE`` adds, for every encoding, the layer of another version of
``pointgeope/nn/point_transformer_conv.py`` (case ``"<pe> @FILE-stem"``) to the same rounds, e.g. the code
before a change: ``git show main:pointgeope/nn/point_transformer_conv.py > /tmp/before.py``.

``--torch-frame`` adds, for the encodings that turn by standard GeoPE, the layer with the torch path of the
per-edge turn (case ``"<pe> torch-frame"``: ``target_frame.turn_into_targets(backend="torch")``) beside its
default (numba on the CPU), in the same rounds.

``--compile`` adds every case under ``torch.compile`` (``"<case> compiled"``; inductor compiles in the warm-up
step, which is not timed; dynamo's recompile limit is raised so that no case falls back to eager).

Usage: python bench/bench_pyg_layer.py [--threads 1 2] [--reps 5] [--n 20000] [--k 16] [--channels 64]
       [--pe geope lingeope ...] [--compare /tmp/before.py] [--compile] [--out bench/results/bench_pyg_layer.json]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch_geometric.nn import PointTransformerConv

from bench_io import import_file, provenance, save_json
from pointgeope.model.attention import PRESETS, PositionalEncoding, options_for
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph, target_frame

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "bench_pyg_layer.json"
VALUE_GEOPE = "geope, value geope"            # the key and the value turned by standard GeoPE
ENCODINGS = {**PRESETS, VALUE_GEOPE: PositionalEncoding("geope", False, "geope")}
GRID_UNIT = 0.04                              # pointrope's cell: the voxel of pos_scale = 25
COMPILED = " compiled"                        # case suffix: the layer under torch.compile
TORCH_FRAME = " torch-frame"                  # case suffix: standard GeoPE's per-edge turn on its torch path


def load_layer_class(path: Path) -> type:
    """``GeoPEPointTransformerConv`` of another version of its file (its imports from this tree)."""
    return import_file(path, f"compared_{path.stem}").GeoPEPointTransformerConv


def make_layer(case: str, channels: int, compared: dict[str, type]) -> torch.nn.Module:
    """PyG's layer (``case == "pyg"``) or ours with the encoding ``case`` (``"<pe> @<name>"``: the layer class
    ``compared[name]``), seeded alike."""
    torch.manual_seed(0)
    if case == "pyg":
        return PointTransformerConv(channels, channels)
    if case.endswith(COMPILED):                                        # inductor, after the warm-up step
        return torch.compile(make_layer(case[: -len(COMPILED)], channels, compared))
    if case.endswith(TORCH_FRAME):
        return make_layer(case[: -len(TORCH_FRAME)], channels, compared)
    pe, _, name = case.partition(" @")
    layer = compared[name] if name else GeoPEPointTransformerConv
    read = options_for(ENCODINGS[pe], pos_scale=25.0, grid_unit=GRID_UNIT)        # the others refuse the rest
    return layer(channels, channels, pe=ENCODINGS[pe], **read)


def make_step(layer: torch.nn.Module, x: torch.Tensor, pos: torch.Tensor, edge_index: torch.Tensor,
              frame_backend: str | None = None):
    """One forward + backward of ``layer`` (standard GeoPE's per-edge turn on ``frame_backend``, ``None``: its
    default); returns its wall time and CPU time in seconds."""
    weight = torch.randn(x.shape[0], layer.out_channels, generator=torch.Generator().manual_seed(1))
    default = target_frame.frame_backend

    def step() -> tuple[float, float]:
        x.grad = None
        layer.zero_grad(set_to_none=True)
        target_frame.frame_backend = default if frame_backend is None else (lambda keys: frame_backend)
        try:
            start, cpu = time.perf_counter(), time.process_time()
            out = layer(x, pos, edge_index)
            (out * weight).sum().backward()
            return time.perf_counter() - start, time.process_time() - cpu
        finally:
            target_frame.frame_backend = default
    return step


def run(cases: list[str], compared: dict[str, type], threads: int, reps: int, n: int, k: int,
        channels: int) -> list[dict]:
    """The minimum step time of every case over ``reps`` interleaved rounds, on ``threads`` threads."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(n, 3, generator=gen) * torch.tensor([4.0, 4.0, 3.0])
    x = torch.randn(n, channels, generator=gen).requires_grad_()
    edge_index = knn_graph(pos, k)
    steps = {case: make_step(make_layer(case, channels, compared), x, pos, edge_index,
                             "torch" if case.endswith(TORCH_FRAME) else None) for case in cases}
    for step in steps.values():                                        # warm-up
        step()
    times = {case: [] for case in cases}
    cpu = {case: [] for case in cases}
    for _ in range(reps):
        for case, step in steps.items():
            wall, used = step()
            times[case].append(wall)
            cpu[case].append(used)
    base, cpu_base = min(times["pyg"]), min(cpu["pyg"])
    rpe = min(times["rpe"]) if "rpe" in times else float("nan")
    return [{"threads": threads, "case": case, "time_s": min(t), "times_s": t, "ratio_to_pyg": min(t) / base,
             "ratio_to_rpe": min(t) / rpe, "cpu_s": min(cpu[case]), "cpu_ratio_to_pyg": min(cpu[case]) / cpu_base,
             "N": n, "k": k, "edges": int(edge_index.shape[1]) + n, "channels": channels} for case, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--pe", nargs="+", choices=list(ENCODINGS), default=list(ENCODINGS))
    parser.add_argument("--compare", type=Path, nargs="*", default=[],
                        help="other versions of pointgeope/nn/point_transformer_conv.py to time alongside")
    parser.add_argument("--torch-frame", action="store_true",
                        help="also time standard GeoPE's encodings with the torch path of their per-edge turn")
    parser.add_argument("--compile", action="store_true",
                        help="also time every case (PyG's layer too) under torch.compile (inductor)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    stems = [path.stem for path in args.compare]     # a case is named by its file's stem: of two files of one
    if len(set(stems)) < len(stems):                 # name, the second was timed and recorded as the first
        twice = sorted({stem for stem in stems if stems.count(stem) > 1})
        parser.error(f"--compare: expected files of distinct names (a case is named by the file's stem), got "
                     f"{', '.join(map(str, args.compare))}; copy one to another name, e.g. /tmp/{twice[0]}_2.py")
    compared = {path.stem: load_layer_class(path) for path in args.compare}
    prov = provenance(args.threads)  # before the timing: the code this run imports
    cases = ["pyg"] + [f"{pe}{suffix}" for pe in args.pe for suffix in ["", *(f" @{name}" for name in compared)]]
    cases += [pe + TORCH_FRAME for pe in args.pe if args.torch_frame and "geope" in
              (ENCODINGS[pe].rotation, ENCODINGS[pe].value_rotation)]
    cases += [case + COMPILED for case in cases if args.compile]
    if args.compile:             # every case is another layer of the one class: past dynamo's default 8 entries a
        torch._dynamo.config.recompile_limit = 4 * len(cases) * len(args.threads)   # code object runs eager

    rows = []
    print(f"{'threads':>7} {'case':>28} {'ms':>9} {'x pyg':>6} {'x rpe':>6} {'cpu ms':>9} {'x pyg':>6}")
    for threads in args.threads:
        for row in run(cases, compared, threads, args.reps, args.n, args.k, args.channels):
            rows.append(row)
            print(f"{threads:>7} {row['case']:>28} {1e3 * row['time_s']:9.1f} {row['ratio_to_pyg']:6.2f} "
                  f"{row['ratio_to_rpe']:6.2f} "
                  f"{1e3 * row['cpu_s']:9.1f} {row['cpu_ratio_to_pyg']:6.2f}")
    payload = {"benchmark": "pyg_point_transformer_conv_fwd_bwd", "provenance": prov,
               "compared": {name: str(path) for name, path in zip(compared, args.compare, strict=True)},
               "reps": args.reps, "rows": rows}
    save_json(args.out, payload)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
