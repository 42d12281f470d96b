"""The worker processes of ``pointgeope prepare --jobs N``: they die with the main process.

A pool worker outlived a killed ``prepare`` (``kill``, ``kill -9``, a job scheduler): it went on parsing,
then waited forever. Now:

- SIGTERM of the main process is a clean stop (the command line's :func:`pointgeope.errors.run_command`
  raises it as :class:`~pointgeope.errors.Terminated`): the pool is stopped, the temporary files deleted
  and OUT's lock released on the way out (exit code 143), Ctrl-C likewise (exit code 130); a stop that
  comes while the workers fork, raised inside a fork's callback where Python drops it (the run went on to
  exit 0), is delivered again by ``run_command`` (:func:`pointgeope.errors.stop_on_sigterm`);
- each worker asks the kernel to kill it when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``, SIGKILL,
  :mod:`pointgeope.parent_death`; elsewhere a thread that watches the parent's pid), which also covers
  ``kill -9`` of the main process;
- a worker holds no lock of its parent's (:mod:`pointgeope.lock` closes them in every forked child), so the
  lock is free once the main process has ended, whatever became of the workers.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from pointgeope.errors import UserError
from pointgeope.parent_death import death_signal_request


def _watch(parent: int) -> None:
    """End this process (SIGKILL) as soon as ``parent`` is no longer its parent: a thread that looks every
    0.5 s, where the kernel cannot be asked (no ``prctl``)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def _worker_start(parent: int, request) -> None:
    """Pool initializer: the default SIGTERM (the pool stops its workers with it; the parent's handler
    would raise in them), Ctrl-C left to the main process, and death with the parent: ``request``
    (:func:`~pointgeope.parent_death.death_signal_request`'s, made before the fork), else :func:`_watch`.
    One OpenMP thread a worker unless ``OMP_NUM_THREADS`` says otherwise: the normals' kNN search
    (``pykdtree``, loaded in the worker after this) would otherwise start a thread per core in each of the
    ``--jobs`` workers, which then wait spinning for each other's cores. (Set but empty says nothing: OpenMP
    would print "Invalid value for environment variable OMP_NUM_THREADS" in each worker.)"""
    if not os.environ.get("OMP_NUM_THREADS", "").strip():
        os.environ["OMP_NUM_THREADS"] = "1"
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if request is not None:
        request()
    else:
        _watch(parent)


@contextlib.contextmanager
def parallel_map(func, tasks: list, jobs: int):
    """The results of ``func`` over ``tasks``, in the order they finish: in this process, or in ``jobs``
    worker processes. A worker that dies (killed, out of memory, a crash) ends the run with a
    :class:`UserError` at once (``ProcessPoolExecutor`` notices the death, where ``multiprocessing.Pool``
    would wait forever for its task); what the finished tasks wrote is kept."""
    if jobs <= 1 or len(tasks) <= 1:
        yield map(func, tasks)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    import pandas  # noqa: F401  (imported once before the workers fork, not once in each: ~0.3 s)

    # fork on Linux: a worker's parent is then this process, whose death it watches (under forkserver,
    # Python 3.14's default there, it would be the server, and every worker would end itself); the request
    # (a closure, not pickled under fork) exists on Linux only
    made = []  # every worker process the pool makes, registered in the pool or not
    context = _recording(multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None), made)
    pool = ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=context, initializer=_worker_start,
                               initargs=(os.getpid(), death_signal_request(signal.SIGKILL)))
    stopped = False
    try:
        futures = [pool.submit(func, task) for task in tasks]  # the first submit forks every worker
        yield (future.result() for future in as_completed(futures))
    except BrokenProcessPool:
        raise UserError("a prepare worker process died (killed, out of memory, or crashed) while parsing "
                        "rooms; the rooms parsed before it are kept: run the same command again, or with "
                        "--jobs 1 to see which room it was") from None
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM as errors.Terminated
        stopped = True
        raise
    finally:
        for process in made:  # stop the others now
            if process.pid is not None:
                process.kill()
        _shutdown(pool, stopped)


def _recording(context, made: list):
    """``context`` (a ``multiprocessing`` context) whose ``Process`` also appends each process it makes to
    ``made``. The workers to stop were read from the pool's ``_processes``, where ``submit`` registers one
    after it has forked it: a stop that landed in between (the stop delivered again 10 ms after a fork, on
    a busy machine) left a worker that nothing stopped, waiting for a task, and the interpreter waited for it
    at exit: ``prepare`` hung after printing ``terminated``. They are killed (SIGKILL), not terminated: one
    forked a moment ago still has this process's SIGTERM handler, which raises in it and prints a traceback."""
    class Recording(type(context)):
        def Process(self, *args, **kwargs):
            process = super().Process(*args, **kwargs)
            made.append(process)
            return process

    return Recording()


def _shutdown(pool, stopped: bool) -> None:
    """``pool.shutdown``, also after a stop that came while ``submit`` started the pool's manager thread.

    ``Thread.start`` waits until the new thread says it runs; a stop raised in that wait (a stop delivered
    again 10 ms after the fork it was dropped in lands there on a busy machine) leaves a thread that
    ``join`` refuses (``RuntimeError: cannot join thread before it is started``), and that error replaced the
    stop: a traceback and exit code 1 instead of ``interrupted``/``terminated``. That thread either never ran
    or ends on its own (the pool is shut down and its workers killed; the interpreter waits for it at
    exit), so after a stop the refusal is let go; without one it is a bug and raised."""
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except RuntimeError:
        if not stopped:
            raise
