"""Generate synthetic S3DIS rooms in the raw layout of Stanford3dDataset_v1.2_Aligned_Version.

OUT/Area_N/<room>_<k>/<room>_<k>.txt holds every point of a room, OUT/Area_N/<room>_<k>/Annotations/
<class>_<i>.txt the points of one object, lines "x y z r g b" ("%.3f %.3f %.3f %d %d %d"). Rooms are
offices, conference rooms and hallways with all 13 classes placed as in real buildings, sampled at a
scanner-like density with a few millimetres of noise. Some defects of the real files are planted on
purpose (--defects, on by default) and listed with their file and line in OUT/synth_manifest.json,
beside the rooms and their per-class point counts. The same seed gives the same bytes; an interrupted
run resumes where it stopped. One synth at a time per OUT (OUT/.lock).
"""
from __future__ import annotations

import argparse
import dataclasses

from data_prep.synth.config import PRESETS, SynthConfig
from pointgeope.commands import path_arg
from pointgeope.errors import UserError

HELP = "synthetic S3DIS rooms in the raw layout (tests and the demo; real S3DIS cannot be fetched)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pointgeope synth``: OUT, a ``--size`` preset and the fields that override it."""
    parser.add_argument("out", type=path_arg, metavar="OUT", help="folder to write the Area_N folders into")
    parser.add_argument("--size", choices=sorted(PRESETS), default="demo",
                        help="preset of areas, rooms and density (default: demo); the options below override it")
    parser.add_argument("--areas", type=int, help="number of areas (1-6)")
    parser.add_argument("--rooms-per-area", type=int, help="rooms in each area")
    parser.add_argument("--density", type=float, help="points per m^2 of surface")
    parser.add_argument("--noise", type=float, help="gaussian noise on the coordinates, metres")
    parser.add_argument("--seed", type=int, help="random seed (default 0)")
    parser.add_argument("--defects", action=argparse.BooleanOptionalAction, default=None,
                        help="plant the real dataset's defects (default: on)")


def config_from_args(args: argparse.Namespace) -> SynthConfig:
    """The preset named by ``--size`` with every option given on the command line put over it."""
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(SynthConfig)
                 if getattr(args, f.name, None) is not None}
    return dataclasses.replace(PRESETS[args.size], **overrides)


def main(args: argparse.Namespace) -> int:
    """Generate (or finish) OUT, then print the planted defects and the counts; bad settings are a UserError."""
    import time

    from data_prep.synth.dataset import generate, print_summary

    try:
        config = config_from_args(args)
        start = time.perf_counter()
        manifest = generate(args.out, config)
    except ValueError as err:  # bad settings: a user error (one line, exit code 2)
        raise UserError(str(err)) from None
    print_summary(manifest, args.out, time.perf_counter() - start)
    return 0
