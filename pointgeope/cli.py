"""The ``pointgeope`` command: one sub-command per step of the pipeline.

Each sub-command is a thin module of :mod:`pointgeope.commands` (``HELP``, ``add_arguments(parser)``,
``main(args) -> int``) that imports its implementation inside ``main``, so that ``pointgeope --help``
stays fast. A user error (:class:`pointgeope.errors.UserError`) ends as one line
``pointgeope <command>: error: ...`` and exit code 2; ``--debug`` (before or after the command) shows
its traceback.
"""
from __future__ import annotations

import argparse
import sys
from pointgeope import __version__
from pointgeope.commands import ablate, evaluate, info, parse_args, predict, prepare, report, synth, train, viz
from pointgeope.errors import add_debug_argument, run_command, settle_exit

# In the order of the pipeline; each command is named after its module.
COMMANDS = (info, synth, prepare, train, evaluate, predict, report, ablate, viz)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pointgeope",
        description="3D point-cloud semantic segmentation with GeoPE (S3DIS, Point Transformer).",
    )
    parser.add_argument("--version", action="version", version=f"pointgeope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error of the input")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        cmd = sub.add_parser(module.__name__.rsplit(".", 1)[1], help=module.HELP, description=module.__doc__.strip(),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        add_debug_argument(cmd, default=argparse.SUPPRESS)  # does not reset a --debug given before COMMAND
        cmd.set_defaults(func=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    if args.command is None:
        parser.print_help()
        return 0
    return settle_exit(run_command(f"pointgeope {args.command}", args.func, args, debug=args.debug))


if __name__ == "__main__":
    sys.exit(main())
