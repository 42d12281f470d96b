"""The rows of gpu_check's timed steps in bf16 and against each other, without a network: the ``kernels`` step's
``run_kernels`` and the ``ptv3`` step's ``summarise`` on given step times. The CPU's every-step run
(``test_gpu_check.py``) runs float32 alone: there bf16 is float32, the same step again, and these ratios are what
its bf16 cases checked."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

# (preset, kernels, amp): the step's seconds and peak MiB in each of two rounds (the minimum and the largest count)
ROUNDS = {("rpe", "torch", "none"): [(0.4, 100.0), (0.3, 120.0)], ("rpe", "torch", "bf16"): [(0.25, 60.0), (0.5, 50.0)],
          ("rpe", "triton", "none"): [(0.2, 90.0), (0.35, 80.0)],
          ("rpe", "triton", "bf16"): [(0.15, 40.0), (0.1, 45.0)],
          ("geope", "torch", "none"): [(0.9, 150.0), (0.6, 140.0)],
          ("geope", "torch", "bf16"): [(0.7, 75.0), (0.8, 70.0)],
          ("geope", "triton", "none"): [(0.45, 110.0), (0.5, 100.0)],
          ("geope", "triton", "bf16"): [(0.3, 55.0), (0.33, 65.0)]}


def test_the_kernels_step_times_every_case_and_divides_by_rpe_torch_and_float32(monkeypatch):
    """``bench_train_step.py --kernels torch triton --amps none bf16``: every preset x kernels x precision case, each
    one step a round interleaved, its minimum time and largest peak, their ratios to ``rpe`` on the same kernels and
    precision, to the ``torch`` kernels of the same case and to float32 of the same preset and kernels (none to
    itself), and one profiled step of each."""
    import train_step_kernels

    order, profiled = [], []

    class FakeCase:
        def __init__(self, preset, inputs, amp, device, kernels):
            self.key, self.rounds = (preset, kernels, amp), iter(ROUNDS[preset, kernels, amp])

        def step(self, given=True):
            order.append(self.key)

    def timed(step, device):
        step()
        return next(step.__self__.rounds)

    monkeypatch.setattr(train_step_kernels, "KernelCase", FakeCase)
    monkeypatch.setattr(train_step_kernels, "make_inputs", lambda *a: {})
    monkeypatch.setattr(train_step_kernels, "PointTransformerSeg", lambda: SimpleNamespace(hierarchy_spec=None))
    monkeypatch.setattr(train_step_kernels, "timed", timed)
    monkeypatch.setattr(train_step_kernels, "profile", lambda step, device: profiled.append(step) or {"top": []})
    args = SimpleNamespace(device="cpu", points=400, clouds=2, presets=["rpe", "geope"], kernels=["torch", "triton"],
                           amps=["none", "bf16"], warmup=0, reps=2, budget=100.0, profile=True)
    out = {}
    train_step_kernels.run_kernels(args, out, lambda: None)
    assert order == list(ROUNDS) * 2                                   # the cases interleaved, round by round
    cases = out["cases"]
    assert sorted(cases) == sorted(f"{pe}/{kern}/{amp}" for pe, kern, amp in ROUNDS)
    best = {key: (min(s for s, _ in rounds), max(m for _, m in rounds)) for key, rounds in ROUNDS.items()}
    for (pe, kern, amp), (seconds, peak) in best.items():
        row = cases[f"{pe}/{kern}/{amp}"]
        assert (row["step_s"], row["peak_mib"], row["reps"]) == (seconds, peak, 2)
        others = {"vs_rpe": ("rpe", kern, amp), "vs_torch": (pe, "torch", amp), "vs_float32": (pe, kern, "none")}
        for label, other in others.items():
            if other == (pe, kern, amp):
                assert f"{label}_time" not in row and f"{label}_peak" not in row
            else:
                assert row[f"{label}_time"] == seconds / best[other][0], (pe, kern, amp, label)
                assert row[f"{label}_peak"] == peak / best[other][1], (pe, kern, amp, label)
    assert sorted(out["profile"]) == sorted(cases) and len(profiled) == len(cases)


def test_the_ptv3_step_divides_each_case_by_none_none18_and_float32():
    """``bench_ptv3_step.py --recipe``'s rows (``summarise``): a case's step is the median of its timed rounds, its
    peaks the largest; ratios to ``none`` and to ``none18`` at the same precision (memory to ``none18``'s) and of
    bf16 to float32 of the same encoding (time and memory; float32 has none)."""
    pytest.importorskip("torch")
    import bench_ptv3_recipe

    encodings, amps = ["none", "none18", "geope", "point3drope"], ["none", "bf16"]
    steps = {(pe, amp): [0.1 * (i + 1) + 0.05 * j + (0.4 if amp == "bf16" else 0.0) for j in (2, 0, 1)]
             for i, pe in enumerate(encodings) for amp in amps}
    peaks = {(pe, amp): [100.0 * (i + 1) + (0 if amp == "bf16" else 50.0) + j for j in (0, 7, 3)]
             for i, pe in enumerate(encodings) for amp in amps}
    cases = {f"{pe}/{amp}": {"steps_s": list(steps[pe, amp]), "peak_step_mib_all": list(peaks[pe, amp])}
             for pe in encodings for amp in amps}
    bench_ptv3_recipe.summarise(cases, encodings, amps)
    median = {key: sorted(times)[1] for key, times in steps.items()}
    peak = {key: max(values) for key, values in peaks.items()}
    for pe in encodings:
        for amp in amps:
            row = cases[f"{pe}/{amp}"]
            assert row["step_s"] == median[pe, amp] and row["peak_step_mib"] == peak[pe, amp]
            assert row["vs_none_time"] == median[pe, amp] / median["none", amp]
            assert row["vs_none18_time"] == median[pe, amp] / median["none18", amp]
            assert row["vs_none18_memory"] == peak[pe, amp] / peak["none18", amp]
            if amp == "none":
                assert "vs_float32_time" not in row and "vs_float32_memory" not in row
            else:
                assert row["vs_float32_time"] == median[pe, amp] / median[pe, "none"]
                assert row["vs_float32_memory"] == peak[pe, amp] / peak[pe, "none"]
