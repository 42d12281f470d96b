"""An entry point's process (``pointgeope``, ``python -m pointgeope``, ``train.py``): its command, then its
exit, where a stop (Ctrl-C, SIGTERM) is still said.

A command's process ends in two parts after the command returns. First what Python runs as Python code:
the threads that are not daemons are joined (``threading._shutdown``, which first tells the idle workers of
a ``ThreadPoolExecutor`` to end, as torch.compile's are), the ``atexit`` callbacks run, stdout and stderr
are flushed. Then Python puts every signal's default action back and tears its modules down (1.3-1.8 s with
torch and PyG loaded on 2 cores), running no signal handler any more.

:func:`run_program` runs the first part itself, with Ctrl-C and SIGTERM noted instead of raised, and only
then decides the exit code: a stop noted meanwhile (the command's files all written) ends the process as a
stop during the command does, ``<prog>: interrupted`` (130) or ``terminated`` (143), once everything that
part runs has run; nothing is cut short, nothing lost. A second stop there is raised, as Python raises it,
so that a thread or an ``atexit`` callback that never ends cannot hold the process, which still ends with
one line (Python's exit leaves such a thread behind). Python's own exit then finds the threads joined and
no callback left, and tears the modules down: a stop there takes the signal's default action, the process
ends by the signal, which a shell reports as 130 or 143, without the line (no Python code runs to say it;
every file was written before).
"""
from __future__ import annotations

import atexit
import contextlib
import signal
import sys
import threading
from collections.abc import Callable

from pointgeope.errors import (EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, run_command, settle_exit,
                               stopped)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_program(prog: str, func: Callable[..., int], *args, debug: bool = False) -> int:
    """:func:`pointgeope.errors.run_command` as the whole work of a process: its exit code, for the entry
    point's ``sys.exit``, after the process's exit has run as far as it runs Python code
    (:meth:`_LateStops.finish`). SIGTERM raises :class:`Terminated` from here on, so that one in the last
    bytecodes of ``run_command``, after its own block, stops the command too; a stop after the command
    (``run_command`` returned) is noted. Called outside the main thread (where Python runs no signal
    handler): ``run_command`` and nothing else."""
    if threading.current_thread() is not threading.main_thread():
        return settle_exit(run_command(prog, func, *args, debug=debug))
    late = _LateStops()
    signal.signal(signal.SIGTERM, late.handle)  # what run_command's stop_on_sigterm puts back at its end
    try:
        code = run_command(prog, func, *args, debug=debug)
        late.after_command()
    except KeyboardInterrupt as stop:  # after run_command's own handling, before after_command
        if debug:
            raise
        code = stopped(prog, stop)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):  # the command said its stop: the exit adds nothing
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return settle_exit(code)
    try:
        return late.finish(prog, code)
    except KeyboardInterrupt as stop:  # a second stop: the exit waited on a thread that does not end
        return settle_exit(stopped(prog, stop))


class _LateStops:
    """The handler of Ctrl-C and SIGTERM of :func:`run_program`: until :meth:`after_command` a stop is
    raised (the command's stop); after it the first stop is noted in ``stops`` and the next raised."""

    def __init__(self) -> None:
        self.command_done = False
        self.stops: list[KeyboardInterrupt] = []

    def handle(self, signum: int, frame) -> None:
        stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if not self.command_done or self.stops:
            raise stop
        self.stops.append(stop)

    def after_command(self) -> None:
        """The command has returned: stops are noted from here on. A Ctrl-C that the process ignores (a
        background job's, ``cmd &``) stays ignored."""
        self.command_done = True
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self.handle)

    def finish(self, prog: str, code: int) -> int:
        """Join the threads, run the ``atexit`` callbacks and flush stdout and stderr, as Python's exit does
        before its teardown; then ``code``, or a stop's line and code if one came meanwhile. The handlers
        are given back to the signals' default actions (the pending ones run first, ``signal.signal``
        runs them), so that a stop after this check ends the process by the signal, as in the teardown."""
        try:
            threading._shutdown()  # Python's own exit finds it done and returns
            atexit._run_exitfuncs()  # and clears them: Python's exit runs none twice
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, OSError, ValueError):  # closed, or a reader gone
                    stream.flush()
        finally:
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) == self.handle:
                    signal.signal(signum, signal.SIG_DFL)
        if not self.stops:
            return code
        return settle_exit(stopped(prog, self.stops[0]))
