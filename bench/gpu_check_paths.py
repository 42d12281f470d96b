"""The GPU check's comparisons of paths that decide a default (``gpu_check.py``'s plan): the training step
eager and as a CUDA graph (``graphs``), with torch's and the fused batch norm (``norm``, ``norm_op``), the
attention's backward with atomics and by source point (``relation_backward``), the attention kernels torch
and Triton (``kernels``), and the loader's workers building the hierarchy (``loader``). Each step runs one
``bench/`` script under its limit and records its JSON (``gpu_runner.run_with_result``)."""
from __future__ import annotations

from gpu_runner import Check, result_path, run_with_result

__all__ = ["step_graphs", "step_graphs16", "step_kernels", "step_loader", "step_norm", "step_norm_op",
           "step_relation_backward"]


def step_relation_backward(check: Check, py: str) -> None:
    """``bench_relation_backward.py`` on CUDA: atomic against sorted sums, and the sorted kernels' tiles."""
    a = check.args
    data = result_path(check, "bench_relation_backward.json")
    cmd = [py, "bench/bench_relation_backward.py", "--out", str(data), "--device", "cuda", "--clouds", "16",
           "--points", str(a.points), "--reps", "3", "--budget", str(max(10, min(a.relation_backward_limit,
                                                                                    check.left()) - 20))]
    run_with_result(check, "relation_backward", cmd, a.relation_backward_limit, data)


def step_norm_op(check: Check, py: str) -> None:
    """``bench_norm.py``: the norm alone, torch's and the fused one, interleaved."""
    data = result_path(check, "bench_norm_op.json")
    run_with_result(check, "norm_op", [py, "bench/bench_norm.py", "--out", str(data), "--device", "cuda"],
                    check.args.norm_op_limit, data)


def step_norm(check: Check, py: str) -> None:
    """The step with torch's batch norm + ReLU (``torch_norm``) and with the fused one (the CUDA default since
    run 6), bf16 and float32, interleaved."""
    a = check.args
    data = result_path(check, "bench_norm.json")
    cmd = [py, "bench/bench_train_step.py", "--out", str(data), "--device", "cuda", "--points", str(a.points),
           "--clouds", str(a.norm_clouds), "--reps", str(a.reps), "--warmup", str(a.warmup), "--kernels",
           "torch_norm", "default", "--amps", "bf16", "none", "--presets", "rpe", "geope",
           "--budget", str(max(20, min(a.norm_limit, check.left()) - 40)), "--profile"]
    run_with_result(check, "norm", cmd, a.norm_limit, data)


def step_loader(check: Check, py: str) -> None:
    """``bench_loader_compare.py --workers-only``: ``--loader-workers`` workers making 80k-point blocks and their
    hierarchies at once on the node's CPU: can they feed the 16-crop step with ``data.hierarchy: loader``?"""
    a = check.args
    data = result_path(check, "bench_loader_workers.json")
    cmd = [py, "bench/bench_loader_compare.py", "--workers-only", "--procs", str(a.loader_workers), "--samples", "4",
           "--batch", "16", "--out", str(data)]
    run_with_result(check, "loader", cmd, a.loader_limit, data)


def step_graphs(check: Check, py: str) -> None:
    """``bench_graphs.py``: the 2 x 80k step eager, as a CUDA graph and padded eagerly, the padded ones with their
    third norm on the plain kernel and on the torch ops' prefix statistics, float32 and bf16, interleaved."""
    a = check.args
    data = result_path(check, "bench_graphs.json")
    cmd = [py, "bench/bench_graphs.py", "--out", str(data), "--device", "cuda", "--points", str(a.points),
           "--clouds", str(a.clouds), "--presets", "rpe", "geope", "--amps", *a.kernel_amps,
           "--budget", str(max(20, min(a.graphs_limit, check.left()) - 50))]
    run_with_result(check, "graphs", cmd, a.graphs_limit, data)


def step_graphs16(check: Check, py: str) -> None:
    """``bench_graphs.py`` at the recipe's batch (``--norm-clouds`` x ``--points``), ``--graphs16-amps`` (bf16 by
    default: float32 holds an eager step's peak, 51 GiB, beside the graph's pool of the same size, which only
    an H200 has room for): does a graph still pay where the GPU is busy for most of the step?"""
    a = check.args
    data = result_path(check, "bench_graphs_16.json")
    cmd = [py, "bench/bench_graphs.py", "--out", str(data), "--device", "cuda", "--points", str(a.points),
           "--clouds", str(a.norm_clouds), "--presets", "rpe", "geope", "--amps", *a.graphs16_amps, "--reps", "2",
           "--warmup", "1", "--budget", str(max(20, min(a.graphs16_limit, check.left()) - 60))]
    run_with_result(check, "graphs16", cmd, a.graphs16_limit, data)


def step_kernels(check: Check, py: str) -> None:
    """``bench_train_step.py --kernels torch triton``: every preset's step on today's and the fused attention
    kernels, in ``--kernel-amps`` (float32 and bf16), with the top kernels of each."""
    a = check.args
    data = result_path(check, "bench_kernels.json")
    cmd = [py, "bench/bench_train_step.py", "--out", str(data), "--device", "cpu" if a.device == "cpu" else "cuda",
           "--points", str(a.points), "--clouds", str(a.clouds), "--reps", str(a.reps), "--warmup", str(a.warmup),
           "--kernels", "torch", *([] if a.device == "cpu" else ["triton"]), "--amps", *a.kernel_amps,
           "--presets", *a.kernel_presets,
           "--budget", str(max(30, min(a.kernels_limit, check.left()) - 90)), "--profile"]
    run_with_result(check, "kernels", cmd, a.kernels_limit, data)
