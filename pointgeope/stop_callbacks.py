"""Stops (Ctrl-C, SIGTERM) that land in Python code which C code called back: held, for the owner of the
block to raise once the C code has returned.

h5py's file-object driver (:mod:`pointgeope.h5_file`) calls the Python file object's ``seek``, ``write``,
``truncate``, ``flush`` and ``tell`` from inside HDF5's C code. An exception raised there does not travel back to
the caller: HDF5 notes a failed request and goes on, and h5py calls Python again with the exception still set
(h5py's iteration over attributes, by contrast, stops at the first failure and passes the stop on, as the cause of
a ``SystemError`` that :func:`~pointgeope.errors.stop_behind` reads as the stop). Python runs a signal's handler
at the next bytecode the main thread executes, and while HDF5 works that is inside such a callback, often its
first instruction, before any ``try`` of the callback. A stop there, as HDF5 closed a work file, was
``AttributeError: '_io.FileIO' object has no attribute 'flush'`` or ``RuntimeError: Can't decrement id ref count
(driver truncate request failed)`` (a traceback, exit code 1); during a ``write`` it was dropped ("Exception
ignored" in h5py's ``__dealloc__``): the command went on, the file was renamed into place with a room's array all
zeros, and the process died of a segmentation fault at its end.

Within :func:`stops_held_in`, a stop whose handler runs inside one of the given functions (their code objects,
``codes``: anywhere below one of them on the stack) is held: the exception that the previous handler raises
(``Terminated``, ``KeyboardInterrupt``) is handed to ``hold`` instead of going into the C code, and the owner of
the block raises it where it regains control (:func:`pointgeope.h5_file.create_file`: once HDF5 has closed
the file). Giving the functions that open and close the file keeps them whole: a stop during them is held
too. Outside those functions a stop is raised as before. Signals whose handler is not a Python function
(their default action, ignored) are left as they are; outside the main thread (no signal handler runs there)
the block changes nothing.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Collection, Iterator
from types import CodeType, FrameType

_STOPS = (signal.SIGINT, signal.SIGTERM)


def runs_below(frame: FrameType | None, codes: Collection[CodeType], names: Collection[str] = ()) -> bool:
    """Whether ``frame`` or one of its callers runs one of ``codes``, or a function named one of ``names``: where a
    signal's handler runs (:mod:`pointgeope.stop_finalizers` asks it too)."""
    while frame is not None:
        if frame.f_code in codes or frame.f_code.co_name in names:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def stops_held_in(codes: Collection[CodeType], hold: Callable[[BaseException], None]) -> Iterator[None]:
    """Within the block, the stop of a SIGINT or SIGTERM whose handler runs below one of ``codes`` is given to
    ``hold`` instead of being raised (the module's docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    inside = frozenset(codes)
    previous: dict[int, Callable] = {}
    for signum in _STOPS:
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = handler

    def held(signum, frame) -> None:
        if not active or not runs_below(frame, inside):  # (after the block: the previous handler, whatever happens)
            previous[signum](signum, frame)
            return
        try:
            previous[signum](signum, frame)  # (stop_on_sigterm's notes the signal as it raises)
        except BaseException as stop:  # noqa: BLE001 (raised by hold's owner, not into the C code)
            hold(stop)

    active = True
    try:
        for signum in previous:
            signal.signal(signum, held)
        yield
    finally:
        active = False  # a stop from here on is not held: its block's owner would never raise it
        _restore(previous)


def _restore(previous: dict[int, Callable]) -> None:
    """Put the ``previous`` handlers back. ``signal.signal`` first runs the handler of a signal still pending,
    which may raise its stop (``KeyboardInterrupt``, or whatever a program's own handler raises: ``SystemExit``)
    before the handler is put back: put back again, then raise that stop. A stop raised between these calls
    may still leave a handler of the block in place; it is then the previous handler (``held``'s ``active``)."""
    stop: BaseException | None = None
    for signum, handler in previous.items():
        for _ in range(3):  # a pending stop runs once; a third try would mean a new stop at each try
            try:
                signal.signal(signum, handler)
                break
            except BaseException as err:  # noqa: BLE001 (raised below, once every handler is back)
                stop = stop or err
    if stop is not None:
        raise stop
