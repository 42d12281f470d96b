"""Tests of pointgeope/engine/runio.py: the fold's log.txt lines, the line that says why a training stopped."""
from __future__ import annotations

import re

from pointgeope.engine.runio import Log, record_stop
from pointgeope.errors import Terminated


def test_the_stop_line_is_appended_to_the_log_only(tmp_path, capsys):
    log = tmp_path / "log.txt"
    Log(log)("epoch 1/2  loss 1.0")
    record_stop(log, Terminated())
    record_stop(log, KeyboardInterrupt())
    record_stop(log, FloatingPointError("fold 1: the loss is nan"))
    record_stop(None, KeyboardInterrupt())          # another rank: nothing
    lines = log.read_text().splitlines()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
    assert [re.sub(stamp, "", line) for line in lines] == [
        "epoch 1/2  loss 1.0", "stopped: terminated (SIGTERM)", "stopped: interrupted (Ctrl-C)",
        "stopped: fold 1: the loss is nan"]
    assert all(re.match(stamp, line) for line in lines)
    assert capsys.readouterr().out.count("\n") == 1  # the command prints the stop itself: not twice


def test_a_log_that_cannot_be_written_does_not_replace_the_stop(tmp_path):
    """A full disk or a folder gone: the command's line about why it stopped must still come, so the
    OSError of the log's write is passed over (it replaced the FloatingPointError it was saying)."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    record_stop(blocker / "log.txt", FloatingPointError("fold 1: the loss is nan"))   # NotADirectoryError inside
    assert blocker.read_text() == ""


def test_once_prints_a_line_the_first_time_and_logs_it_every_time(tmp_path, capsys):
    said: set[str] = set()
    for fold in (1, 2):
        Log(tmp_path / f"log_{fold}.txt").once("warning: w", said)
        Log(tmp_path / f"log_{fold}.txt").once(f"fold {fold}", said)
    assert capsys.readouterr().out.count("warning: w") == 1      # the terminal: once a command
    assert capsys.readouterr().out == ""
    for fold in (1, 2):                                          # each fold's log.txt: every line it was told
        lines = (tmp_path / f"log_{fold}.txt").read_text().splitlines()
        assert [line.split(" ", 2)[2] for line in lines] == ["warning: w", f"fold {fold}"]
    assert said == {"warning: w", "fold 1", "fold 2"}
