"""Tests of pointgeope/denied.py: a denied access named by what refused it, with real mode bits.

Root is refused nothing by mode bits, so as root each case runs in a child process whose user is not root
(``unshare --user``: uid 1000 inside, the files' owner outside, no capabilities), where the owner's bits
apply as they do to a user's own files; without that (no user namespaces) the tests are skipped."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def as_user(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run the Python ``script`` with ``args`` as a user that mode bits refuse (this one, unless root)."""
    argv = [sys.executable, "-c", script, *args]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None or subprocess.run(
                ["unshare", "--user", "--map-user=1000", "--map-group=1000", "true"], capture_output=True,
                check=False).returncode:
            pytest.skip("root, and no user namespace to run as another user")
        argv = ["unshare", "--user", "--map-user=1000", "--map-group=1000", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)


LINES = """
import json, sys
from pointgeope.denied import denied_line
lines = {}
for name in sys.argv[1:]:
    try:
        open(name, "rb").close() if not name.endswith("new.txt") else open(name, "w").close()
    except PermissionError as err:
        lines[name] = denied_line(err)
print(json.dumps(lines))
"""


def test_the_line_names_the_folder_or_file_that_refused_the_access(tmp_path):
    """The first refusal from the top is named: a folder that cannot be entered (not the file below it that
    the call was given), a file that cannot be read, a folder that a new file cannot be written into."""
    (tmp_path / "a" / "shut" / "deep").mkdir(parents=True)
    (tmp_path / "a" / "shut" / "deep" / "last.pt").write_bytes(b"x")
    (tmp_path / "a" / "secret.pt").write_bytes(b"x")
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "a" / "shut", 0o600)               # read, no search: its entries cannot be reached
    os.chmod(tmp_path / "a" / "secret.pt", 0o200)          # write only
    os.chmod(tmp_path / "ro", 0o500)
    names = [str(tmp_path / "a" / "shut" / "deep" / "last.pt"), str(tmp_path / "a" / "secret.pt"),
             str(tmp_path / "ro" / "new.txt")]
    try:
        done = as_user(LINES, *names)
    finally:
        os.chmod(tmp_path / "a" / "shut", 0o700)
        os.chmod(tmp_path / "ro", 0o700)
    assert done.returncode == 0, done.stderr
    advice = "; change its permissions (chmod, chown) or use another folder"
    assert json.loads(done.stdout) == {
        names[0]: f"Permission denied: {names[0]}: this user cannot enter the folder {tmp_path / 'a' / 'shut'}{advice}",
        names[1]: f"Permission denied: {names[1]}: this user cannot read the file {names[1]}{advice}",
        names[2]: f"Permission denied: {names[2]}: this user cannot write into the folder {tmp_path / 'ro'}{advice}"}


def test_a_relative_path_stays_relative_and_a_bytes_name_is_text():
    """A name as the call was given it (a trial's ``abl/rpe/seed_0/...``), and TensorBoard's bytes file name
    written as text, where the line said ``Permission denied: b'RUN/area_1/tb/events...'``."""
    from pointgeope.denied import denied_line

    line = denied_line(PermissionError(13, "Permission denied", b"no/such/tb/events.out"))
    assert line == ("Permission denied: no/such/tb/events.out; check the permissions of it and of its folders, or "
                    "use another folder")



def test_a_file_descriptor_in_the_place_of_a_path_is_said_not_a_traceback():
    """``os.chmod(fd, ...)`` of another user's file fails with EPERM and the descriptor's number as its
    ``filename``: os.fsdecode of that int raised a TypeError inside the error's own line (a traceback)."""
    from pointgeope.denied import denied_line
    from pointgeope.errors import user_message

    err = PermissionError(1, "Operation not permitted", 7)
    expected = "Operation not permitted: 7; check the permissions of it and of its folders, or use another folder"
    assert denied_line(err) == expected and user_message(err) == expected
