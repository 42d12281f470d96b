"""Writing into a run folder: the plain-text log, progress bars and atomic JSON."""
from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from pointgeope.atomic import write_text_atomic
from pointgeope.errors import Terminated


class Log:
    """One time-stamped line to stdout and to ``log.txt`` (give ``path=None`` on ranks other than 0)."""

    def __init__(self, path: Path | None):
        self.path = path

    def __call__(self, text: str) -> None:
        if self.path is not None:
            print(self.record(text), flush=True)

    def once(self, text: str, said: set[str]) -> None:
        """``text`` on the terminal and in ``log.txt`` the first time a command says it (``said``: what it has
        said), in ``log.txt`` only after that: a fold's warning that every fold of a run would repeat."""
        self.record(text) if text in said else self(text)
        said.add(text)

    def record(self, text: str) -> str:
        """The time-stamped line of ``text`` appended to ``log.txt`` only (what the command says on the
        terminal itself: why it stopped); returns the line."""
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        return line


def record_stop(path: Path | None, err: BaseException) -> None:
    """Append to the fold's ``log.txt`` at ``path`` (``None``: nothing, as :class:`Log`) why its training
    stops, on ``err``: Ctrl-C, SIGTERM (the command's :class:`~pointgeope.errors.Terminated`), a diverged
    run's FloatingPointError, a user error. A file that cannot be written (a full disk) is passed over: the
    command's own line about ``err`` must not be replaced by one about the log."""
    if isinstance(err, KeyboardInterrupt):
        line = "stopped: terminated (SIGTERM)" if isinstance(err, Terminated) else "stopped: interrupted (Ctrl-C)"
    else:
        line = f"stopped: {err}"
    with contextlib.suppress(OSError):
        Log(path).record(line)


def progress(items: Iterable, enabled: bool, **kwargs) -> Iterable:
    """A tqdm bar with ETA over ``items`` when ``enabled`` and stderr is a terminal, else ``items``."""
    if not (enabled and sys.stderr.isatty()):
        return items
    from tqdm import tqdm

    return tqdm(items, dynamic_ncols=True, leave=False, **kwargs)


def write_json_atomic(path: Path, obj: dict) -> None:
    """A JSON object, one top-level key per line, to a temporary file beside ``path``, then renamed
    (NaN is not allowed: use None)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v, allow_nan=False)}" for k, v in obj.items()]
    write_text_atomic(path, "{\n" + ",\n".join(lines) + "\n}\n")

