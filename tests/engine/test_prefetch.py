"""Tests of pointgeope/engine/prefetch.py: order kept, at most ``depth`` items ahead, the producer's errors
raised in the consumer, and a consumer that stops early stops the producer."""
from __future__ import annotations

import threading
import time

import pytest

from pointgeope.engine.prefetch import Prefetch


def test_items_arrive_in_order_and_the_producer_runs_at_most_depth_ahead():
    made = []

    def source():
        for i in range(20):
            made.append(i)
            yield i

    got = []
    with Prefetch(source(), depth=3) as items:
        for item in items:
            time.sleep(0.01)                      # a slow consumer: the producer waits on the full queue
            got.append(item)
            # queued (3) + the one the producer holds while it waits to queue it
            assert len(made) - len(got) <= 3 + 1
    assert got == list(range(20))


def test_the_producer_runs_ahead_in_its_own_thread_while_the_consumer_is_blocked():
    """The consumer takes item 0, then blocks: meanwhile the producer makes items 1..depth (queued) and
    depth + 1 (held while it waits), in another thread, and no more. A synchronous wrapper would make
    nothing while the consumer waits."""
    depth, made, threads = 3, [], set()
    ahead = threading.Event()

    def source():
        for i in range(10):
            threads.add(threading.current_thread().name)
            made.append(i)
            if len(made) == depth + 2:
                ahead.set()
            yield i

    with Prefetch(source(), depth=depth, name="ahead") as items:
        iterator = iter(items)
        assert next(iterator) == 0
        assert ahead.wait(timeout=10), f"the producer made only {made} while the consumer was blocked"
        time.sleep(0.2)                                       # bounded: the producer waits on the full queue
        assert made == list(range(depth + 2)) and threads == {"ahead"}
        assert list(iterator) == list(range(1, 10))


def test_an_error_of_the_producer_is_raised_in_the_consumer_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise KeyError("broken piece")

    got = []
    with pytest.raises(KeyError, match="broken piece"):
        with Prefetch(source()) as items:
            for item in items:
                got.append(item)
    assert got == [1, 2]


def test_leaving_early_stops_the_producer_and_closes_its_generator():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    prefetch = Prefetch(endless(), depth=2)
    with pytest.raises(RuntimeError, match="consumer failed"):
        with prefetch as items:
            for item in items:
                if item == 5:
                    raise RuntimeError("consumer failed")
    assert closed.is_set() and not prefetch._thread.is_alive()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth >= 1"):
        Prefetch([], depth=0)
