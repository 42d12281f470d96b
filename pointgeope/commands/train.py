"""Train one fold (``--test-area K``) or every fold (``--cv``) of a prepared S3DIS folder, then evaluate it.

    pointgeope train --config configs/s3dis/pt_geope.yaml --test-area 5 --data-root data/s3dis
    pointgeope train --config configs/demo.yaml --cv --data-root demo/s3dis --run-dir demo/runs/geope

Any config value can be overridden as ``section.key=value`` (``optim.lr=0.1 model.planes=[16,32]``).
Restarting the same command resumes from the fold's ``last.pt``; a fold already complete with the same
config is skipped, one complete with another config is refused (``--force`` retrains it from scratch).
One process at a time per fold folder (``RUN/area_K/.lock``). Under ``torchrun --nproc_per_node N`` it
trains with DDP.
"""
from __future__ import annotations

import argparse

from pointgeope.commands import config_overrides, given

HELP = "train one fold (--test-area K) or every fold (--cv), then evaluate it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=given, help="YAML config, e.g. configs/s3dis/pt_geope.yaml")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--test-area", type=int, metavar="K", help="train fold K: test on Area_K")
    which.add_argument("--cv", action="store_true", help="every fold of folds.json in turn")
    parser.add_argument("--data-root", type=given, help="prepared HDF5 folder (overrides data.root)")
    parser.add_argument("--run-dir", type=given, help="run folder (overrides train.run_dir); folds go to RUN/area_K")
    parser.add_argument("--force", action="store_true",
                        help="retrain each fold it trains from scratch, deleting its checkpoints and results")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")


def main(args: argparse.Namespace) -> int:
    from pointgeope.engine.config import load_config

    overrides = config_overrides(args.overrides, {"--data-root": ("data.root", args.data_root),
                                                  "--run-dir": ("train.run_dir", args.run_dir)})
    cfg = load_config(args.config, overrides)
    # after the config: a mistake in it is told without torch; and a complete fold is skipped without the
    # training stack (pointgeope.engine.train, imported by the fold that trains)
    from pointgeope.engine.fold_runs import train

    return train(cfg, args.test_area, force=args.force)
