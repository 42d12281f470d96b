"""Child processes that die with their parent: Linux's ``prctl(PR_SET_PDEATHSIG, sig)``.

A child of a killed command (``kill -9``, a job scheduler) lived on: a prepare worker went on parsing, an
ablation trial went on training, alone, holding its folder's lock. A child that runs
:func:`death_signal_request`'s function first is sent ``sig`` by the kernel when its parent ends, however
it ends (on Linux, "the parent" is the thread that forked the child). Each caller picks its signal:
``SIGKILL`` for prepare's workers (nothing of theirs to save), ``SIGTERM`` for an ablation's trials (a
training's clean stop: its lock released, its ``last.pt`` kept; not ``SIGINT``, which a process started in
the background by a non-interactive shell inherits ignored).

The request has a gap: a parent that dies between the ``fork`` and the ``prctl`` sends nothing, so the child
then checks that its parent is still the process that prepared the request, and ends at once if not.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def death_signal_request(sig: signal.Signals) -> Callable[[], None] | None:
    """A function for a child of this process to run first (a ``subprocess`` ``preexec_fn``, a fork pool's
    initializer): the kernel will send the child ``sig`` when this process ends; if this process has ended
    already (between the fork and the request), the child exits at once with ``128 + sig``, as a shell
    reports a process that ``sig`` ended. ``prctl`` is looked up here, before any fork: the child only calls
    it (loading a library in the child of a threaded process could hang). ``None`` where there is no
    ``prctl`` (not Linux): the caller watches its parent another way."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the request took effect: no signal will come
            os._exit(128 + int(sig))
    return request
