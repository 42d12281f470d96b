"""Taking a fold folder ``RUN/area_K`` to write in it, as every command that writes there does (``train``,
``evaluate``): its lock (one process per fold folder, :func:`pointgeope.lock.folder_lock`), then the temporary
files a killed run left in it removed (:func:`pointgeope.atomic.remove_leftovers`), one line each."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from pointgeope.atomic import remove_leftovers
from pointgeope.engine import distributed
from pointgeope.lock import folder_lock


@contextlib.contextmanager
def fold_folder(run: Path, env: distributed.DistEnv) -> Iterator[None]:
    """Hold the lock of the fold folder ``run`` (rank 0; the other ranks write nothing there, and end with
    rank 0's refusal when it is refused) and remove the temporary files a killed run left in it (a
    ``kill -9`` while ``last.pt``, ``metrics.json`` or ``predictions/Area_K.h5`` was written)."""
    with contextlib.ExitStack() as stack:
        with distributed.refusal_shared():
            if env.is_main:
                stack.enter_context(folder_lock(run, " ".join(sys.argv)))
        if env.is_main:
            remove_leftovers(run)
        yield
