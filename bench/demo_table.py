"""The README's and getting-started's demo figures, regenerated from a `make demo` run as measured.

    /usr/bin/time -f %e -o demo_seconds.txt make demo          # the whole demo, timed by the shell
    python bench/demo_table.py demo/runs/geope --seconds "$(cat demo_seconds.txt)" --write

Reads the run's report (``RUN/report/report.json``, written by ``pointgeope report RUN``) and each fold's
``log.txt`` (its first and last time stamps: the fold's training and evaluation), and writes the block between
``<!-- demo-table:start -->`` and ``<!-- demo-table:end -->`` in README.md and docs/getting-started.md (without
``--write``: prints it). The block states the commit the folds were tested at (each fold's ``metrics.json``;
this checkout's where they record none), the date, the machine's cores and, with ``--load``, that
other work shared them, the torch CPU threads the folds trained with (each fold's ``last.pt``: the scores
depend on that count, since torch's CPU kernels split their sums by thread), the total time when ``--seconds``
gives it, the range of the folds' times, the pooled and mean-of-folds table, and the spread of the folds' mIoU
(lowest and highest fold), so that no single machine's figure stands for all.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import git_commit
from pointgeope.engine.trained_threads import saved_threads, threads_text

REPO = Path(__file__).resolve().parents[1]
PAGES = (REPO / "README.md", REPO / "docs" / "getting-started.md")
START, END = "<!-- demo-table:start -->", "<!-- demo-table:end -->"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ", re.M)


def fold_seconds(log: Path) -> float | None:
    """Seconds from the first to the last time-stamped line of a fold's ``log.txt`` (None without two)."""
    stamps = STAMP.findall(log.read_text()) if log.is_file() else []
    if len(stamps) < 2:
        return None
    first, last = (datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S") for s in (stamps[0], stamps[-1]))
    return (last - first).total_seconds()


def commit_text(run_dir: Path, folds: list[dict], checkout: str) -> str:
    """The commit the folds were tested at (``pointgeope_commit`` of each ``area_K/metrics.json``, shortened),
    every one where the folds differ, ``with uncommitted changes`` where a fold's code differed from its commit
    (``pointgeope_modified``); ``checkout`` (this clone's, where the block is written) where none records
    one: a run folder's folds can be older than the checkout (trained folds are skipped by a rerun)."""
    records = []
    for f in folds:
        path = run_dir / f"area_{f['fold']}" / "metrics.json"
        records.append(json.loads(path.read_text()) if path.is_file() else {})
    commits = [r.get("pointgeope_commit") for r in records]
    known = sorted({c[:7] for c in commits if isinstance(c, str) and c})
    if not known:
        return f"pointgeope at commit `{checkout}`"
    unknown = " and unrecorded ones" if any(not (isinstance(c, str) and c) for c in commits) else ""
    changed = " with uncommitted changes" if any(r.get("pointgeope_modified") is True for r in records) else ""
    if len(known) == 1 and not unknown:
        return f"pointgeope at commit `{known[0]}`{changed}"
    return (f"pointgeope folds of commits {', '.join(f'`{c}`' for c in known)}{unknown}{changed} (not one code's "
            "scores: train the folds again at one commit)")


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def pct(x: float) -> str:
    """``x`` in % with one decimal, rounded as the report rounds (:func:`pointgeope.report.tables.pct`)."""
    from pointgeope.report.tables import pct as report_pct

    return report_pct(x, 1)


def table(run: dict, class_names: list[str]) -> list[str]:
    head = ["6-fold", "OA", "mAcc", "mIoU", *class_names]
    rows = [f"| {' | '.join(head)} |", "|:--" + "|--:" * (len(head) - 1) + "|"]
    for label, key in (("pooled", "pooled"), ("mean of folds", "mean_of_folds")):
        s = run[key]
        rows.append(f"| {label} | " + " | ".join(pct(v) for v in (s["oa"], s["macc"], s["miou"], *s["iou"])) + " |")
    return rows


def chance_miou(counts) -> float:
    """Expected IoU of uniform random guessing, averaged over the C classes: class c, with
    share p_c of the points, guessed on 1/C of every class's points, scores

        IoU_c = (p_c / C) / (p_c + 1/C - p_c / C)        (true positives over ground truth + predictions - TP)

    (a ratio of expectations, exact as the point count grows; a class without ground truth is still guessed:
    IoU 0). ``counts (C,)``: points per ground-truth class, the row sums of the pooled confusion. Its OA and
    mAcc are 1/C whatever the class mix."""
    total = sum(counts)
    c = len(counts)
    ious = [(n / total / c) / (n / total + 1 / c - n / total / c) for n in counts]
    return sum(ious) / len(ious)


def block(run_dir: Path, seconds: float | None, commit: str, cores: int, date: str, load: float | None = None) -> str:
    """The Markdown between the markers, from the run's report, fold logs and checkpoints; ``load``: the load
    average the machine had while the demo ran (other work on its cores), said beside the times."""
    report = json.loads((run_dir / "report" / "report.json").read_text())
    run = report["runs"][0]
    folds = sorted(run["per_fold"], key=lambda f: f["miou"])
    if run["folds_missing"]:
        raise SystemExit(f"{run_dir}: folds missing from the report ({run['folds_missing']}); finish the demo first")
    times = [t for t in (fold_seconds(run_dir / f"area_{f['fold']}" / "log.txt") for f in folds) if t is not None]
    total = f"{minutes(seconds)} in all, " if seconds else ""
    spread = f"folds of {minutes(min(times))} to {minutes(max(times))} each" if times else "fold times not logged"
    lo, hi = folds[0], folds[-1]
    code = commit_text(run_dir, folds, commit)
    threads = threads_text([saved_threads(run_dir / f"area_{f['fold']}" / "last.pt") for f in folds])
    busy = f" shared with other work (load average {load:g})" if load is not None else ""
    counts = [sum(row) for row in run["pooled_confusion"]]
    chance = f"uniform guessing scores {pct(chance_miou(counts))} % mIoU ({pct(1 / len(counts))} % OA)"
    return "\n".join([
        (f"`make demo` on a {cores}-core CPU machine{busy} ({date}, {code}, {threads}; "
         f"{total}{spread}),"),
        "a 310k-parameter Point Transformer with `geope` on the synthetic rooms of `pointgeope synth`:",
        "",
        *table(run, report["class_names"]),
        "",
        f"The folds' mIoU spans {pct(lo['miou'])} % (fold {lo['fold']}) to {pct(hi['miou'])} % (fold {hi['fold']});"
        f" {chance}. Times vary with the machine and its load; the scores are the same on every run of one commit",
        "with one torch thread (`train.threads: 1` in `configs/demo.yaml`; another count or CPU kind sums in another "
        "order:",
        "other weights, other scores). `bench/demo_table.py` regenerates this block from a `make demo` run.",
    ])


def replace_block(text: str, new: str, where: Path) -> str:
    if text.count(START) != 1 or text.count(END) != 1:
        raise SystemExit(f"{where}: expected one {START} ... {END} block")
    head, rest = text.split(START)
    return f"{head}{START}\n\n{new}\n\n{END}{rest.split(END, 1)[1]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the demo's run folder (demo/runs/geope)")
    parser.add_argument("--seconds", type=float, help="the whole `make demo`, as timed by the shell")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="the machine's cores (default: this one's)")
    parser.add_argument("--load", type=float, help="the load average while the demo ran (uptime's), where other "
                        "work shared the cores: said beside the times, which it slows")
    parser.add_argument("--write", action="store_true", help="replace the block in README.md and getting-started")
    args = parser.parse_args()
    today = datetime.date.today().isoformat()
    new = block(args.run, args.seconds, git_commit(short=True) or "unknown", args.cores, today, args.load)
    if not args.write:
        print(new)
        return 0
    for page in PAGES:
        page.write_text(replace_block(page.read_text(), new, page))
        print(f"wrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
