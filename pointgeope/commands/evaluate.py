"""Predict every point of a fold's test area by voting over voxel fragments; write predictions and metrics.

    pointgeope evaluate runs/pt_geope/area_5                          # with eval.* of its config.yaml
    pointgeope evaluate runs/pt_geope/area_5 --checkpoint best eval.tta.rotations=4 eval.tta.flips=true

Writes ``RUN/area_K/predictions/Area_K.h5`` and ``RUN/area_K/metrics.json`` (``"complete": true``; a fold
whose training was interrupted can be evaluated too: its metrics say ``"complete": false`` with the epochs
trained, the training command continues it, and ``report`` leaves it out of the pooled scores). The test
area files are checked first, as training checks them (checksum, identity, every room's points), and must
be the files the checkpoint trained on: other data (another ``--data-root``, a root prepared again) is
refused with the files named.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pointgeope.commands import config_overrides, given

HELP = "predict every point of a fold's test area by voting; metrics.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=given, help="a fold folder RUN/area_K (with config.yaml and last.pt)")
    parser.add_argument("--checkpoint", choices=("last", "best"), help="overrides eval.checkpoint")
    parser.add_argument("--data-root", type=given, help="prepared HDF5 folder (overrides data.root)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value",
                        help="config overrides, e.g. eval.tta.rotations=4")


def main(args: argparse.Namespace) -> int:
    from pointgeope.engine.evaluate import evaluate_run

    overrides = config_overrides(args.overrides, {"--checkpoint": ("eval.checkpoint", args.checkpoint),
                                                  "--data-root": ("data.root", args.data_root)})
    return evaluate_run(Path(args.run), overrides)
