"""What the benchmarks share to record a run: the commit it measured and an atomic write of its JSON."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pointgeope.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]


def git_commit(short: bool = False, tree: Path = ROOT) -> str:
    """The commit checked out in ``tree`` (this repository by default; "" outside a git checkout)."""
    try:
        cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
        return subprocess.run(cmd, cwd=tree, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def save_json(path: Path, payload: dict, indent: int = 2) -> None:
    """``payload`` as JSON at ``path`` (parents made), written atomically: a run cut short leaves the last file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=indent) + "\n")
