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
Folds of one run trained or evaluated with different settings (model or protocol keys, e.g. ``model.pe``,
``optim.lr``, ``eval.tta``) or on other data (the checksums of their area files' points, else of the files;
the path ``data.root`` only where a fold records no checksums, so a node's copy of the same files pools) are
refused, naming the keys and folds;
``--allow-mixed`` pools them and writes the differences into report.md and report.json.
The summary tables go to stdout, followed by the paths written. One report at a time writes ``DIR`` (a second
is refused, naming the first); every file is made before the first is written, so that a report stopped
(Ctrl-C) leaves the previous one whole. The ``confusion_<run>.png`` of an earlier report's runs (those its
``report.json`` names) that this one does not have are removed from ``DIR`` (and listed); no other file there is
touched.
"""
from __future__ import annotations

import argparse

from pointgeope.commands import path_arg

HELP = "6-fold tables (markdown, JSON, CSV) and figures of one or more runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the file list of the docstring
    parser.add_argument("runs", nargs="+", metavar="RUN", type=path_arg,
                        help="run folder holding area_1/metrics.json .. area_6/metrics.json; the first is the "
                             "baseline of the differences")
    parser.add_argument("--out", type=path_arg, default=None,
                        help="output folder (default: RUN/report for one run, else "
                             "report_<name1>_vs_<name2>... beside the first run)")
    parser.add_argument("--names", nargs="+", default=None, metavar="NAME",
                        help="one display name per run (default: the folder names)")
    parser.add_argument("--digits", type=int, default=1, help="decimals of the %% in the markdown (default 1)")
    parser.add_argument("--class-mean", choices=("all", "present"), default=None,
                        help="mAcc / mIoU over all classes, an absent one counting 0 (the PTv1 authors' rule), "
                             "or over the classes present (default: the rule each run was evaluated with, "
                             "its eval.class_mean)")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="pool the folds of a run even where their model, data or protocol settings differ "
                             "(the differences are written into report.md and report.json)")


def main(args: argparse.Namespace) -> int:
    from pointgeope.report import make_report

    make_report(args.runs, args.out, args.names, args.digits, args.class_mean, args.allow_mixed)
    return 0
