"""Train the same short recipe with several positional encodings and seeds on one fold, and report each
encoding's mean and spread over the seeds.

    pointgeope ablate --config configs/demo.yaml --data-root demo/s3dis --test-area 1 \\
        --presets rpe,geope,lingeope,rope3d,rope-mixed,pointrope,none --seeds 0,1,2 --jobs 2 --run-dir runs/ablation

Each trial is ``pointgeope train`` with ``model.pe=<preset> train.seed=<seed>`` in
``RUN/<preset>/seed_<seed>/`` (its output in ``train.log`` there); ``--jobs`` trials run at a time (each with
``cpu_count // jobs`` threads unless ``train.threads`` is given; a trial resumed from its ``last.pt`` keeps
the thread count it was written with, unless ``train.threads`` is given, and ablate says which). The report goes to
``RUN/report/fold_K/`` (one per fold, each scoring the trials' ``area_K`` alone): ``ablation.md`` (mean ± std (min–max)
per preset, differences to the first preset marked when they are within the seeds' spread, every seed, per-class IoU),
``ablation.json``, ``ablation.csv``. Rerunning the same command skips complete trials and resumes
interrupted ones; any value of the config can be overridden as ``section.key=value`` (``train.epochs=3``),
except the three the ablation sets per trial.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from pointgeope.commands import config_overrides, given, path_arg

HELP = "several positional encodings x seeds on one fold: mean and spread per encoding"


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


def _seeds(text: str) -> list[int]:
    try:
        return [int(seed) for seed in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, e.g. 0,1,2, got {text!r}") from None


def _digits(text: str) -> int:
    """--digits, checked before any trial trains (the report that uses it comes after all of them)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 6:
        raise argparse.ArgumentTypeError(f"expected --digits in 0..6, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=path_arg,
                        help="YAML config of the training, e.g. configs/demo.yaml")
    parser.add_argument("--test-area", type=int, required=True, metavar="K", help="the fold: test on Area_K")
    parser.add_argument("--presets", type=_names, required=True, metavar="PE,PE,...",
                        help="positional encodings (model.pe values), comma-separated; the first is the baseline "
                             "of the differences")
    parser.add_argument("--seeds", type=_seeds, default=[0, 1, 2], metavar="S,S,...",
                        help="train.seed values, comma-separated (default 0,1,2)")
    parser.add_argument("--run-dir", type=path_arg, default=Path("runs/ablation"),
                        help="output folder (default runs/ablation)")
    parser.add_argument("--data-root", type=given, help="prepared HDF5 folder (overrides data.root)")
    parser.add_argument("--jobs", type=int, default=1, help="trials at a time (default 1)")
    parser.add_argument("--digits", type=_digits, default=1, help="decimals of the %% in ablation.md (default 1)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides for every trial")


def main(args: argparse.Namespace) -> int:
    from pointgeope.atomic import check_folder_path
    from pointgeope.engine.ablation import ablate
    from pointgeope.report.seeds import write_trials

    args.run_dir = args.run_dir.expanduser()  # a leading ~ is home, as in each trial's train.run_dir
    out = args.run_dir / "report" / f"fold_{args.test_area}"
    for folder in (out.parent, out):   # written after the trials: a file or a link to nothing there, refused now
        check_folder_path(folder, "the ablation's report folder")
    overrides = config_overrides(args.overrides, {"--data-root": ("data.root", args.data_root)})
    words = (["pointgeope", "ablate", "--config", str(args.config), "--test-area", str(args.test_area),
              "--presets", ",".join(args.presets), "--seeds", ",".join(map(str, args.seeds)), "--run-dir",
              str(args.run_dir)]
             + (["--data-root", args.data_root] if args.data_root else [])
             + ["--jobs", str(args.jobs)] + args.overrides)
    command = " ".join(shlex.quote(w) for w in words)                  # for the report's header
    def report(trials, header, left_out, notes):
        return write_trials(trials, out, header, args.digits,
                            fold=args.test_area, left_out=left_out, notes=notes)
    return ablate(args.config, args.presets, args.seeds, args.test_area, args.run_dir, overrides, report,
                  args.jobs, command)
