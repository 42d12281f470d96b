"""pointgeope/h5_file.py and stop_callbacks.py: a stop (SIGTERM, Ctrl-C) or an error that comes while HDF5 calls
the file object back (h5py's file-object driver), or while the file is opened or closed, ends the write as
that stop or error, once HDF5 has closed the file, and leaves nothing behind."""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

import h5py
import numpy as np
import pytest

from pointgeope import h5_file, h5_predictions, stop_callbacks
from pointgeope.errors import Terminated, stop_on_sigterm

ROOMS = {f"room_{k}": (np.arange(20000) % 13).astype(np.uint8) for k in range(3)}


def _open_files() -> int:
    """HDF5 files still open in this process (a write cut short leaves its file open)."""
    return h5py.h5f.get_obj_count(h5py.h5f.OBJ_ALL, h5py.h5f.OBJ_FILE)


def _write_then_check(path, expected: type[BaseException], match: str | None = None, under=None) -> None:
    """write_predictions of ROOMS to ``path`` (an older file there; the file object's file wrapped by
    ``under``) raises ``expected``; the older file is intact, nothing else is left, no HDF5 file stays open,
    and nothing was dropped as unraisable."""
    h5_predictions.write_predictions(path, "Area_1", {"room_0": ROOMS["room_0"][:10]}, {"epoch": 1})
    if under is not None:
        under()
    before, opened, dropped = path.read_bytes(), _open_files(), []
    hook, sys.unraisablehook = sys.unraisablehook, dropped.append
    try:
        with pytest.raises(expected, match=match):
            with stop_on_sigterm():
                h5_predictions.write_predictions(path, "Area_1", ROOMS, {"epoch": 2})
    finally:
        sys.unraisablehook = hook
    assert [d.exc_type for d in dropped] == []
    assert path.read_bytes() == before and sorted(path.parent.iterdir()) == [path]
    assert _open_files() == opened


class _SignalIn:
    """The file under HDF5's file object: the ``nth`` call of its method ``name`` sends ``signum`` to this
    process before it does its work (the handler runs inside the driver's callback, as it returns)."""

    def __init__(self, f, name: str, nth: int, signum: int):
        self.f, self.name, self.nth, self.signum, self.calls = f, name, nth, signum, 0

    def __getattr__(self, name):
        real = getattr(self.f, name)
        if name != self.name:
            return real

        def call(*args):
            self.calls += 1
            if self.calls == self.nth:
                signal.raise_signal(self.signum)
            return real(*args)

        return call


def _under(monkeypatch, wrap) -> None:
    keep_first = h5_file._KeepFirstError.__init__
    monkeypatch.setattr(h5_file._KeepFirstError, "__init__", lambda self, f: keep_first(self, wrap(f)))


# (seek 3, write 5: while a room's array is written; truncate 1, flush 1: as the file closes; tell 1: as it opens)
@pytest.mark.parametrize("name, nth", [("truncate", 1), ("truncate", 2), ("flush", 1), ("write", 5), ("write", 33),
                                       ("seek", 3), ("tell", 1)])
@pytest.mark.parametrize("signum, stop", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_inside_a_driver_callback_ends_the_write_as_that_stop(tmp_path, monkeypatch, name, nth, signum,
                                                                      stop):
    """The stop went into HDF5: as the file closed (truncate, flush) it became "RuntimeError: Can't decrement id
    ref count (driver truncate request failed)"; during a write it was dropped, the file renamed into place with
    room_2's array all zeros, and the process died of a segmentation fault at its end."""
    _write_then_check(tmp_path / "Area_1.h5", stop,
                      under=lambda: _under(monkeypatch, lambda f: _SignalIn(f, name, nth, signum)))
    monkeypatch.undo()
    h5_predictions.write_predictions(tmp_path / "Area_1.h5", "Area_1", ROOMS, {"epoch": 2})  # the next run's
    assert h5_predictions.read_predictions(tmp_path / "Area_1.h5", "room_2").tolist() == ROOMS["room_2"].tolist()


def _callback_code(name: str):
    return getattr(h5_file._KeepFirstError, name).__code__ if name != "File.close" else h5py.File.close.__code__


@pytest.mark.parametrize("name, nth", [("truncate", 1), ("flush", 1), ("write", 5), ("seek", 3),
                                       ("File.close", 1)])
def test_a_stop_as_a_callback_starts_ends_the_write_as_that_stop(tmp_path, name, nth):
    """Python runs a signal's handler at the next bytecode, and a signal that came while HDF5's C code ran is
    handled at the first instruction of the next callback, before any ``try`` in it: no guard inside the
    callback catches that stop (``AttributeError: '_io.FileIO' object has no attribute 'flush'``, as in CI).
    Sent from a profile function as the callback starts; ``File.close``: h5py's, cut before it closed the
    file, left it open."""
    code, calls = _callback_code(name), []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            calls.append(name)
            if len(calls) == nth:
                signal.raise_signal(signal.SIGTERM)

    try:
        _write_then_check(tmp_path / "Area_1.h5", Terminated, under=lambda: sys.setprofile(profile))
    finally:
        sys.setprofile(None)
    assert len(calls) >= nth


class _FailIn:
    """The file under HDF5's file object: its method ``name`` raises ``error()`` (a new exception each time: one
    made once, a parameter's, would keep the frames of its traceback, HDF5's property lists among them, to the
    end of the session)."""

    def __init__(self, f, name: str, error: Callable[[], BaseException]):
        self.f, self.name, self.error = f, name, error

    def __getattr__(self, name):
        if name == self.name:
            raise self.error()
        return getattr(self.f, name)


@pytest.mark.parametrize("name", ["truncate", "flush", "write", "seek", "tell"])
@pytest.mark.parametrize("error, match", [(KeyboardInterrupt, None), (RuntimeError, "a bug in the file object")])
def test_an_exception_inside_a_driver_callback_is_raised_as_itself(tmp_path, monkeypatch, name, error, match):
    """An exception raised in a callback (a stop raised there by no handler of this module, off the main
    thread or another program's; a bug) went into HDF5, which made another error of it or dropped it."""
    made = (lambda: error(match)) if match else error
    _write_then_check(tmp_path / "Area_1.h5", error, match=match,
                      under=lambda: _under(monkeypatch, lambda f: _FailIn(f, name, made)))


def test_off_the_main_thread_a_stop_in_a_callback_is_raised_as_itself(tmp_path, monkeypatch):
    """No signal handler runs off the main thread: there the file object's own guard keeps the stop."""
    _under(monkeypatch, lambda f: _FailIn(f, "truncate", KeyboardInterrupt))
    path, raised = tmp_path / "Area_1.h5", []

    def write():
        try:
            h5_predictions.write_predictions(path, "Area_1", ROOMS, {"epoch": 2})
        except BaseException as err:  # noqa: BLE001 (the test reads it)
            raised.append(err)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(timeout=60)
    assert [type(err) for err in raised] == [KeyboardInterrupt]
    assert sorted(tmp_path.iterdir()) == [] and _open_files() == 0


def test_the_handlers_come_back_after_the_write(tmp_path):
    """The block puts back the handlers it found (stop_on_sigterm's here), and a SIGTERM after the write stops
    the caller as it did before."""
    with stop_on_sigterm():
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        h5_predictions.write_predictions(tmp_path / "Area_1.h5", "Area_1", ROOMS, {"epoch": 2})
        assert {s: signal.getsignal(s) for s in before} == before
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)


def _stop_as_restore_runs(signum: int, where: str) -> Callable[[], None]:
    """A tracer that sends ``signum`` once as the block puts the handlers back (stop_callbacks._restore):
    ``"call"``, as it calls ``signal.signal`` (the signal pending there, whose handler signal.signal runs first);
    ``"line"``, at its first line, before any handler is back. Returns the function that removes the tracer."""
    restore, sent = stop_callbacks._restore.__code__, []

    def at(frame) -> None:
        if not sent:
            sent.append(signum)
            signal.raise_signal(signum)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is signal.signal.__code__ and frame.f_back.f_code is restore:
            at(frame)

    def trace(frame, event, arg):
        if frame.f_code is restore and event == "line":
            at(frame)
        return trace if frame.f_code is restore else None

    tracing, profiling = sys.gettrace(), sys.getprofile()  # (a coverage tool's, put back after)
    if where == "call":
        sys.setprofile(profile)
    else:
        sys.settrace(trace)
    return lambda: (sys.setprofile(profiling), sys.settrace(tracing), sent)[-1]


def _a_stop_in_a_write_callback_is_raised(path, stop: type[BaseException], signum: int, monkeypatch) -> None:
    """A later write, ``signum`` sent in its 5th write callback, raises ``stop`` and leaves no file."""
    _under(monkeypatch, lambda f: _SignalIn(f, "write", 5, signum))
    with pytest.raises(stop):
        h5_predictions.write_predictions(path, "Area_1", ROOMS, {"epoch": 2})
    monkeypatch.undo()
    assert not path.exists()


def _a_stop_as_the_handlers_come_back(tmp_path, signum: int, event: str, raised: type[BaseException]) -> None:
    """A write of predictions whose block gets ``signum`` as it puts the handlers back (at its first ``event``):
    the write ends in ``raised``, the stop came once, and no file is left."""
    untrace = _stop_as_restore_runs(signum, event)
    try:
        with pytest.raises(raised):
            h5_predictions.write_predictions(tmp_path / "Area_1.h5", "Area_1", ROOMS, {"epoch": 1})
    finally:
        assert untrace() == [signum]
    assert sorted(tmp_path.iterdir()) == []


def test_a_programs_own_handler_that_raises_at_the_blocks_end_leaves_its_handlers_in_place(tmp_path, monkeypatch):
    """A program's own SIGTERM handler that exits (``sys.exit``), run as the block put the handlers back (the
    signal pending there): its SystemExit skipped the rest, the block's handler stayed, and a SIGTERM in a
    later write was held by that stale handler for a block long gone: the file written, the stop lost."""
    def leave(signum, frame):
        raise SystemExit(143)

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, leave)
    try:
        _a_stop_as_the_handlers_come_back(tmp_path, signal.SIGTERM, "call", SystemExit)
        assert {s: signal.getsignal(s) for s in before} == {signal.SIGINT: before[signal.SIGINT],
                                                            signal.SIGTERM: leave}
        _a_stop_in_a_write_callback_is_raised(tmp_path / "Area_2.h5", SystemExit, signal.SIGTERM, monkeypatch)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_ctrl_c_before_the_handlers_are_back_leaves_no_handler_that_holds_later_stops(tmp_path, monkeypatch):
    """Library use (a notebook: Python's own Ctrl-C handler): a Ctrl-C at the first line of putting the handlers
    back leaves the block's handler in place (nothing in Python can prevent that); it stopped the write. The next
    write's Ctrl-C, in a driver callback, went to that stale handler, which held it for the first block, long
    gone: the file written whole and the Ctrl-C silently lost. The stale handler is the previous one now."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        _a_stop_as_the_handlers_come_back(tmp_path, signal.SIGINT, "line", KeyboardInterrupt)
        _a_stop_in_a_write_callback_is_raised(tmp_path / "Area_2.h5", KeyboardInterrupt, signal.SIGINT, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_held_stop_is_raised_when_the_close_itself_raises(tmp_path, monkeypatch):
    """A stop held during a write (SIGTERM in the fifth write callback), then a close that raises: the close's
    exception came out and the stop was lost (the lines that raise it come after the close), so a SIGTERM
    ended the program as a RuntimeError traceback (exit 1), not as the stop (exit 143)."""
    close = h5_file._close

    def failing_close(opened):
        close(opened)
        raise RuntimeError("the close failed")

    def under():  # the older file is written as usual
        monkeypatch.setattr(h5_file, "_close", failing_close)
        _under(monkeypatch, lambda f: _SignalIn(f, "write", 5, signal.SIGTERM))

    _write_then_check(tmp_path / "Area_1.h5", Terminated, under=under)
