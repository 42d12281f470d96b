"""Where a stop (Ctrl-C, SIGTERM) would leave an object half made or half closed: it is sent again 10 ms later
(:func:`pointgeope.errors.stop_on_sigterm`), past that code, instead of being raised there.

Python runs a signal's handler at the next bytecode of the main thread, wherever that is. Two places break:

- a finalizer (``__del__``): Python drops the stop raised there (printed "Exception ignored", then delivered
  again by :func:`pointgeope.errors._stop_again`), and the finalizer, cut after its first statements, leaves its
  object half closed (a resource never released);
- llvmlite's wrappers of LLVM objects (``ObjectRef``, ``OutputString``), which numba makes and frees by the
  thousand as it compiles (the first run of ``prepare`` or ``train`` with a cold numba cache: seconds to tens of
  seconds). A stop inside ``ObjectRef.__init__``, after ``self._ptr = ptr`` and before ``self._as_parameter_ =
  ptr``, stopped the command as it should (``interrupted``, exit code 130), but the half-made object was freed on
  the way out, and its ``__del__`` printed after the command's line::

      Exception ignored in: <function ObjectRef.__del__ at 0x7f50dd169d00>
      ...
      AttributeError: 'GlobalContextRef' object has no attribute '_as_parameter_'

  (a stop inside ``close`` or ``detach`` leaves such an object likewise). Their ``__init__``, ``close``,
  ``detach`` and ``__del__`` are a few statements each: a stop waits for their end.

A stop whose handler runs in such code (anywhere below it on the stack) is therefore not raised there; the
code runs to its end and the stop, sent again, is raised at the next bytecode past it. It waits :data:`PATIENCE_S`
at most (:func:`waiting_stops`): a finalizer may wait (a thread's join; a torch DataLoader's shutdown of its workers,
5 s a worker) or never return, and a stop put off for as long held the command, a second Ctrl-C and SIGTERM too,
as long, for ever where it never returned. Past that time the stop is raised there, as it was before: the
finalizer cut, the stop dropped and delivered again (:func:`pointgeope.errors._stop_again`).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType

from pointgeope.stop_callbacks import runs_below

# llvmlite's classes of LLVM objects, and the methods of theirs that a stop must not cut
_LLVMLITE = ("ObjectRef", "OutputString")
_METHODS = ("__init__", "close", "detach", "__del__")
# the longest a stop waits for the code it would cut (llvmlite's methods take microseconds)
PATIENCE_S = 1.0


def _llvmlite_codes() -> frozenset[CodeType]:
    """The code of :data:`_METHODS` of llvmlite's :data:`_LLVMLITE` classes, where llvmlite is imported (else none:
    nothing of it runs)."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    classes = [getattr(ffi, name, None) for name in _LLVMLITE] if ffi is not None else []
    return frozenset(method.__code__ for cls in classes if cls is not None for name in _METHODS
                     if (method := vars(cls).get(name)) is not None and hasattr(method, "__code__"))


def cuts_an_object(frame: FrameType | None) -> bool:
    """Whether a stop raised at ``frame`` (a signal handler's) would cut a finalizer or one of llvmlite's
    methods that make and close an LLVM object (the module's docstring): ``frame`` or one of its callers runs
    a ``__del__`` or one of them."""
    return runs_below(frame, _llvmlite_codes(), ("__del__",))


def waiting_stops() -> Callable[[FrameType | None], bool]:
    """``waits(frame)``: whether a stop whose handler runs at ``frame`` is sent again rather than raised there: where
    it :func:`cuts_an_object`, until :data:`PATIENCE_S` have passed since this stop was first put off (a stop raised
    ends it: the next one is a new stop). Past that, it is raised even there (the module's docstring)."""
    since: list[float] = []  # when the stop on its way was first put off

    def waits(frame: FrameType | None) -> bool:
        if not cuts_an_object(frame):
            since.clear()
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] < PATIENCE_S

    return waits
