"""Tests of pointgeope/parent_death.py: a child armed by ``death_signal_request(sig)`` is sent ``sig`` when
its parent ends (the kernel's own record, read back with ``PR_GET_PDEATHSIG``), and one whose parent ended
before the request exits at once with ``128 + sig``. (That the kernel then sends it: the callers' tests,
``tests/engine/test_messages.py::test_kill_9_of_ablate_leaves_no_trial_running`` and
``tests/data_prep/test_prepare_workers.py::test_a_killed_parallel_prepare_takes_its_workers_and_its_lock_with_it``.)"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import pytest

from pointgeope.parent_death import death_signal_request

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
PR_GET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 2, 36  # <linux/prctl.h>


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_the_child_is_armed_with_its_callers_signal(sig):
    request = death_signal_request(sig)
    pid = os.fork()
    if pid == 0:  # the child: its death signal, as the kernel holds it, is its exit code
        try:
            request()
            armed = ctypes.c_int(-1)
            ctypes.CDLL(None, use_errno=True).prctl(PR_GET_PDEATHSIG, ctypes.byref(armed), 0, 0, 0)
            os._exit(armed.value)
        finally:
            os._exit(99)
    assert _exit_code(pid) == int(sig)


def test_a_child_whose_parent_ended_before_the_request_exits_at_once():
    # reaper (a subreaper, so that it inherits the orphan) -> parent (makes the request, forks, ends) -> child
    reaper = os.fork()
    if reaper == 0:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            parent = os.fork()
            if parent == 0:
                request, me = death_signal_request(signal.SIGINT), os.getpid()
                if os.fork() == 0:
                    deadline = time.monotonic() + 20
                    while os.getppid() == me and time.monotonic() < deadline:  # until the parent has ended
                        time.sleep(0.01)
                    request()
                    os._exit(0)  # not reached: the request ends the orphan
                os._exit(0)
            os.waitpid(parent, 0)
            os._exit(_exit_code(-1))  # the orphan, now the reaper's child
        finally:
            os._exit(99)
    assert _exit_code(reaper) == 128 + int(signal.SIGINT)
