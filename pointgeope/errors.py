"""Errors of the user's input, and the one place that turns them into a one-line message and exit code 2.

Every expected mistake (a mistyped config key, a missing data folder, a corrupt file, a folder another
process is writing) is raised as a :class:`UserError` (or a subclass: ``ConfigError``, ``SourceError``,
``SchemaError``, ``CheckpointError``, ``ReportError``, ``LockError``) whose message names the file, line
or key, says what was expected and what came, and what to do. :func:`run_command` catches them for
every command (``pointgeope <command>`` and ``train.py``) and prints::

    pointgeope train: error: configs/x.yaml: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?

with exit code 2. Anything else is a bug and keeps its traceback. ``--debug`` shows the traceback of a
user error too. A package of the toolkit that is not installed (``pip install pointgeope`` without the
``toolkit`` extra, :mod:`pointgeope.extras`) is the environment's, not a bug: its ``ModuleNotFoundError`` ends
as one line that names the package and ``pip install "pointgeope[toolkit]"``, exit code 2. A new command
raises ``UserError(message)`` (or a subclass) and needs nothing else.
Ctrl-C (``KeyboardInterrupt``, or the ``ImportError`` that an import it cut raises in its place:
:func:`stop_behind`) ends a command as command-line tools end: ``<prog>: interrupted`` and exit code 130
(128 + SIGINT), once the ``finally`` blocks and context managers on the way out have released its locks
and deleted its temporary files; the entry points (:func:`settle_exit`) then ignore a second Ctrl-C
while the interpreter shuts down. :func:`run_command` runs every command inside :func:`stop_on_sigterm` (a job
scheduler stops ``train``, ``evaluate`` or ``ablate`` with SIGTERM at its time limit, on preemption or
``scancel``; ``kill`` sends it too), so SIGTERM ends a command the same way: its locks released and
temporary files deleted, ``<prog>: terminated``, exit code 143, so that a requeued job, on any node, finds
the folder free. A stop during the command is never lost: one whose handler runs inside a callback that
drops exceptions (while ``prepare --jobs N`` forks its workers, a weakref callback, ``__del__``) is
delivered again, and raised as the command ends if it would come later. One that comes after the command's
last file, as the process exits, stops nothing: SIGTERM then ends the process by the signal, without the
line (a shell reports 143); a Ctrl-C is one line saying that nothing is lost, and the exit code stays the
command's, 0 (every file was written; :func:`settle_exit`). A block that a stop must not cut short (a DDP training step)
defers it to its end (:func:`stops_deferred`). A reader of the output that has gone (``pointgeope report RUN | head``)
ends a command quietly, exit code 141 (128 + SIGPIPE).
"""
from __future__ import annotations

import _thread
import argparse
import contextlib
import errno
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from pointgeope.extras import toolkit_message
from pointgeope.loader_errors import dead_worker_message, dead_worker_stop, worker_original

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a command that Ctrl-C stopped
EXIT_BROKEN_PIPE = 141                  # 128 + SIGPIPE: what a shell reports of a tool whose reader went

# The errors of a write that the disk refused, with the words for each (atomic.DiskFullError names the file).
FULL_DISK = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EFBIG: "file too large for the file size limit (`ulimit -f`) or the file system",
}
# Operating-system errors that are the environment's, not a bug: a full disk, a read-only folder.
_ENVIRONMENT_ERRNOS = set(FULL_DISK) | {errno.EROFS, errno.EACCES, errno.EPERM}


class UserError(Exception):
    """Bad input from the user: printed as one line (no traceback), exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM inside :func:`stop_on_sigterm`: the clean stop of Ctrl-C, reported as ``terminated``."""


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[list[int]]:
    """Within the block, SIGTERM raises :class:`Terminated`, so that a process stopped by a job scheduler or
    ``kill`` runs its ``finally`` blocks (stops its children, releases its locks, deletes its temporary
    files) instead of dying at once; the previous handler comes back after the block. A stop (Ctrl-C too)
    raised where Python drops exceptions is delivered again (:func:`_stop_again`); one dropped so near the
    block's end that it is still on its way is raised as the block ends (unless a stop already ends it): it
    stops the block it came in, never the caller after it. Python runs signal handlers in the main thread
    only: elsewhere (a command called from a thread) the block changes nothing. It yields the list of the
    signals whose stop it raised, for :func:`stop_behind`. An import of torch in the block runs to its end
    before a stop is raised (:mod:`pointgeope.stop_imports`: a stop inside its C++ start-up aborted)."""
    def stop(signum, frame):
        kind = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        if waits(frame):  # raised past a finalizer or llvmlite's making of an object, 1 s at most (stop_finalizers)
            return again(kind)
        stops.append(signum)
        raise kind

    stops: list[int] = []  # the signals whose stop was raised in the block
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    from pointgeope.stop_finalizers import waiting_stops

    waits = waiting_stops()
    hook = sys.unraisablehook
    unraisable, end, again = _stop_again(hook)
    previous = signal.signal(signal.SIGTERM, stop)
    # Python's own Ctrl-C handler, noted too (an ignored SIGINT or another program's handler is left alone)
    was_int = signal.signal(signal.SIGINT, stop) if signal.getsignal(signal.SIGINT) is signal.default_int_handler \
        else None
    sys.unraisablehook = unraisable
    stopping = False
    try:
        # imported here, as the block starts: stop_imports imports this module
        from pointgeope.stop_imports import deferring_imports

        with deferring_imports(stops):  # torch's import: a stop waits for its end
            yield stops
    except KeyboardInterrupt:
        stopping = True
        raise
    finally:
        try:
            end(stopping)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if was_int is not None:
                signal.signal(signal.SIGINT, was_int)
            sys.unraisablehook = hook


def stop_behind(err: BaseException, stops: list[int]) -> KeyboardInterrupt | None:
    """The stop that the error ``err`` stands for, if a stop was raised before it (``stops``:
    :func:`stop_on_sigterm`'s) and turned into it: Python and C extensions replace an exception they cannot
    pass on, a stop's too. A C extension whose import a Ctrl-C cut raises an ImportError of its own (numpy's,
    as it imports ``datetime``: the ``KeyboardInterrupt`` is lost); a class whose creation it cut, a
    ``RuntimeError`` from the stop (``platform``'s ``uname_result`` as torch is imported); a module imported
    after another's import was cut finds it half made (scipy's ``RecursionError`` in numpy's ``__getattr__``,
    numpy.ctypeslib's ``AttributeError``).
    A command showed their tracebacks for a Ctrl-C in its first 0.3 s. So: an ImportError, an error raised
    from a stop (its cause), or one raised while a module is imported. Any other error is not a stop's: one
    raised while a stop is handled (a ``finally`` block's bug) has the stop as its context, not its cause,
    and keeps its traceback."""
    if not stops:
        return None
    cause, chain = err, []
    while cause is not None and len(chain) < 100:
        chain.append(cause)
        cause = cause.__cause__
    tb, importing = err.__traceback__, False
    while tb is not None and not importing:
        importing, tb = tb.tb_frame.f_code.co_name == "<module>", tb.tb_next  # a module's top level runs
    if not (isinstance(err, ImportError) or importing or any(isinstance(e, KeyboardInterrupt) for e in chain)):
        return None
    return Terminated() if stops[-1] == signal.SIGTERM else KeyboardInterrupt()


def _stop_again(hook: Callable) -> tuple[Callable, Callable[[bool], None], Callable]:
    """A ``sys.unraisablehook`` that delivers a dropped stop again, ``end``, that closes it at the block's
    end, and ``later(stop)``, that sends the signal of ``stop`` (a type) again (re-entrant: from a handler too).
    Python runs a signal's handler at the next bytecode of the main thread, which may be inside a callback whose
    exception it cannot raise (a weakref callback, an at-fork callback while ``prepare --jobs N`` forks its
    workers; ``__del__`` after :mod:`pointgeope.stop_finalizers`): it printed "Exception ignored ... Terminated" and the
    command went on as if no stop had come. The signal (SIGTERM for :class:`Terminated`, SIGINT for any other
    ``KeyboardInterrupt``) is sent again 10 ms later from a thread, to land outside that callback (again,
    should it land in another), and to the main thread (``pthread_kill``): a signal sent to the process may
    go to another thread, which leaves the main thread's wait (``as_completed``, a lock) uninterrupted. One
    that lands in this hook itself (``Timer.start`` waits for its thread) is sent again too. Only the main
    thread's are stops (Python runs no signal handler elsewhere): a ``KeyboardInterrupt`` dropped in another
    thread goes to ``hook``, as every other exception does.

    ``end(stopping)`` cancels the sends still waiting (none is sent after it: a SIGINT would land in the
    caller after the block, a SIGTERM kill the process under its default action) and raises the first of
    them, unless ``stopping`` (a stop already ends the block); the handler of a signal sent but not yet
    handled runs there too."""
    lock, waiting = threading.RLock(), {}  # threading.Timer -> the signal it sends again

    def send(timer: threading.Timer) -> None:
        with lock:
            signum = waiting.pop(timer, None)
            if signum is None:  # cancelled by end
                return
            if hasattr(signal, "pthread_kill"):  # handled before the main thread runs a bytecode (needs the GIL)
                signal.pthread_kill(threading.main_thread().ident, signum)
            else:  # Windows: no signal to a thread; Python's handler runs at the main thread's next bytecode
                _thread.interrupt_main(signum)

    def later(stop: type[BaseException]) -> None:
        timer = threading.Timer(0.01, lambda: send(timer))
        with lock:
            waiting[timer] = signal.SIGTERM if issubclass(stop, Terminated) else signal.SIGINT
        timer.start()

    def stop_again(unraisable) -> None:
        if dead_worker_stop(unraisable.exc_value) is not None:  # a stop sent to the loader workers too, said
            return  # as the main process's own (torch's SIGCHLD handler raised it as the iterator shut down)
        if (not issubclass(unraisable.exc_type, KeyboardInterrupt)
                or threading.current_thread() is not threading.main_thread()):
            hook(unraisable)
            return
        stop = unraisable.exc_type
        while True:
            try:
                later(stop)
                return
            except KeyboardInterrupt as again:  # sent while Timer.start waited for its thread (a busy machine)
                stop = type(again)

    def end(stopping: bool) -> None:
        with lock:
            late = dict(waiting)
            waiting.clear()
        for timer in late:
            timer.cancel()
        # signal.signal runs the pending handlers first: here, not as the caller puts the old handler back
        signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGTERM))
        if late and not stopping:
            raise Terminated() if next(iter(late.values())) == signal.SIGTERM else KeyboardInterrupt()

    return stop_again, end, later


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """Within the block, a stop that would be raised (Ctrl-C's ``KeyboardInterrupt``, SIGTERM's
    :class:`Terminated` under :func:`stop_on_sigterm`) is noted and raised as the block ends, so that the
    block is never cut short: a DDP training step, whose backward leaves gloo's or NCCL's all-reduces of
    the gradients in flight, which a stop inside it would abandon (the rank then hangs as its model is
    freed: the process group joins its worker thread, which waits for the GIL to free a finished
    all-reduce, and its peer waits in the collective). A second stop is raised at once (the way out of a
    block that never ends); a block that ends with an exception raises the noted stop instead. A signal
    whose stop would not be raised (its default action, ignored) is left as it is; outside the main thread
    (no signal handler runs there) the block changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[KeyboardInterrupt] = []

    def note(signum, frame):
        stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if noted:
            raise stop
        noted.append(stop)

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    raised = {signum: handler for signum, handler in previous.items() if callable(handler)}
    for signum in raised:
        signal.signal(signum, note)
    try:
        yield
    finally:
        for signum, handler in raised.items():  # the pending handlers run first (signal.signal runs them)
            signal.signal(signum, handler)
        if noted:
            raise noted[0]


def one_line(text: str) -> str:
    """``text`` printable on one line whatever it holds: a control character (the newline of a file name)
    or a surrogate (a file name's byte that is not UTF-8, which a strict terminal cannot print) is written
    as ``ascii()`` writes it (``\\n``, ``\\udcff``); everything else, non-ASCII included, as it is."""
    return "".join(ascii(c)[1:-1] if c < " " or c == "\x7f" or "\ud800" <= c <= "\udfff" else c for c in text)


def user_message(err: BaseException) -> str | None:
    """The one line to print for ``err`` if it is the user's (or the environment's), else ``None``."""
    if isinstance(err, UserError):
        return one_line(" ".join(worker_original(err).split("\n")))
    if isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM):
        # the line names what refused it: a folder on the way, or the file
        from pointgeope.denied import denied_line

        return one_line(denied_line(err))
    if isinstance(err, OSError) and err.errno in _ENVIRONMENT_ERRNOS:
        where = f": {err.filename}" if err.filename else ""
        return f"{err.strerror or err}{where}; check the folder's permissions and free space"
    return toolkit_message(err)


def add_debug_argument(parser: argparse.ArgumentParser, default=False) -> None:
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show the traceback of an error of the input (normally one line, exit code 2)")


def settle_exit(code: int, prog: str | None = None) -> int:
    """``code``, for an entry point to exit with; after Ctrl-C or SIGTERM (130, 143) a second Ctrl-C while the
    interpreter shuts down is ignored, so that the command's one line stays its last: it would print a
    traceback from whatever finalizer runs then (torch's included). With ``prog`` (a process that exits
    now), a first Ctrl-C there after any other code is one line too (:func:`_after_the_end`).

    The process then exits with ``code`` even where a caught Ctrl-C had cut code that ``exec`` or ``eval`` of
    a string ran (the methods a dataclass or namedtuple makes as a module is imported): CPython notes such a
    ``KeyboardInterrupt`` as unhandled, caught or not, and ``python -m`` then ends the process by SIGINT
    instead of the exit code (a parent process saw -2, not 130: 4 of 80 Ctrl-Cs in the first 2 s of
    ``python -m pointgeope train``). The next ``exec`` of a string clears the note: the one here."""
    if code in (EXIT_INTERRUPTED, 128 + signal.SIGTERM):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif prog is not None:
        sys.unraisablehook = _after_the_end(sys.unraisablehook, prog, code)
    exec("")  # noqa: S102  (CPython's run_eval_code_obj resets _Py_UnhandledKeyboardInterrupt)
    return code


def _after_the_end(hook: Callable, prog: str, code: int) -> Callable:
    """A ``sys.unraisablehook`` that says a Ctrl-C after the command's end in one line, once, and hands every
    other exception to ``hook``. Such a Ctrl-C, as the interpreter exits (its ``atexit`` callbacks, its wait
    for threads not yet ended), can stop nothing: Python reports its ``KeyboardInterrupt`` as unraisable, and
    printed its traceback ("Exception ignored in: <module 'threading'>"), as if of a bug. The exit goes on
    as Python's: the exit code stays the command's, a Ctrl-C still ends a wait for a thread, SIGTERM keeps
    its default action (an entry point that ran the exit itself, to say more, was undone twice: it broke
    those). A Ctrl-C at the very end, after Python's last code, ends the process by SIGINT, unsaid."""
    said: list[bool] = []

    def after(unraisable) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            hook(unraisable)
        elif not said:
            said.append(True)
            print(f"{prog}: Ctrl-C after the command had ended: nothing is lost (exit code {code})",
                  file=sys.stderr, flush=True)

    return after


def _stdout_closed() -> bool:
    """Whether the reader of standard output has gone (``| head`` read its lines): a pipe without reader
    polls as an error on its write end (POSIX). ``False`` where that cannot be asked (no file descriptor)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # a captured stream, Windows (no poll)
        return False


def run_command(prog: str, func: Callable[..., int], *args, debug: bool = False) -> int:
    """``func(*args)`` with user errors (and a missing package of the toolkit) printed as
    ``<prog>: error: <message>`` and exit code 2, Ctrl-C as ``<prog>: interrupted`` and exit code 130, SIGTERM
    (:func:`stop_on_sigterm`, for every command) as ``<prog>: terminated`` and 143 (``debug``: each with its
    traceback).

    A write beyond the file size limit (``ulimit -f``) then fails with EFBIG, reported as a full disk,
    instead of killing the process with SIGXFSZ (CPython ignores it at start-up already; an embedding
    interpreter may not). Worker processes forked from here inherit this. A closed standard output (``|
    head``) ends the command quietly with 141 (128 + SIGPIPE), as a shell tool ends (:func:`_stdout_closed`);
    any other broken pipe is a bug."""
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    stops: list[int] = []
    try:
        with stop_on_sigterm() as stops:
            code = int(func(*args) or 0)
            sys.stdout.flush()  # here, not at the interpreter's exit: a closed pipe must fail while it is caught
        return code
    except BrokenPipeError:
        if debug or not _stdout_closed():
            raise
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())  # the exit's flush of what is left would fail again
        os.close(null)
        return EXIT_BROKEN_PIPE
    except (UserError, OSError, ImportError) as err:
        if (stop := stop_behind(err, stops)) is not None and not debug:
            return _said(prog, stop)
        message = user_message(err)
        if message is None or debug:
            raise
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as err:
        if debug:
            raise
        return _said(prog, err)
    except Exception as err:  # a bug's, unless a stop turned into it or a loader worker died
        if (stop := stop_behind(err, stops)) is not None and not debug:
            return _said(prog, stop)
        if (message := dead_worker_message(err)) is None or debug:
            raise
        if (signum := dead_worker_stop(err)) is not None:  # a stop sent to the workers too: the command's stop
            return _said(prog, Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


def _said(prog: str, stop: KeyboardInterrupt) -> int:
    """Say ``<prog>: interrupted`` (Ctrl-C) or ``<prog>: terminated`` (SIGTERM, :class:`Terminated`) on
    standard error; the exit code, 130 or 143."""
    terminated = isinstance(stop, Terminated)
    print(f"{prog}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr, flush=True)
    return 128 + signal.SIGTERM if terminated else EXIT_INTERRUPTED


def stopped(prog: str, stop: KeyboardInterrupt) -> int:
    """A stop that came before :func:`run_command` ran (a command line still being read, its modules
    imported): said as one of the command's, and the exit code to exit with (:func:`settle_exit`)."""
    return settle_exit(_said(prog, stop))
