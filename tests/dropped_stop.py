"""A stop (SIGINT or SIGTERM) raised inside a weakref callback: Python runs the signal's handler there, prints
"Exception ignored" and drops its exception. The one set-up of the tests that such a stop still ends the command
(``tests/test_errors.py``: ``pointgeope.errors.run_command`` delivers it again) and the run
(``tests/data_prep/test_prepare_workers.py``: ``prepare``).

A test imports it as ``tests.dropped_stop``; a subprocess's script starts with :data:`IMPORT_LINE` and then
``from dropped_stop import stop_in_a_callback``.
"""
from __future__ import annotations

import signal
import weakref
from pathlib import Path

# this folder appended to sys.path, not put first: there tests/data_prep would hide the real data_prep
IMPORT_LINE = f"import sys; sys.path.append({str(Path(__file__).resolve().parent)!r})\n"


class _Owner:
    pass


def stop_in_a_callback(sig: signal.Signals | str) -> None:
    """Raise ``sig`` (a signal, or its name such as ``"SIGTERM"``) inside a weakref callback, where its handler
    runs and its exception is dropped, and return."""
    sig = signal.Signals[sig] if isinstance(sig, str) else sig
    owner = _Owner()
    watch = weakref.ref(owner, lambda ref: signal.raise_signal(sig))
    del owner               # the callback runs here (raise_signal runs the handler before it returns)
    if watch() is not None:
        raise AssertionError("the weakref's callback did not run: no stop was raised")
