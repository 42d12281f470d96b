"""pointgeope/atomic.py: the target is either the old file or the complete new one, never partial."""
from __future__ import annotations

import os

import pytest

from pointgeope.atomic import atomic_open, atomic_path, writable_folder, write_text_atomic
from pointgeope.errors import UserError


def test_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write("half-")
        raise RuntimeError("killed")
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]


def test_success_replaces_creates_folders_and_keeps_suffix(tmp_path):
    path = tmp_path / "deep" / "er" / "shot.png"
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.suffix == ".png" and tmp != path
        tmp.write_bytes(b"\x89PNG")
    assert path.read_bytes() == b"\x89PNG" and os.listdir(path.parent) == ["shot.png"]
    with atomic_open(path, "wb") as f:
        f.write(b"new")
    assert path.read_bytes() == b"new"


def test_usual_permissions_not_mkstemp_private(tmp_path):
    mask = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(mask)
    assert (path.stat().st_mode & 0o777) == 0o644


def test_rejects_read_modes(tmp_path):
    with pytest.raises(ValueError, match="expected mode 'w' or 'wb', got 'r'"):
        with atomic_open(tmp_path / "a", "r"):
            pass


WRITER = """
import sys, time
from pointgeope.atomic import atomic_path
open_writers = [atomic_path(target) for target in sys.argv[1:]]
for ctx in open_writers:
    ctx.__enter__().write_text("half")  # never left: the process is killed while the files are half written
print("written", flush=True)
time.sleep(60)
"""


def test_leftovers_of_a_killed_writer_are_removed(tmp_path):
    import signal
    import subprocess
    import sys

    from pointgeope.atomic import remove_leftovers

    (tmp_path / "predictions").mkdir()
    keep = [tmp_path / "last.pt", tmp_path / ".lock", tmp_path / "predictions" / "Area_1.h5", tmp_path / ".x.tmp"]
    for path in keep:
        path.write_text("keep")
    targets = [tmp_path / "last.pt", tmp_path / "predictions" / "Area_1.h5", tmp_path / "metrics.json"]
    proc = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, targets)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "written"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len([p for p in tmp_path.rglob("*") if p.is_file()]) == len(keep) + 3
    removed = remove_leftovers(tmp_path)
    assert sorted(p.name.split(".")[1] for p in removed) == ["Area_1", "last", "metrics"]
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(keep)
    assert all(p.read_text() == "keep" for p in keep)


def test_a_write_the_disk_refuses_names_the_target_even_behind_another_error(tmp_path):
    """ENOSPC, EDQUOT and EFBIG (ulimit -f) end as one DiskFullError naming the file; a writer that hides
    the OSError behind its own error (torch.save raises a RuntimeError) is seen through."""
    import errno

    from pointgeope.atomic import DiskFullError

    path = write_text_atomic(tmp_path / "last.pt", "old")
    causes = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
              errno.EFBIG: "file too large for the file size limit (`ulimit -f`) or the file system"}
    for code, cause in causes.items():
        with pytest.raises(DiskFullError) as err, atomic_open(path, "wb") as f:
            f.write(b"half")
            try:
                raise OSError(code, os.strerror(code))
            except OSError:
                raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")  # noqa: B904 - as torch.save
        assert str(err.value) == (f"{path}: cannot write it: {cause}; nothing of it was kept; free space (or "
                                  "raise the limit) and run the same command again")
        assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]
    with pytest.raises(PermissionError), atomic_path(path):  # not a full disk: unchanged
        raise PermissionError(errno.EACCES, "Permission denied")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_a_folder_or_a_link_to_a_fifo_is_refused_not_replaced(tmp_path):
    """The rename replaced whatever node was at the path by a regular file: a FIFO (and as root, /dev/null)."""
    from pointgeope.atomic import UnwritableError

    fifo, folder, link = tmp_path / "f.ply", tmp_path / "d.png", tmp_path / "l.ply"
    os.mkfifo(fifo)
    folder.mkdir()
    link.symlink_to(fifo)
    for path, kind in ((fifo, "a named pipe (FIFO)"), (folder, "a folder"), (link, "a named pipe (FIFO)")):
        with pytest.raises(UnwritableError) as caught, atomic_path(path) as tmp:
            tmp.write_text("never")
        assert str(caught.value) == (f"{path}: expected a regular file to write (or nothing there), found {kind}; "
                                     "nothing was written; give a file name")
    assert fifo.is_fifo() and folder.is_dir() and link.is_symlink() and os.listdir(folder) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.png", "f.ply", "l.ply"]  # no temporary left
    late = tmp_path / "late.txt"  # made while the writer ran: refused at the rename
    with pytest.raises(UnwritableError, match="found a named pipe"), atomic_open(late) as f:
        f.write("x")
        os.mkfifo(late)
    assert late.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["d.png", "f.ply", "l.ply", "late.txt"]
    write_text_atomic(tmp_path / "l2.txt", "a")  # a regular file and a link to one are replaced as before
    (tmp_path / "l3.txt").symlink_to(tmp_path / "l2.txt")
    assert write_text_atomic(tmp_path / "l3.txt", "b").read_text() == "b"


def test_a_stop_as_the_temporary_file_is_created_leaves_no_file(tmp_path, monkeypatch):
    """A stop (Ctrl-C, SIGTERM) whose handler runs as the temporary file is created, right after the open
    (where a signal that came during it is handled): the file was left behind, its name not yet known to
    atomic_path (a stopped prepare left ``.work/.Area_1.h5.<random>.tmp.h5``, 4 runs in 10 of
    test_a_stop_dropped_in_a_callback_still_ends_the_run)."""
    real_open = os.open

    def open_then_stop(file, flags, *args, **kwargs):
        fd = real_open(file, flags, *args, **kwargs)
        if ".tmp" in os.fspath(file):
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(os, "open", open_then_stop)
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "out.h5"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_leftovers_are_not_searched_for_in_another_writers_folder(tmp_path):
    """A folder made inside the one being cleared that holds a lock file of its own is another command's
    output folder (a `predict --out` in a fold folder, a data root prepared inside a raw folder): its writer
    may be writing its temporary files now, under its own lock. `evaluate`, `train`, `prepare` and `synth`
    cleared every sub-folder, and so deleted a live writer's temporary file, which its rename then lacked."""
    from pointgeope.atomic import remove_leftovers

    name = ".Area_1.h5.0a1b2c3d.tmp.h5"
    for sub in ("predictions", "pred", "pred/Area_2", "h5", "h5/deeper"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / name).write_text("half")
    (tmp_path / "pred" / ".lock").write_text("{}")        # a predict writing here now
    (tmp_path / "h5" / ".readers.lock").write_text("")    # a prepared data root
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / name).write_text("not below")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # a link to a folder: not followed
    (tmp_path / name).write_text("half")
    removed = remove_leftovers(tmp_path)
    assert sorted(removed) == [tmp_path / name, tmp_path / "elsewhere" / name, tmp_path / "predictions" / name]
    kept = ["h5", "h5/deeper", "pred", "pred/Area_2"]
    assert sorted(p.parent.relative_to(tmp_path).as_posix() for p in tmp_path.rglob(name)) == kept
    assert remove_leftovers(tmp_path / "pred", recursive=False) == [tmp_path / "pred" / name]  # its own writer's


def test_a_folder_cleared_under_a_lock_above_it_is_left_to_its_own_writer_and_each_removal_is_said(tmp_path):
    """`locked=False` (the caller holds a folder above's lock, as ablate RUN's for RUN/report/fold_K): a folder
    with a lock file of its own is its writer's, left alone; without one its leftovers go, one line each."""
    from pointgeope.atomic import remove_leftovers

    said: list[str] = []
    killed = [tmp_path / ".a.json.0a1b2c3d.tmp.json", tmp_path / ".b.md.9efd0e96.tmp.md"]
    for path in killed:
        path.write_text("half")
    (tmp_path / ".lock").write_text("{}")
    assert remove_leftovers(tmp_path, locked=False, log=said.append) == [] and said == []
    assert all(path.exists() for path in killed)
    (tmp_path / ".lock").unlink()
    assert remove_leftovers(tmp_path, locked=False, log=said.append) == killed
    assert said == [f"removed {path}, left by an interrupted run" for path in killed]
    assert not any(path.exists() for path in killed)


def test_only_the_names_atomic_path_makes_are_leftovers(tmp_path):
    """The names of atomic_path's temporary files are leftovers; another program's temporary file in a folder
    written here (`predict --out .`), named as Python's mkstemp names them (8 of [a-z0-9_]), is not: it was
    deleted as ours."""
    import tempfile
    from pathlib import Path

    from pointgeope.atomic import is_leftover, remove_leftovers

    made = []
    for target in ("Area_1.h5", "last.pt", "notes", "a b.tar.gz"):
        with atomic_path(tmp_path / target) as tmp:
            made.append(tmp.name)
            assert is_leftover(tmp.name) and remove_leftovers(tmp_path) == [tmp]
            tmp.write_text("written")  # deleted by remove_leftovers: written again for the rename
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["Area_1.h5", "last.pt", "notes", "a b.tar.gz"])
    others = [tmp_path / ".draft.txt.k2_x9qzp.tmp", tmp_path / ".x.npy.zzzzzzzz.tmp.npy",
              tmp_path / ".a.0a1b2c3d.tmp.npy.part"]
    for path in others:
        path.write_text("another program's")
    fd, name = tempfile.mkstemp(prefix=".report.md.", suffix=".tmp", dir=tmp_path)
    os.close(fd)
    if any(c not in "0123456789abcdef" for c in Path(name).name.split(".")[-2]):  # 1 in 500 is all hex
        others.append(Path(name))
    assert remove_leftovers(tmp_path) == [] and all(p.exists() for p in others)


def test_a_folder_refused_part_way_leaves_none_of_the_folders_it_made(tmp_path):
    """``mkdir -p KEPT/a/b/<a name too long>`` made ``a`` and ``b`` before its last part failed: they stayed (and
    the line said to make the folder writable)."""
    from pointgeope.atomic import _MADE, writable_folder
    from pointgeope.errors import UserError

    (tmp_path / "kept").mkdir()
    with pytest.raises(UserError, match=r"cannot write into it \(File name too long\); give a shorter name$"):
        writable_folder(tmp_path / "kept" / "a" / "b" / ("x" * 300))
    assert [p.name for p in tmp_path.rglob("*")] == ["kept"] and not any(tmp_path in p.parents for p in _MADE)


def test_a_folder_made_that_cannot_be_written_is_removed_with_its_parents_made(tmp_path, monkeypatch):
    """A new folder the test write is refused in (a umask that leaves it unwritable; simulated: root writes
    anywhere) stayed, with the parents made for it; one that was there before stays."""
    from pointgeope import atomic
    from pointgeope.errors import UserError

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic.tempfile, "TemporaryFile", refused)
    (tmp_path / "kept").mkdir()
    for target in (tmp_path / "kept" / "a" / "b", tmp_path / "kept"):
        with pytest.raises(UserError, match=r"cannot write into it \(Permission denied\)"):
            atomic.writable_folder(target)
        assert [p.name for p in tmp_path.rglob("*")] == ["kept"]


@pytest.mark.parametrize("below", ["sub", "sub/deeper"])
def test_a_file_on_the_folders_path_is_named(tmp_path, below):
    """An output folder below a file (``out.txt/sub``): the message names the file on the path; before, it said
    ``cannot write into it (Not a directory); make it writable``, which sends the user to the permissions."""
    (tmp_path / "out.txt").write_text("x")
    with pytest.raises(UserError) as err:
        writable_folder(tmp_path / "out.txt" / below)
    assert str(err.value) == (f"output folder {tmp_path / 'out.txt' / below}: expected a folder, but "
                              f"{tmp_path / 'out.txt'} on its path is a file; remove it or give another folder name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
