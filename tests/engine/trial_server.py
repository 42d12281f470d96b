"""Ablation trials forked from one fresh interpreter: the in-process ``ablate`` runs of test_ablation.py. Each
trial of ``ablate`` is ``[sys.executable, "-m", "pointgeope", "train", ...]``; with ``sys.executable`` pointed at
:attr:`TrialServer.client` the trial is a fork of a server that imported the training stack once (~7 CPU s of
imports a trial saved; the trial then pays its own work alone).

The client stands in for the trial's process: it hands the server its argv, environment, working folder and its
stdin/stdout/stderr (``ablate``'s ``train.log``), passes SIGINT and SIGTERM (ablate's stop) on to the forked
trial, and exits as the trial did (its exit code, or killed by the same signal). The trial runs
``python -m pointgeope`` as that command does (``runpy``, ``__main__``) and exits as a process exits (atexit
handlers, buffers flushed). Before it forks, the server also imports what a training imports at its first use
and loads numba's registries (a trivial jitted call), as a trial's first numba call would; it runs no torch op
(a fork of a process whose torch ran on 2+ threads hangs at its first parallel region) and starts no thread.
It SIGKILLs a trial whose client went away. Any other command line given to the client runs the real
interpreter (``exec``). The tests of trials as processes of their own (a signal to ``ablate``, ``kill -9``)
start ``python -m pointgeope ablate`` as a process: its trials are real ``python -m pointgeope train`` runs.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The preamble of every interpreter the engine tests fork trainings from (this server, conftest's FORK_TRAIN_PY):
# what a training imports, at its start and at first use, and numba's registries loaded (~1.7 CPU s at a
# process's first jitted call). No torch op, no thread.
PRELOAD = """
import pointgeope.cli, pointgeope.commands.train, pointgeope.engine.state, pointgeope.engine.train
import pointgeope.engine.evaluate, pointgeope.model.network, pykdtree.kdtree, torch.utils.tensorboard
import numba
numba.njit(lambda x: x + 1)(1)
"""

SERVER = PRELOAD + r"""
import json, os, selectors, signal, socket, sys


def serve(path):
    # Forks a trial for each client; returns (in the fork alone) its spec and its stdin, stdout, stderr.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(sys.stdin, selectors.EVENT_READ)      # closed by the test: the server ends
    children = {}                                      # pid: its client's connection
    print("ready", flush=True)
    while True:
        for key, _ in sel.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    sel.close(), listener.close(), conn.close(), [c.close() for c in children.values()]
                    return json.loads(msg), fds
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d" % pid)
                children[pid] = conn
                sel.register(conn, selectors.EVENT_READ, pid)
            elif key.fileobj is sys.stdin:
                if not sys.stdin.readline():
                    for pid in children:
                        os.kill(pid, signal.SIGKILL)
                    for pid in children:
                        os.waitpid(pid, 0)
                    raise SystemExit(0)
            elif not key.fileobj.recv(16):             # the client is gone (killed): so is its trial
                os.kill(key.data, signal.SIGKILL)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            conn = children.pop(pid)
            sel.unregister(conn)
            try:
                conn.sendall(b"%d" % status)
            except OSError:
                pass
            conn.close()


spec, fds = serve(sys.argv[1])
for target, fd in enumerate(fds):
    os.dup2(fd, target)
    os.close(fd)
os.chdir(spec["cwd"])
os.environ.clear()
os.environ.update(spec["env"])
sys.argv = ["-m", *spec["argv"]]
import runpy
runpy.run_module("pointgeope", run_name="__main__", alter_sys=True)
raise SystemExit("python -m pointgeope returned without its exit")
"""

CLIENT = r"""#!{python} -S
import json, os, signal, socket, sys
if sys.argv[1:4] != ["-m", "pointgeope", "train"]:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect({path!r})
spec = {{"argv": sys.argv[3:], "env": dict(os.environ), "cwd": os.getcwd()}}
socket.send_fds(s, [json.dumps(spec).encode()], [0, 1, 2])
pid = int(s.recv(64))
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda n, _: os.kill(pid, n))
said = s.recv(64)
code = os.waitstatus_to_exitcode(int(said)) if said else -signal.SIGKILL
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


class TrialServer:
    """The server started in ``folder`` (its socket and :attr:`client` there); :meth:`close` ends it."""

    def __init__(self, folder: Path):
        path = folder / "trials.sock"
        self.client = folder / "python"
        self.client.write_text(CLIENT.format(python=sys.executable, path=str(path)))
        self.client.chmod(0o755)
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"), text=True)
        assert self.proc.stdout.readline() == "ready\n", self.proc.communicate(timeout=60)

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
