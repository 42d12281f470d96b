"""``bench_train_step.py --kernels``: the training step of every preset on other kernel paths, interleaved.

``torch`` and ``triton`` force ``POINTGEOPE_KERNELS``; ``default`` leaves it unset (the device's default);
``torch_norm`` is the default with torch's batch norms (with the ReLU and the blocks' third, without) instead of
the fused ops (``norm.py``; the ReLU's a CUDA default since GPU run 6); ``frame_fold`` is the default with
standard GeoPE's relation folding the points' turn into its kernel (``frame_fold.py``, off by default). Each case's
time and peak memory, and its ratios to ``rpe``, to the ``torch``, ``default``, ``torch_norm`` and ``frame_fold``
paths and to float32 of the same preset and path.
"""
from __future__ import annotations

import time

import torch

from bench_train_step import Case, make_inputs, timed
from pointgeope.model import PointTransformerSeg, kernel_choice
from step_profile import profile

__all__ = ["KernelCase", "run_kernels"]


class KernelCase(Case):
    """A ``Case`` whose steps run on the kernels ``kernels`` (``POINTGEOPE_KERNELS``; ``default``: unset)."""

    def __init__(self, preset: str, inputs: dict, amp: str, device: torch.device, kernels: str):
        super().__init__(preset, inputs, amp, device)
        self.kernels = kernels

    def step(self, given: bool = True) -> None:
        if self.kernels == "default":
            return super().step(given)
        if self.kernels == "torch_norm":
            return self._torch_norm_step(given)
        if self.kernels == "frame_fold":
            from pointgeope.model.frame_fold import folding
            with folding():
                return super().step(given)
        with kernel_choice.forced(self.kernels):
            super().step(given)

    def _torch_norm_step(self, given: bool) -> None:
        """The default path with the fused batch norms off, with the ReLU and without (their backward follows
        their forward's path)."""
        from pointgeope.model import norm

        enabled = norm.KERNEL.enabled, norm.PLAIN_KERNEL.enabled
        norm.KERNEL.enabled = norm.PLAIN_KERNEL.enabled = lambda device: False
        try:
            super().step(given)
        finally:
            norm.KERNEL.enabled, norm.PLAIN_KERNEL.enabled = enabled


def run_kernels(args, out: dict, write) -> None:
    """``--kernels``: the given-hierarchy step of every preset x attention kernels (``--kernels``) x precision
    (``--amps``), interleaved; time, peak memory, ratios to rpe on the same kernels and precision, to the
    torch kernels of the same case and to float32 of the same preset and kernels; ``--profile``: top kernels."""
    device = torch.device(args.device)
    inputs = make_inputs(args.points, args.clouds, device, PointTransformerSeg().hierarchy_spec)
    cases = {f"{pe}/{kern}/{amp}": KernelCase(pe, inputs, amp, device, kern)
             for pe in args.presets for kern in args.kernels for amp in args.amps}
    for case in cases.values():
        for _ in range(args.warmup):
            case.step()
    out.update({"points_per_cloud": args.points, "clouds": args.clouds, "cases": {}})
    deadline = time.perf_counter() + args.budget
    for rep in range(args.reps):
        for name, case in cases.items():
            if rep and time.perf_counter() > deadline:
                continue
            seconds, peak = timed(case.step, device)
            row = out["cases"].setdefault(name, {"step_s": seconds, "peak_mib": peak, "reps": 0})
            row.update(step_s=min(row["step_s"], seconds), peak_mib=max(row["peak_mib"], peak), reps=row["reps"] + 1)
        write()
    for name, row in out["cases"].items():
        pe, kern, amp = name.split("/")
        for label, other in (("vs_rpe", f"rpe/{kern}/{amp}"), ("vs_torch", f"{pe}/torch/{amp}"),
                             ("vs_default", f"{pe}/default/{amp}"), ("vs_torch_norm", f"{pe}/torch_norm/{amp}"),
                             ("vs_frame_fold", f"{pe}/frame_fold/{amp}"),
                             ("vs_float32", f"{pe}/{kern}/none")):
            if other in out["cases"] and other != name:
                row[f"{label}_time"] = row["step_s"] / out["cases"][other]["step_s"]
                if out["cases"][other]["peak_mib"]:
                    row[f"{label}_peak"] = row["peak_mib"] / out["cases"][other]["peak_mib"]
        print(f"{name:<28} {row['step_s'] * 1e3:8.1f} ms  {row['peak_mib']:8.0f} MiB", flush=True)
    if args.profile:
        out["profile"] = {name: profile(lambda: case.step(given=True), device)  # noqa: B023 - run at once
                          for name, case in cases.items()}
    write()
