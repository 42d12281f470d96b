"""What torch's DataLoader says of its worker processes (``data.num_workers`` > 0), as the one line of
:func:`pointgeope.errors.run_command`: a user error a worker met, unwrapped from torch's wrapping
(:func:`worker_original`), and a worker process that died (:func:`dead_worker_message`).
"""
from __future__ import annotations

import re
import signal

__all__ = ["worker_original", "dead_worker_message", "dead_worker_stop"]


# torch re-raises an error of a DataLoader worker process (a damaged or deleted area file read with
# data.num_workers > 0) in the main process as its own class, the message wrapped with the worker's traceback.
_WORKER_TRACE = "\nOriginal Traceback (most recent call last):\n"


def worker_original(err: BaseException) -> str:
    """The message of ``err``; where torch wrapped it (``Caught <Class> in DataLoader worker process <n>.``,
    the worker's traceback, then ``<module>.<Class>: <message>``), the original message alone."""
    text = str(err)
    head, found, trace = text.partition(_WORKER_TRACE)
    start = trace.rfind(name := f"\n{type(err).__module__}.{type(err).__qualname__}: ")
    if not found or not head.startswith("Caught ") or start < 0:
        return text
    return trace[start + len(name):].strip()


# torch's words for a DataLoader worker process that ended without an error it could send back: its SIGCHLD
# handler's (C++, with the signal or exit code), raised in the main process wherever it runs, and the iterator's
# (Python, "pid(s)"), raised from the first as it finds the worker gone.
_DEAD_WORKER = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (is killed by signal: [^.]+|exited "
                          r"unexpectedly(?: with exit code -?\d+)?)")


def dead_worker_message(err: BaseException) -> str | None:
    """The one line for ``err`` if it is torch's report of a DataLoader worker process that died (killed by a
    signal, the out-of-memory killer's SIGKILL included, or exited; found on ``err`` or the errors it was
    raised from), else ``None``. Such a death is the environment's, as a dead ``prepare`` worker's is: the
    main process's traceback says nothing of it, and the same command resumes."""
    found = []
    while err is not None and len(found) < 8:
        if isinstance(err, RuntimeError) and (match := _DEAD_WORKER.search(str(err))):
            found.append(match)
        err = err.__cause__  # torch raises its own from the first; a bug while handling it has it as context only
    if not found:
        return None
    pids, how = max(found, key=lambda m: len(m.group(2))).groups()  # the signal or exit code, where said
    how = how.replace("is killed", "was killed")
    return (f"a data loader worker process (pid {pids}) {how} (out of memory, killed, or crashed); what was "
            "written before it is kept: run the same command again (a training resumes from its last "
            "checkpoint), or with data.num_workers=0 to load in the main process")


# a stop someone sent (a job scheduler's SIGTERM to the whole process group, a terminal's Ctrl-C), in torch's
# words: the C library's name of the signal (strsignal, as torch's SIGCHLD handler writes it)
_STOPS = {signal.SIGTERM: signal.strsignal(signal.SIGTERM), signal.SIGINT: signal.strsignal(signal.SIGINT)}


def dead_worker_stop(err: BaseException) -> int | None:
    """SIGTERM or SIGINT if ``err`` is torch's report of a DataLoader worker process killed by that signal
    (found as :func:`dead_worker_message` finds it), else ``None``. Sent to a whole process group (a
    scheduler's time limit or preemption, Ctrl-C in a terminal), it may end a worker before the main process
    handles its own: the command is then stopped, not failed (``terminated``, 143; ``interrupted``, 130)."""
    while err is not None:
        if isinstance(err, RuntimeError) and (match := _DEAD_WORKER.search(str(err))):
            for signum, name in _STOPS.items():
                if name and match.group(2) == f"is killed by signal: {name}":
                    return signum
        err = err.__cause__  # torch raises its own from the first; a bug while handling it has it as context only
    return None
