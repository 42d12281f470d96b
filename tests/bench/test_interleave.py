"""Tests of bench/interleave.py: the sides alternate within every round (rotated), each side's times are
its own calls', and the paired summary is the median and range of the per-round ratios."""
from __future__ import annotations

import statistics
import time

import pytest

import interleave


class FakeClock:
    """``time.perf_counter`` / ``time.process_time`` stand-in that a fake side advances by its cost."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _sides(clock: FakeClock, costs: dict[str, list[float]], calls: list[str]) -> dict:
    def side(name):
        def run():
            calls.append(name)
            clock.now += costs[name][len([c for c in calls if c == name]) - 1]
            return name + str(len(calls))
        return run
    return {name: side(name) for name in costs}


def test_rounds_alternate_rotated_and_time_each_side(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(time, "process_time", clock)
    calls, syncs = [], []
    # the first call of each side is the warm-up (cost 100, never timed)
    costs = {"a": [100.0, 1.0, 2.0, 3.0, 4.0], "b": [100.0, 10.0, 20.0, 30.0, 40.0]}
    last, wall, cpu = interleave.rounds(_sides(clock, costs, calls), reps=4, warmup=1,
                                        sync=lambda: syncs.append(len(calls)))
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    # each side's list is its own calls in order, whatever position it took in the round
    assert wall == {"a": [1.0, 2.0, 3.0, 4.0], "b": [10.0, 20.0, 30.0, 40.0]}
    assert cpu == wall
    assert last["a"] == "a10" and last["b"] == "b9"     # round 4 (index 3) ran b then a
    assert len(syncs) == 2 * 8                          # before and after every timed call, none in warm-up


def test_rounds_three_sides_rotate():
    calls = []
    fns = {n: (lambda n=n: calls.append(n)) for n in "xyz"}
    interleave.rounds(fns, reps=3, warmup=0)
    assert calls == list("xyz" "yzx" "zxy")


def test_paired_median_range_and_minima():
    times = {"base": [1.0, 2.0, 4.0, 1.0, 2.0], "new": [1.5, 1.0, 4.0, 3.0, 1.0]}
    got = interleave.paired(times, "base")
    ratios = [1.5, 0.5, 1.0, 3.0, 0.5]
    assert got["new"]["paired_ratios"] == ratios
    assert got["new"]["paired_median"] == statistics.median(ratios) == 1.0
    assert got["new"]["paired_range"] == [0.5, 3.0]
    assert got["new"]["ratio_of_mins"] == 1.0          # min 1.0 over min 1.0: not the paired answer
    assert got["new"]["min_s"] == 1.0 and got["new"]["median_s"] == 1.5
    assert got["base"]["paired_median"] == 1.0 and got["base"]["paired_range"] == [1.0, 1.0]


def test_paired_refuses_unequal_rounds():
    with pytest.raises(ValueError, match="expected 2 rounds of 'b'"):
        interleave.paired({"a": [1.0, 2.0], "b": [1.0]}, "a")


def test_threads_sets_and_restores_torch_and_numba():
    numba = pytest.importorskip("numba")
    import torch

    numba.get_num_threads()                      # starts numba's pool (if not yet): it may set torch's count
    original = torch.get_num_threads()
    torch.set_num_threads(2)                     # not 1: the block must change it, and put 2 back
    try:
        before = torch.get_num_threads(), numba.get_num_threads()
        with interleave.threads(1):
            assert (torch.get_num_threads(), numba.get_num_threads()) == (1, 1)
        assert (torch.get_num_threads(), numba.get_num_threads()) == before == (2, before[1])
    finally:
        torch.set_num_threads(original)


THREADS_IN_A_FRESH_PROCESS = """
import sys
sys.path.insert(0, sys.argv[1])
import numba, torch
import interleave
before = torch.get_num_threads()
with interleave.threads(1):
    inside = torch.get_num_threads(), numba.get_num_threads()
print(before, *inside, torch.get_num_threads(), numba.get_num_threads())
"""


def test_threads_holds_torch_where_numbas_pool_starts_inside_the_block():
    """numba imported, its pool not started yet (as under pytest-xdist, where another test imported it): its
    first call inside ``threads`` starts its OpenMP pool, which sets OpenMP's count to NUMBA_NUM_THREADS (2
    here, torch starting at 1). torch must run the block at 1 and get its 1 back after it."""
    pytest.importorskip("numba")
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", THREADS_IN_A_FRESH_PROCESS, str(Path(interleave.__file__).parent)],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    before, torch_inside, numba_inside, torch_after, numba_after = map(int, out)
    assert (torch_inside, numba_inside) == (1, 1)               # 2 for torch where torch was set before numba
    assert (torch_after, numba_after) == (before, 2) == (1, 2)  # torch got numba's 2 where read after numba
