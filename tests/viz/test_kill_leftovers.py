"""viz holds no lock on the folder it writes into (any folder: ``--screenshot ~/fig.png``), so no rerun may
clear a temporary file there: its figure and PLY are written through a file without a name until the rename
(``pointgeope.atomic.atomic_unnamed``), and a ``kill -9`` while they are written leaves nothing behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pointgeope.atomic import atomic_unnamed

# Writes the figure (or the PLY) of ARGV[2] with a writer stopped halfway: half of the bytes out, then it waits.
WRITER = """
import sys, time
import numpy as np
what, path = sys.argv[1], sys.argv[2]
def half_then_wait(f, data):
    f.write(data[: len(data) // 2]); f.flush()
    print("half", flush=True); time.sleep(60)
if what == "png":
    import PIL.Image
    from pointgeope.viz.render import save_image
    PIL.Image.Image.save = lambda self, f, **kw: half_then_wait(f if hasattr(f, "write") else open(f, "wb"),
                                                                b"x" * 100000)  # to a file object, or by name
    save_image(np.zeros((8, 8, 3), np.uint8), path)
else:
    import pointgeope.scans.ply as ply
    from pointgeope.viz.ply import write_ply
    class Half:
        def __init__(self, f): self.f = f
        def write(self, data): half_then_wait(self.f, data)
    import contextlib
    def wrap(opener):
        @contextlib.contextmanager
        def opened(*a):
            with opener(*a) as f:
                yield Half(f)
        return opened
    for name in ("atomic_open", "atomic_unnamed"):  # whichever the writer opens its file with
        if hasattr(ply, name):
            setattr(ply, name, wrap(getattr(ply, name)))
    write_ply(path, np.zeros((1000, 3)), np.zeros((1000, 3), np.uint8))
"""


@pytest.mark.parametrize("what", ["png", "ply"])
def test_a_kill_while_viz_writes_leaves_nothing(tmp_path, what):
    """It left `.fig.png.<8 hex digits>.tmp.png` (or `.fig.ply...`) beside the figure for good: viz takes no lock,
    so a rerun could not tell a killed viz's temporary file from a live one's."""
    folder = tmp_path / "figures"
    folder.mkdir()
    (folder / "mine.txt").write_text("the user's")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, what, str(folder / f"fig.{what}")],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "half"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]


def test_atomic_unnamed_writes_replaces_and_keeps_the_old_file_on_an_error(tmp_path):
    path = tmp_path / "sub" / "fig.png"
    with atomic_unnamed(path) as f:
        f.write(b"first")
    assert path.read_bytes() == b"first" and os.listdir(path.parent) == ["fig.png"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
    with pytest.raises(RuntimeError), atomic_unnamed(path) as f:
        f.write(b"half")
        raise RuntimeError("writer failed")
    assert path.read_bytes() == b"first" and os.listdir(path.parent) == ["fig.png"]
    with atomic_unnamed(path) as f:
        f.write(b"second")
    assert path.read_bytes() == b"second" and os.listdir(path.parent) == ["fig.png"]


def test_atomic_unnamed_without_unnamed_files_writes_through_a_named_one(tmp_path, monkeypatch):
    """A file system without O_TMPFILE (NFS, an older kernel: EOPNOTSUPP) writes as atomic_open does."""
    import errno

    real_open = os.open

    def no_tmpfile(path, flags, *args):
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_tmpfile)
    seen = []
    with atomic_unnamed(tmp_path / "fig.png") as f:
        seen = os.listdir(tmp_path)
        f.write(b"bytes")
    assert len(seen) == 1 and seen[0].startswith(".fig.png.") and seen[0].endswith(".tmp.png")  # the named one
    assert os.listdir(tmp_path) == ["fig.png"] and (tmp_path / "fig.png").read_bytes() == b"bytes"


def test_an_error_in_the_fallback_write_is_not_chained_to_the_refused_unnamed_file(tmp_path, monkeypatch):
    """Where the unnamed file is refused (no O_TMPFILE: here the flag itself is missing), the named write ran inside
    the handler of that refusal, so an error of the writer's own came chained to it ("During handling of the above
    exception, another exception occurred: AttributeError ... O_TMPFILE"), a traceback about the fallback rather
    than the error; and a refusal on a full disk would have made any later error of the writer's a DiskFullError."""
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    path = tmp_path / "fig.png"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError) as caught, atomic_unnamed(path) as f:
        f.write(b"half")
        raise RuntimeError("the writer's own error")
    assert caught.value.__context__ is None
    assert os.listdir(tmp_path) == ["fig.png"] and path.read_bytes() == b"old"
