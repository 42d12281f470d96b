"""Items of an iterator made ahead in a background thread, so that the consumer never waits for them.

``Prefetch(source, depth)`` runs ``for item in source`` in a daemon thread and hands the items over
through a queue of at most ``depth`` of them (the producer blocks when it is ``depth`` items ahead, so
memory stays bounded)::

    producer thread:  item 1 | item 2 | item 3 (waits: queue full) ...
    main thread:                forward(item 1) | forward(item 2) | ...

An exception of the producer is raised again in the consumer, with its traceback, where the next item
would have come; leaving the ``with`` block (normally, on an error of the consumer or on
``KeyboardInterrupt``) stops the producer after the item it is making and joins the thread. The producer
runs in a copy of the context that made the ``Prefetch`` (``contextvars``): a kernel choice forced there
(``kernel_choice.forced``) holds in the thread too. The
producer holds the GIL only in Python code: numpy, torch and the KD-tree/FPS libraries run beside
the consumer's torch ops.
"""
from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_ITEM, _END, _ERROR = "item", "end", "error"
_POLL_S = 0.05   # how often a blocked producer checks whether the consumer has gone


class Prefetch(Generic[T]):
    """Iterate ``source`` in a background thread, at most ``depth`` items ahead (see the module docstring)."""

    def __init__(self, source: Iterable[T], depth: int = 2, name: str = "prefetch"):
        if depth < 1:
            raise ValueError(f"expected a prefetch depth >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        context = contextvars.copy_context()     # the producer sees the creator's context (its kernel choice)
        self._thread = threading.Thread(target=context.run, args=(self._produce, source), name=name, daemon=True)
        self._thread.start()

    def _put(self, message: tuple) -> bool:
        """Queue ``message`` unless the consumer has gone; whether it was queued."""
        while not self._stop.is_set():
            try:
                self._queue.put(message, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, source: Iterable[T]) -> None:
        iterator = iter(source)
        try:
            for item in iterator:
                if not self._put((_ITEM, item)):
                    return
            self._put((_END, None))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((_ERROR, err))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[T]:
        while True:
            kind, value = self._queue.get()
            if kind == _END:
                return
            if kind == _ERROR:
                raise value
            yield value

    def close(self) -> None:
        """Stop the producer (after the item it is making) and wait for its thread."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=_POLL_S)   # unblock a producer waiting on a full queue
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
