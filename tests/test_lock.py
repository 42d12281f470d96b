"""pointgeope/lock.py: one writer per folder, across real processes; a dead owner's lock is taken over."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from pointgeope.lock import LOCK_NAME, LockError, folder_lock, still_held

HOLDER = """
import sys, time
from pointgeope.lock import folder_lock
with folder_lock(sys.argv[1], "holder"):
    print("locked", flush=True)
    time.sleep(120)
"""


def _holder(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_process_is_refused_and_a_killed_owner_is_taken_over(tmp_path, capsys):
    proc = _holder(tmp_path)
    try:
        owner = json.loads((tmp_path / LOCK_NAME).read_text())
        assert owner["pid"] == proc.pid and owner["host"] == socket.gethostname() and owner["command"] == "holder"
        with pytest.raises(LockError, match=rf"^{re.escape(str(tmp_path))} is being written by pid {proc.pid} on "
                                            rf"{socket.gethostname()} \(since .*\), `holder`; wait for it to end "
                                            rf"or stop it \(its lock: {re.escape(str(tmp_path / LOCK_NAME))}\)$"):
            with folder_lock(tmp_path, "mine"):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no clean-up: the lock file stays, naming a dead pid
        proc.wait()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == proc.pid
    with folder_lock(tmp_path, "mine") as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert (f"warning: {tmp_path / LOCK_NAME}: taking over the lock of pid {proc.pid} on {socket.gethostname()}, "
            "which has ended") in capsys.readouterr().err
    assert not (tmp_path / LOCK_NAME).exists()  # released: deleted


def test_the_same_process_cannot_take_it_twice_and_release_frees_it(tmp_path):
    with folder_lock(tmp_path / "new"):  # creates the folder
        with pytest.raises(LockError, match="is being written by pid"):
            with folder_lock(tmp_path / "new"):
                pass
    with folder_lock(tmp_path / "new"):
        pass


def test_a_lock_left_by_another_host_is_refused_with_what_to_do(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "yesterday"}))
    with pytest.raises(LockError, match=rf"locked by pid 1 on elsewhere \(since yesterday\), which cannot be checked "
                                        rf"from .*; if that process has ended, delete "
                                        rf"{re.escape(str(tmp_path / LOCK_NAME))}$"):
        with folder_lock(tmp_path):
            pass
    assert (tmp_path / LOCK_NAME).exists()  # not ours to delete


def test_a_record_longer_than_4_kib_is_read_whole(tmp_path):
    """The record was read from its first 4096 bytes: a holder's command of long paths (the other host's
    here, 5000 characters) cut the JSON, the record read as none, and the lock was taken over."""
    record = {"pid": 1, "host": "elsewhere", "since": "yesterday", "command": "train.py " + "x" * 5000}
    (tmp_path / LOCK_NAME).write_text(json.dumps(record))
    with pytest.raises(LockError, match=r"locked by pid 1 on elsewhere \(since yesterday\), which cannot be checked"):
        with folder_lock(tmp_path):
            pass
    assert json.loads((tmp_path / LOCK_NAME).read_text()) == record


def test_many_processes_one_winner(tmp_path):
    """Six processes race for the lock; exactly one holds it at a time (each appends in/out marks)."""
    script = """
import sys, time
from pointgeope.lock import folder_lock, LockError
log = sys.argv[2]
deadline = time.time() + 60
while True:
    try:
        with folder_lock(sys.argv[1]):
            with open(log, "a") as f: f.write("in\\n")
            time.sleep(0.05)
            with open(log, "a") as f: f.write("out\\n")
        break
    except LockError:
        assert time.time() < deadline
        time.sleep(0.01)
"""
    log = tmp_path / "log.txt"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "out"), str(log)]) for _ in range(6)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    assert log.read_text().split() == ["in", "out"] * 6


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_holder_that_has_not_written_its_record_yet_is_named_once_it_has(tmp_path):
    """The holder takes the flock, then writes its record: a writer refused in between waits for the record
    and names the holder's pid (it said 'another process' when it read the lock file in that moment)."""
    import fcntl
    import threading
    import time

    folder = tmp_path / "run"
    folder.mkdir()
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)              # held, record still empty
    record = {"pid": 4242, "host": socket.gethostname(), "since": "now", "command": "late writer"}
    writer = threading.Timer(0.3, lambda: os.pwrite(fd, json.dumps(record).encode(), 0))
    writer.start()
    try:
        start = time.monotonic()
        with pytest.raises(LockError, match=r"is being written by pid 4242 on .*`late writer`"):
            with folder_lock(folder):
                pass
        assert time.monotonic() - start >= 0.25
    finally:
        writer.join()
        os.close(fd)


FORKING_HOLDER = """
import os, sys, time
from pointgeope.lock import folder_lock
with folder_lock(sys.argv[1], "forking holder"):
    if os.fork() == 0:  # a worker that outlives its parent
        print(os.getpid(), flush=True)
        time.sleep(120)
        os._exit(0)
    time.sleep(120)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_does_not_keep_a_killed_parents_lock(tmp_path, capsys):
    """flock belongs to the open file description, which fork shares: the child of a holder kept the folder
    locked after the holder was killed, and the next writer was refused in the name of the dead pid."""
    proc = subprocess.Popen([sys.executable, "-c", FORKING_HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with folder_lock(tmp_path, "mine") as path:  # the child is alive, the lock is free
            assert json.loads(path.read_text())["pid"] == os.getpid()
        assert f"taking over the lock of pid {proc.pid}" in capsys.readouterr().err
    finally:
        os.kill(child, signal.SIGKILL)


READER = """
import sys, time
from pointgeope.lock import reader_lock
with reader_lock(sys.argv[1]):
    print("reading", flush=True)
    time.sleep(120)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_readers_exclude_a_writer_that_replaces_their_files_and_the_reverse(tmp_path):
    from pointgeope.lock import READERS_NAME, reader_lock

    reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "reading"
    try:
        with pytest.raises(LockError, match=rf"^{re.escape(str(tmp_path))} is being read by pid {reader.pid} "
                                            r"\(`\S*python\S* -c .*`\); wait for it to end, or write into another "
                                            r"folder$"):
            with folder_lock(tmp_path, "prepare", readers=True):
                pass
        assert not (tmp_path / LOCK_NAME).exists()  # the refused writer left nothing
        with reader_lock(tmp_path):  # readers share it
            pass
        with folder_lock(tmp_path, "a writer of other files"):  # readers=False: not excluded
            pass
    finally:
        reader.kill()
        reader.wait()
    holder = _holder(tmp_path)  # HOLDER takes folder_lock without readers=True: readers may go on
    try:
        with reader_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with folder_lock(tmp_path, "prepare", readers=True):
        script = "import sys\nfrom pointgeope.lock import reader_lock\nwith reader_lock(sys.argv[1]): pass"
        refused = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                                 check=False)
        assert refused.returncode == 1
        assert (f"LockError: {tmp_path} is being written by pid {os.getpid()} on {socket.gethostname()} (since "
                in refused.stderr and "`prepare`; wait for it to end or stop it" in refused.stderr)
    assert (tmp_path / READERS_NAME).exists() and not (tmp_path / LOCK_NAME).exists()


def test_a_reader_of_a_folder_it_cannot_write_reads_without_the_lock(tmp_path):
    from pointgeope.lock import reader_lock

    with reader_lock(tmp_path / "missing"):  # nothing made
        pass
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
@pytest.mark.parametrize("length, shown", [(180, "whole"), (900, "cut")])
def test_a_holders_long_command_is_shown_whole_or_marked_as_cut(tmp_path, length, shown):
    """A refused writer sees the holder's command: a deep run folder's (180 characters) whole, where 100 had
    been kept without a mark (which cut `prepare raw /tmp/.../root` on a machine with a longer temp path);
    one over the limit cut and ended with ' ...'."""
    import fcntl

    command = ("pointgeope train --run-dir " + "/deep" * 200)[:length]
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, json.dumps({"pid": 4242, "host": socket.gethostname(), "since": "now", "command": command})
              .encode(), 0)
    try:
        with pytest.raises(LockError) as refused:
            with folder_lock(tmp_path):
                pass
    finally:
        os.close(fd)
    quoted = str(refused.value).split("`")[1]
    if shown == "whole":
        assert quoted == command
    else:
        assert quoted.endswith(" ...") and command.startswith(quoted[:-4]) and 100 < len(quoted) < length


def test_still_held_until_the_folder_or_its_lock_file_is_deleted_or_replaced(tmp_path):
    import shutil

    assert not still_held(tmp_path / "a")                        # never locked
    with folder_lock(tmp_path / "a", "mine"):
        assert still_held(tmp_path / "a")
        assert not still_held(tmp_path)                          # another folder
        shutil.rmtree(tmp_path / "a")
        assert not still_held(tmp_path / "a")
        (tmp_path / "a").mkdir()
        (tmp_path / "a" / LOCK_NAME).write_text("{}")            # made again: another file, no lock of ours
        assert not still_held(tmp_path / "a")
    with folder_lock(tmp_path / "b", "mine"):
        (tmp_path / "b" / LOCK_NAME).unlink()                    # the lock file alone
        assert not still_held(tmp_path / "b")
    assert not still_held(tmp_path / "b")


def test_the_live_writer_is_the_process_holding_the_lock_not_any_process_of_its_pid(tmp_path):
    """A lock file left by a killed writer names a pid that another process may hold since (after a reboot a
    low pid is soon some daemon's). Before, any live process of that pid was taken for the writer: the report
    left the fold out as 'being written now' for as long as that process lived."""
    from pointgeope.lock import live_writer

    assert live_writer(tmp_path) is None                         # no lock file
    proc = _holder(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == proc.pid and live_writer(tmp_path) == record
    finally:
        os.kill(proc.pid, signal.SIGKILL)                        # the file stays, naming a dead pid
        proc.wait()
    assert live_writer(tmp_path) is None
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])   # the pid's new owner
    try:
        (tmp_path / LOCK_NAME).write_text(json.dumps({**record, "pid": other.pid}))
        assert live_writer(tmp_path) is None, "a live process that holds no lock is no writer"
    finally:
        other.kill()
        other.wait()
    with folder_lock(tmp_path, "mine"):
        assert live_writer(tmp_path) is None                     # this process: never its own writer


@pytest.mark.parametrize("name", [LOCK_NAME, ".readers.lock"])
def test_a_folder_in_place_of_a_lock_file_is_one_line_saying_to_remove_it(tmp_path, name):
    """os.open of a folder raised IsADirectoryError: a traceback of train, evaluate and prepare."""
    (tmp_path / name).mkdir()
    with pytest.raises(LockError, match=rf"^{re.escape(str(tmp_path / name))}: expected the lock file of "
                                        rf"{re.escape(str(tmp_path))}, found a folder; remove that folder"):
        with folder_lock(tmp_path, readers=True):
            pass
    (tmp_path / name).rmdir()
    with folder_lock(tmp_path, readers=True):
        assert (tmp_path / LOCK_NAME).is_file()


@pytest.mark.parametrize("name", [LOCK_NAME, ".readers.lock"])
def test_a_lock_file_that_is_a_link_into_no_folder_is_one_line_saying_to_remove_it(tmp_path, name):
    """``os.open(O_CREAT)`` of a link whose target's folder is missing: ``.lock`` was said to be "removed by another
    process ... twice" (the folder is there: run again would not help), ``.readers.lock`` a traceback."""
    from pointgeope.lock import reader_lock

    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(tmp_path / "gone" / "lock")
    line = (rf"^{re.escape(str(out / name))}: expected the lock file of {re.escape(str(out))}, found a symbolic "
            rf"link to {re.escape(str(tmp_path / 'gone' / 'lock'))}, which leads into no folder; remove the link "
            r"\(once no pointgeope command works there\) and run again$")
    with pytest.raises(LockError, match=line):
        with folder_lock(out, readers=True):
            pass
    if name == ".readers.lock":       # a reader of a folder it can write is refused, as for a folder there
        with pytest.raises(LockError, match=line):
            with reader_lock(out):
                pass
    assert sorted(p.name for p in out.iterdir()) == [name] and not (tmp_path / "gone").exists()
    (out / name).unlink()
    with folder_lock(out, readers=True):
        assert (out / LOCK_NAME).is_file()


def test_a_folder_in_place_of_the_readers_lock_file_refuses_a_reader_too(tmp_path):
    """A reader (train, evaluate) read the data root without its lock when a folder stood in place of the
    lock file (os.open's IsADirectoryError taken for a folder it cannot write), so a prepare was not kept out."""
    from pointgeope.lock import READERS_NAME, reader_lock

    (tmp_path / READERS_NAME).mkdir()
    with pytest.raises(LockError, match=rf"^{re.escape(str(tmp_path / READERS_NAME))}: expected the lock file of "
                                        rf"{re.escape(str(tmp_path))}, found a folder; remove that folder"):
        with reader_lock(tmp_path):
            pass
    (tmp_path / READERS_NAME).rmdir()
    with reader_lock(tmp_path):
        assert (tmp_path / READERS_NAME).is_file()


READ_THROUGH = """
import sys
from pointgeope.lock import reader_lock
with reader_lock(sys.argv[1]):
    print("read", flush=True)
"""


def test_a_folder_for_the_readers_lock_in_a_data_root_this_user_cannot_write_is_read_without_the_lock(tmp_path):
    """A read-only shared copy of the data (mode 0555, another user's) with a folder where .readers.lock would be:
    this user can neither make the lock file there nor remove that folder (the refusal's advice), and it was
    refused all the same, where any such root is read without the lock. Run as a user that mode bits refuse
    (root writes anywhere: tests/test_denied.py's as_user)."""
    from pointgeope.lock import READERS_NAME
    from tests.test_denied import as_user

    shared = tmp_path / "shared"
    (shared / READERS_NAME).mkdir(parents=True)
    (shared / "Area_1.h5").write_bytes(b"data")
    os.chmod(shared, 0o555)
    try:
        done = as_user(READ_THROUGH, str(shared))
    finally:
        os.chmod(shared, 0o755)
    assert (done.returncode, done.stdout, done.stderr) == (0, "read\n", "")
    assert sorted(p.name for p in shared.iterdir()) == [READERS_NAME, "Area_1.h5"]
    assert (shared / READERS_NAME).is_dir() and not any((shared / READERS_NAME).iterdir())
