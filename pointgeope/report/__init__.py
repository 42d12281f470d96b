"""Report the 6-fold S3DIS results of one or more runs: markdown, JSON and CSV tables and PNG figures.

``pointgeope report RUN [RUN ...] [--out DIR] [--names NAME ...]`` reads ``RUN/area_K/metrics.json``
(K = 1..6) and writes into ``DIR``::

    report.md              pooled 6-fold table (OA / mAcc / mIoU / 13 per-class IoU), the mean of the
                           per-fold scores beside it, differences to the first run, per-fold tables
    report.json            the same numbers as fractions (NaN -> null) and each run's pooled confusion
    report.csv             one row per run and table (pooled, mean_of_folds, each fold, differences)
    iou_per_class.png      per-class IoU bars of every run
    confusion_<run>.png    row-normalised pooled confusion matrix of each run

The pooled number sums the test areas' confusion matrices (Pointcept ``tools/test_s3dis_6fold.py``);
missing or incomplete folds are named in the tables and the pooled number says which folds it covers.
The summary tables go to stdout, followed by the paths written.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the file list of the docstring
    parser.add_argument("runs", nargs="+", metavar="RUN", type=Path,
                        help="run folder holding area_1/metrics.json .. area_6/metrics.json; the first is the "
                             "baseline of the differences")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: RUN/report for one run, else "
                             "report_<name1>_vs_<name2>... beside the first run)")
    parser.add_argument("--names", nargs="+", default=None, metavar="NAME",
                        help="one display name per run (default: the folder names)")
    parser.add_argument("--digits", type=int, default=1, help="decimals of the %% in the markdown (default 1)")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run"


def default_out(runs: list[Path], names: list[str]) -> Path:
    if len(runs) == 1:
        return runs[0] / "report"
    return runs[0].resolve().parent / ("report_" + "_vs_".join(_slug(n) for n in names))


def write_report(summaries, out: Path, digits: int = 1) -> list[Path]:
    """Write every output of the report into ``out``; returns the paths written, in order."""
    from pointgeope.report import plots, tables
    from pointgeope.atomic import write_text_atomic as write_text

    out.mkdir(parents=True, exist_ok=True)
    written = [
        write_text(out / "report.md", tables.full_markdown(summaries, digits)),
        write_text(out / "report.json", json.dumps(tables.json_report(summaries), indent=1) + "\n"),
        write_text(out / "report.csv", tables.csv_text(summaries)),
        plots.iou_bar_chart(summaries, out / "iou_per_class.png"),
    ]
    slugs = [_slug(s.name) for s in summaries]
    for i, s in enumerate(summaries):
        slug = slugs[i] if slugs.count(slugs[i]) == 1 else f"{slugs[i]}_{i + 1}"
        written.append(plots.confusion_heatmap(s, out / f"confusion_{slug}.png"))
    return written


def main(args: argparse.Namespace) -> int:
    from pointgeope.report import tables
    from pointgeope.report.runs import ReportError, load_runs

    if not 0 <= args.digits <= 6:
        raise ReportError(f"expected --digits in 0..6, got {args.digits}")
    summaries = load_runs(args.runs, args.names)
    out = args.out if args.out is not None else default_out(args.runs, [s.name for s in summaries])
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out}: expected a folder for the report, found a file; "
                          "give a folder name (it is created)")
    written = write_report(summaries, out, args.digits)
    print(tables.summary_markdown(summaries, args.digits))
    print("wrote:")
    for path in written:
        print(f"  {path}")
    return 0
