"""The 6-fold report of one or more runs: :func:`make_report` reads each fold's ``metrics.json``
(``fold_file.py``, ``runs.py``), writes the tables (``tables.py``) and figures (``plots.py``) into one folder.
What it writes: ``pointgeope/commands/report.py``.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from pointgeope import json_text

RECORD = "report.json"  # written last, naming the checksum of every other output of the same report


# The characters of a run's name kept in a file or folder name: a name of hundreds of characters made names
# beyond the file system's 255 bytes (an OSError traceback after the tables were made).
SLUG_CHARACTERS = 60
# The characters of the default folder of several runs (ASCII: a byte each), within those 255 bytes: six runs of
# 50-character names made report_<run1>_vs_..._vs_<run6> of 330.
FOLDER_CHARACTERS = 200


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:SLUG_CHARACTERS].strip("_") or "run"


def confusion_names(names: list[str]) -> list[str]:
    """The file name of each run's confusion figure: ``confusion_<slug>.png`` (:func:`_slug` of its name), with
    ``_<i>`` (its 1-based place) where two names share a slug."""
    slugs = [_slug(name) for name in names]
    return [f"confusion_{slug if slugs.count(slug) == 1 else f'{slug}_{i + 1}'}.png" for i, slug in enumerate(slugs)]


def default_out(runs: list[Path], names: list[str]) -> Path:
    """``RUN/report`` for one run; for several, ``report_<run1>_vs_<run2>...`` (each name's :func:`_slug`) beside
    the first run, or, where that is longer than :data:`FOLDER_CHARACTERS`, ``report_<run1>_and_<k>_more_<h>``
    (``k`` the other runs, ``h`` 8 hex digits of the sha256 of the names, one a line): one folder per list of names."""
    if len(runs) == 1:
        return runs[0] / "report"
    folder = "report_" + "_vs_".join(_slug(n) for n in names)
    if len(folder) > FOLDER_CHARACTERS:
        digest = hashlib.sha256("\n".join(names).encode("utf-8", "surrogatepass")).hexdigest()[:8]
        folder = f"report_{_slug(names[0])}_and_{len(names) - 1}_more_{digest}"
    return runs[0].resolve().parent / folder


def check_out(out: Path, runs: list[Path]) -> None:
    """Refuse an ``--out`` that is, or lies inside, a fold folder ``RUN/area_K`` of a run: train and
    evaluate write there (one writer per output folder)."""
    from pointgeope.constants import AREAS
    from pointgeope.report.fold_file import ReportError
    from pointgeope.report.runs import fold_dir

    target = Path(out).resolve()
    for run in runs:
        for k in range(1, len(AREAS) + 1):
            fold = fold_dir(run, k)
            if target == fold.resolve() or fold.resolve() in target.parents:
                raise ReportError(f"--out {out}: inside the fold folder {fold}, which train and evaluate write; "
                                  "give a folder outside the runs' fold folders (default: RUN/report)")


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def report_files(summaries, out: Path, digits: int = 1) -> dict[Path, bytes]:
    """Every output of the report, made in memory: ``{path in out: its bytes}``, in the order written; the
    last, :data:`RECORD` (``report.json``), holds under ``"outputs"`` the checksum of each of the others."""
    from pointgeope.paths import inside
    from pointgeope.report import plots, tables
    from pointgeope.report.fonts import drawing_fonts

    names = [s.name for s in summaries]
    paths = [inside(out, out / name, f"run name {s.name!r}", "--out")
             for name, s in zip(confusion_names(names), summaries, strict=True)]
    with drawing_fonts(names + [c for s in summaries for c in s.class_names]):  # a name in CJK: not boxes
        figures = [plots.iou_bar_chart(summaries), *map(plots.confusion_heatmap, summaries)]
    files = {
        out / "report.md": tables.full_markdown(summaries, digits).encode(),
        out / "report.csv": tables.csv_text(summaries).encode(),
        out / "iou_per_class.png": figures[0],
    }
    files.update(zip(paths, figures[1:], strict=True))
    record = {**tables.json_report(summaries), "outputs": {p.name: _sha256(data) for p, data in files.items()}}
    files[out / RECORD] = (json.dumps(record, indent=1) + "\n").encode()
    return files


def report_outputs(out: Path) -> tuple[list[Path], list[Path]]:
    """``(outputs, not_of_it)`` of the report in ``out`` as its :data:`RECORD` names them: the files whose bytes
    have the recorded checksums (with the record itself), and those named there that are missing or hold
    others (a report killed with ``kill -9`` between its writes: new tables beside the previous record).
    Trust ``outputs`` only. ``([], [])`` where the record is missing, unreadable or names no outputs (a
    report of an earlier version)."""
    try:
        listed = json_text.loads((out / RECORD).read_text(encoding="utf-8"))["outputs"]
        listed = {name: str(checksum) for name, checksum in listed.items() if Path(name).name == name}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return [], []
    good, bad = [], []
    for name, checksum in sorted(listed.items()):
        try:
            same = (out / name).is_file() and _sha256((out / name).read_bytes()) == checksum
        except OSError:
            same = False
        (good if same else bad).append(out / name)
    return good + [out / RECORD] * bool(listed), bad


def stale_outputs(out: Path, files: dict[Path, bytes]) -> list[Path]:
    """The outputs of an earlier report in ``out`` that this one does not write: the confusion figures of the
    runs its ``report.json`` names (:func:`confusion_names`) and this report does not have, which a reader would
    take for current. Nothing else is ever listed: a ``confusion_*.png`` of no earlier report (a user's own
    figure in ``--out``) is kept, and so is everything where ``report.json`` is missing or unreadable."""
    try:
        names = [run["name"] for run in json_text.loads((out / RECORD).read_text(encoding="utf-8"))["runs"]]
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError):
        return []
    if not all(isinstance(name, str) for name in names):
        return []
    earlier = confusion_names(names)
    written = {path.name for path in files}
    return sorted(out / name for name in set(earlier) - written
                  if (out / name).is_symlink() or (out / name).is_file())


def write_files(files: dict[Path, bytes], out: Path) -> list[Path]:
    """Write ``files`` (:func:`report_files`) into ``out`` one after the other, each atomically, remove the
    earlier report's stale outputs (:func:`stale_outputs`), then write the record (``report.json``, the last
    of ``files``); returns the files removed. A stop (Ctrl-C, SIGTERM) is held until the record is written
    (:func:`~pointgeope.errors.stops_deferred`): a report stopped while it works leaves the previous report
    whole, never new tables beside old figures. ``kill -9`` in the milliseconds of the writes, which nothing
    can hold, leaves the previous record: :func:`report_outputs` names the files that are not of it, and the
    stale figures are still named by it for the next report to remove. The caller holds the folder's lock."""
    from pointgeope.atomic import atomic_open
    from pointgeope.errors import stops_deferred

    out.mkdir(parents=True, exist_ok=True)
    stale = stale_outputs(out, files)
    *outputs, (record, data) = files.items()
    with stops_deferred():
        for path, content in outputs:
            with atomic_open(path, "wb") as f:
                f.write(content)
        for path in stale:
            path.unlink(missing_ok=True)
        with atomic_open(record, "wb") as f:
            f.write(data)
    return stale


def write_report(summaries, out: Path, digits: int = 1) -> list[Path]:
    """Write every output of the report into ``out``, made first (:func:`report_files`), and remove an
    earlier report's that it does not write (:func:`write_files`); returns the paths written, in order.
    The caller holds the folder's lock (:func:`make_report`)."""
    files = report_files(summaries, out, digits)
    write_files(files, out)
    return list(files)


def make_report(runs: list[Path], out: Path | None = None, names: list[str] | None = None,
                digits: int = 1, class_mean: str | None = None, allow_mixed: bool = False) -> list[Path]:
    """``pointgeope report``: read the runs, write every output into ``out`` (default: :func:`default_out`),
    print the summary tables; returns the paths written. ``names``: one display name per run;
    ``class_mean``: the rule of the class means (``None``: the one each run was evaluated with);
    ``allow_mixed``: pool a run's folds whose settings differ (refused otherwise), the differences written.
    One report at a time writes ``out`` (:func:`~pointgeope.lock.folder_lock`, as every writing command)."""
    from pointgeope.atomic import remove_leftovers, writable_folder
    from pointgeope.lock import folder_lock
    from pointgeope.report import tables
    from pointgeope.report.fold_file import ReportError
    from pointgeope.report.runs import load_runs

    if not 0 <= digits <= 6:
        raise ReportError(f"expected --digits in 0..6, got {digits}")
    summaries = load_runs(runs, names, class_mean, allow_mixed)
    out = out if out is not None else default_out(runs, [s.name for s in summaries])
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out}: expected a folder for the report, found a file; "
                          "give a folder name (it is created)")
    check_out(out, runs)
    writable_folder(out, "report folder (--out)")  # before anything is written into it
    with folder_lock(out):  # one writer: a second report into it is refused, naming this one
        remove_leftovers(out, recursive=False)  # a killed report's; not below out (--out RUN: its folds' writers)
        files = report_files(summaries, out, digits)
        removed = write_files(files, out)
    print(tables.summary_markdown(summaries, digits))
    print("wrote:")
    for path in files:
        print(f"  {path}")
    if removed:
        print("removed (an earlier report's, of runs not in this one):")
        for path in removed:
            print(f"  {path}")
    return list(files)
