"""The hierarchy's Triton ops timed alone, and their kernel settings swept (``bench_hierarchy.py``'s extra tables on
CUDA): ``ops`` (FPS stride 4 and the first stages' kNNs), ``fps_variants`` (FPS 80k -> 20k per (CHUNK_BLOCKS,
ROUND_SAMPLES) and the stream kernel) and ``knn_variants`` (the stage-0 kNN per (BLOCK_Q, BLOCK_S, num_warps)), each
variant checked equal to the default's result. Imported by ``bench_hierarchy.main`` when it runs on CUDA.
"""
from __future__ import annotations

import torch

from bench_hierarchy import batch, patched
from pointgeope.model.kernel_check import timed
from pointgeope.model.ops import fps, knn, sample_counts


def _best_of(fn, device: torch.device, reps: int) -> float:
    """The fastest of ``reps`` runs after one that compiles the kernels (the package's timer)."""
    return min(timed(fn, device, reps)[1])


def time_ops(clouds: int, points: int, device: str | torch.device, reps: int = 5) -> dict[str, float]:
    """Seconds of the Triton ops of the first stages alone (FPS stride 4, kNN k = 8, down k = 16, 3-NN up)."""
    device = torch.device(device)
    coord, offset = (t.to(device) for t in batch(clouds, points))
    sample, sub_off = fps(coord, offset, 4, backend="triton")
    sub = coord[sample]
    return {"fps_stride4": _best_of(lambda: fps(coord, offset, 4, backend="triton"), device, reps),
            "knn_stage0_k8": _best_of(lambda: knn(coord, coord, 8, offset, offset, backend="triton"), device, reps),
            "knn_down_k16": _best_of(lambda: knn(sub, coord, 16, sub_off, offset, backend="triton"), device, reps),
            "knn_up_k3": _best_of(lambda: knn(coord, sub, 3, offset, sub_off, backend="triton"), device, reps)}


ROUNDS = ((16, 16), (32, 16), (32, 32), (32, 64))   # (CHUNK_BLOCKS, ROUND_SAMPLES) of the sweep


def time_fps_variants(clouds: int, points: int, device: str | torch.device, reps: int = 3,
                      rounds: tuple[tuple[int, int], ...] = ROUNDS) -> dict[str, dict]:
    """Seconds of FPS 80k -> 20k per kernel and setting (``rounds`` per (CHUNK_BLOCKS, ROUND_SAMPLES), and ``stream``),
    and whether its samples equal the default's: which to make the default."""
    from pointgeope.model.ops import triton_fps, triton_fps_rounds

    device = torch.device(device)
    coord = batch(clouds, points)[0].to(device)
    sizes = [points] * clouds
    kept = sample_counts(sizes, 4)
    ref = triton_fps.fps_triton(coord, sizes, kept)

    def row(method: str, **settings) -> dict:
        with patched((triton_fps_rounds,), **settings):
            run = lambda: triton_fps.fps_triton(coord, sizes, kept, method)  # noqa: E731
            return {"seconds": _best_of(run, device, reps), "equal": torch.equal(run(), ref)}

    out = {f"rounds_gc{gc}_p{pcap}": row("rounds", CHUNK_BLOCKS=gc, ROUND_SAMPLES=pcap) for gc, pcap in rounds}
    out["stream"] = row("stream")
    return out


def time_knn_variants(clouds: int, points: int, device: str | torch.device, reps: int = 3,
                      settings: tuple[tuple[int, int, int], ...] = ((64, 64, 8), (32, 64, 4), (32, 32, 4)),
                      k: int = 16) -> dict[str, dict]:
    """Seconds of the stage-0 kNN (k = 16) per (BLOCK_Q, BLOCK_S, warps), each checked equal to the default's."""
    from pointgeope.model.ops import triton_knn

    device = torch.device(device)
    coord, offset = (t.to(device) for t in batch(clouds, points))
    ref = knn(coord, coord, k, offset, offset, backend="triton")[0]
    out = {}
    for bq, bs, w in settings:
        with patched((triton_knn,), BLOCK_Q=bq, BLOCK_S=bs, KNN_WARPS=w):
            run = lambda: knn(coord, coord, k, offset, offset, backend="triton")[0]  # noqa: E731
            out[f"q{bq}_s{bs}_w{w}"] = {"seconds": _best_of(run, device, reps), "equal": torch.equal(run(), ref)}
    return out
