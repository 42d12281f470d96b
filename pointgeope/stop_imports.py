"""The imports that a stop (Ctrl-C, SIGTERM) waits for: torch's and Open3D's, whose C++ start-up a stop breaks.

``import torch`` runs C++ code (``torch._C._autograd_init()``, ``torch._C._c10d_init()``) that calls back into
Python through pybind11. Python runs a signal's handler at the next bytecode it executes, which may be one
of those calls: the ``KeyboardInterrupt`` that a command's stop handler raises there
(:func:`pointgeope.errors.stop_on_sigterm`) becomes a C++ exception (``pybind11::error_already_set``) that
nothing on the C++ side catches, and the process aborts::

    terminate called after throwing an instance of 'pybind11::error_already_set'
      what():  KeyboardInterrupt: <EMPTY MESSAGE>

exit code 134, without the command's line (3 of about 240 Ctrl-Cs sent to ``pointgeope train`` in its first 2 s,
the time it takes to import torch). Open3D's C++ module, cut the same way as it initialises (``open3d.pybind``),
raises "initialization failed" and keeps the memory it had taken; at the process's exit its memory statistics
list that memory on standard output and end the process with exit code 1, after the command's line and in place
of its exit code (``pointgeope viz``: 1 in 4 to 1 in 30 Ctrl-Cs at 1.6-3.3 s, as it imports Open3D). While
:func:`deferring_imports` is active (for the whole of every command: :func:`~pointgeope.errors.stop_on_sigterm`
enters it), the import of each package of :data:`DEFERRED` runs as a block of
:func:`~pointgeope.errors.stops_deferred`: a stop waits for the end of that import (about 2 s for torch, 1 s for
Open3D, on an idle core; 4 s and 2 s on a busy machine) and is raised there, where Python code catches it (one
line, exit code 130 or 143); a second stop during the import is raised at once, the way out of an import that
hangs. A stop while the interpreter itself starts, before ``pointgeope`` runs, is Python's.
"""
from __future__ import annotations

import contextlib
import copy
import signal
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

from pointgeope.errors import Terminated, stops_deferred

# The top-level packages whose import a stop waits for.
DEFERRED = ("torch", "open3d")


class _DeferringFinder:
    """A ``sys.meta_path`` finder that finds nothing itself: for a package of :data:`DEFERRED`, imported in
    the main thread (the only one where Python runs signal handlers), it returns the spec that the finders
    after it give (other finders of this class skipped: the first one wraps the import, once), with a copy
    of its loader whose ``exec_module`` runs inside ``stops_deferred`` (for that import only: the module and its
    spec get the loader back as it ends, so that they pickle as any module's); the signal of a stop raised there is
    added to ``stops`` (:func:`~pointgeope.errors.stop_behind` reads them). A module whose code ran to its
    end before the stop was raised is kept in ``whole``: importlib drops from ``sys.modules`` a module
    whose ``exec_module`` raised, and a later import would run its code again over its C extension, already
    loaded (torch: "RuntimeError: Only a single TORCH_LIBRARY can be used ..."); :func:`deferring_imports`
    puts it back."""

    def __init__(self, stops: list[int]):
        self.stops = stops
        self.whole: dict[str, ModuleType] = {}

    def find_spec(self, name, path=None, target=None):
        if name not in DEFERRED or threading.current_thread() is not threading.main_thread():
            return None
        for finder in sys.meta_path:  # another of these (a command run inside another) would ask this one back
            find = getattr(finder, "find_spec", None) if not isinstance(finder, _DeferringFinder) else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader
        loader, real = copy.copy(original), original.exec_module

        def exec_module(module) -> None:
            ran = None
            try:
                with stops_deferred():
                    real(module)
                    ran = sys.modules.get(name, module)  # (a module may put another object in its place)
            except KeyboardInterrupt as stop:
                self.stops.append(signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT)
                if ran is not None:
                    self.whole[name] = ran
                raise
            finally:  # the module keeps its own loader: this copy's exec_module, a local function, cannot be
                spec.loader = original          # pickled, and a pickle of torch.__spec__ failed for good
                for held in {id(m): m for m in (module, ran) if m is not None}.values():
                    if getattr(held, "__loader__", None) is loader:
                        held.__loader__ = original

        loader.exec_module = exec_module
        spec.loader = loader
        return spec


@contextlib.contextmanager
def deferring_imports(stops: list[int]) -> Iterator[None]:
    """Within the block, the imports of :data:`DEFERRED` are not cut by a stop (the module's docstring); the
    signal of a stop raised as one ends is added to ``stops``. A module that the stop waited for is in
    ``sys.modules`` after the block, whole (a caller that goes on, a notebook, imports it again)."""
    finder = _DeferringFinder(stops)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for name, module in finder.whole.items():
            sys.modules.setdefault(name, module)
