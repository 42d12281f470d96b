"""The ``pointgeope`` command: one sub-command per step of the pipeline.

Each sub-command lives in its own module with ``add_arguments(parser)`` and ``main(args) -> int``;
modules keep heavy imports inside ``main`` so that ``pointgeope --help`` stays fast. A user error
(:class:`pointgeope.errors.UserError`) ends as one line ``pointgeope <command>: error: ...`` and exit code 2;
``--debug`` (before or after the command) shows its traceback.
"""
from __future__ import annotations

import argparse
import sys

from data_prep import prepare
from data_prep.synth import config as synth
from pointgeope import __version__, info, report
from pointgeope.errors import add_debug_argument, run_command
from pointgeope.engine import evaluate_command, predict_command, train_command
from pointgeope.viz import command as viz

# (name, module, one-line help), in the order of the pipeline.
COMMANDS = (
    ("info", info, "print versions, the device and the active ops backends"),
    ("synth", synth, "synthetic S3DIS rooms in the raw layout (tests and the demo; real S3DIS cannot be fetched)"),
    ("prepare", prepare, "raw S3DIS (folder or .zip) -> OUT/Area_N.h5, manifest.json, folds.json"),
    ("train", train_command, "train one fold (--test-area K) or every fold (--cv), then evaluate it"),
    ("evaluate", evaluate_command, "predict every point of a fold's test area by voting; metrics.json"),
    ("predict", predict_command, "segment your own scans (ply, las, txt, npy, ...) with a trained model"),
    ("report", report, "6-fold tables (markdown, JSON, CSV) and figures of one or more runs"),
    ("viz", viz, "look at a room and its predicted segmentation (Open3D window, screenshot, PLY)"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pointgeope",
        description="3D point-cloud semantic segmentation with GeoPE (S3DIS, Point Transformer).",
    )
    parser.add_argument("--version", action="version", version=f"pointgeope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error of the input")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        cmd = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip(),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        add_debug_argument(cmd, default=argparse.SUPPRESS)  # does not reset a --debug given before COMMAND
        cmd.set_defaults(func=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return run_command(f"pointgeope {args.command}", args.func, args, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
