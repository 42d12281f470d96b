"""Timing what a benchmark compares, interleaved: each repetition runs every side once, so that a busy shared
machine (two OpenMP threads on a loaded 2-core host can stall 10x) slows the sides of one round alike.

Round ``r`` runs the sides in the order rotated by ``r`` (A, B; B, A; A, B ... for two sides), so neither
side always runs first. The comparison is paired: side ``s``'s ratio in round ``r`` is
``t[s][r] / t[base][r]``; :func:`paired` reports the median of those ratios and their range (min, max) as
the result, and each side's minimum beside it (the minima of a noisy run can come from different rounds).
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from pointgeope.plural import counted


def _nothing() -> None:
    return None


def rounds(fns: Mapping[str, Callable[[], object]], reps: int, warmup: int = 1,
           sync: Callable[[], None] = _nothing) -> tuple[dict[str, object], dict[str, list[float]],
                                                         dict[str, list[float]]]:
    """Run every side of ``fns`` ``warmup`` times untimed (each side's runs together: a first call compiles),
    then ``reps`` rounds, each timing every side once in the rotated order; ``sync()`` (a device's queue
    waited for) before and after each timed call. Returns each side's last result, its wall seconds and its
    process CPU seconds per round (lists of ``reps``, in round order, so index ``r`` of two sides is a pair)."""
    names = list(fns)
    last = {name: None for name in names}
    for name in names:
        for _ in range(warmup):
            last[name] = fns[name]()
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    for r in range(reps):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            last[name] = fns[name]()
            sync()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return last, wall, cpu


def paired(times: Mapping[str, Sequence[float]], base: str, digits: int = 4) -> dict[str, dict]:
    """Per side of ``times`` (seconds per round, as :func:`rounds` gives them), against side ``base``:
    ``min_s``, ``median_s``, ``ratio_of_mins = min(t) / min(t_base)``, the ``paired_ratios``
    ``t[r] / t_base[r]``, their median ``paired_median`` and range ``paired_range = [min, max]``."""
    ref = times[base]
    out = {}
    for name, t in times.items():
        if len(t) != len(ref) or not t:
            raise ValueError(f"expected {counted(len(ref), 'round')} of {name!r} to pair with {base!r}, got {len(t)}")
        ratios = [a / b for a, b in zip(t, ref, strict=True)]
        out[name] = {"min_s": min(t), "median_s": statistics.median(t),
                     "ratio_of_mins": round(min(t) / min(ref), digits),
                     "paired_ratios": [round(x, digits) for x in ratios],
                     "paired_median": round(statistics.median(ratios), digits),
                     "paired_range": [round(min(ratios), digits), round(max(ratios), digits)]}
    return out


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """The thread pools this process has loaded (torch's, numba's) set to ``n`` inside the block, then
    restored. numpy's own functions used by the benchmarks (sorting, ``unique``, formatting) run on one thread
    whatever this says; numba's pool cannot grow past the ``NUMBA_NUM_THREADS`` it started with.

    Order: numba's first call starts its OpenMP pool, which sets OpenMP's (so torch's) thread count to
    ``NUMBA_NUM_THREADS``. So torch's count is read before numba is touched (else the block would restore
    numba's count to torch), and set after numba's (else torch would run the block at numba's count)."""
    saved = []
    torch, numba = sys.modules.get("torch"), sys.modules.get("numba")
    torch_before = torch.get_num_threads() if torch is not None else None
    if numba is not None:
        saved.append((numba.set_num_threads, numba.get_num_threads()))
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        saved.append((torch.set_num_threads, torch_before))
        torch.set_num_threads(n)
    try:
        yield
    finally:
        for setter, value in saved:
            setter(value)
