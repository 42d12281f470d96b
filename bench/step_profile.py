"""One training step under torch's profiler (``bench_train_step.py --profile``): its top kernels or operators
and, on CUDA, how much of the step the GPU was running a kernel."""
from __future__ import annotations

import torch

from pointgeope.model.kernel_check import sync, timed

__all__ = ["busy_seconds", "profile", "sync"]     # sync: the device wait of kernel_check.timed, for its callers


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals: the time some kernel ran, overlaps counted once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def profile(step, device: torch.device, top: int = 12) -> dict:
    """``step()`` (one given-hierarchy training step) under the profiler: its ``top`` kernels (CUDA) or
    operators (CPU) by self time, in ms; on CUDA also the kernels launched and the share of the step's wall
    time in which the GPU ran one (``busy_share``: well below 1, the step waits on the host launching its
    kernels; the profiler's own cost lengthens the host's part, so compare ``busy_ms`` with the unprofiled
    step too)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        wall = timed(step, device, reps=1, warmup=0)[1][0]       # the package's one timer
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:top]
    out = {"top": [{"name": e.key[:90], "ms": round(getattr(e, key, 0.0) / 1e3, 3), "calls": e.count}
                   for e in events], "wall_ms": round(wall * 1e3, 3)}
    if device.type == "cuda":
        kernels = [(e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = busy_seconds(kernels) / 1e6                                  # the profiler's times are in us
        out.update(kernels=len(kernels), busy_ms=round(busy * 1e3, 3), busy_share=round(busy / wall, 3))
    return out
