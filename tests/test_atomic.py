"""pointgeope/atomic.py: the target is either the old file or the complete new one, never partial."""
from __future__ import annotations

import os

import pytest

from pointgeope.atomic import atomic_open, atomic_path, write_text_atomic


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
