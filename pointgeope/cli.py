"""The ``pointgeope`` command: one sub-command per step of the pipeline.

Each sub-command is a thin module of :mod:`pointgeope.commands` (``HELP``, ``add_arguments(parser)``,
``main(args) -> int``) that imports its implementation inside ``main``, so that ``pointgeope --help``
stays fast. A user error (:class:`pointgeope.errors.UserError`) ends as one line
``pointgeope <command>: error: ...`` and exit code 2; ``--debug`` (before or after the command) shows
its traceback.

This module imports nothing at its top but ``sys``: :func:`main` catches a Ctrl-C (and SIGTERM) from its
first line, the command modules and argparse imported inside it, so that a stop in a command's first
moments is one line too (``pointgeope <command>: interrupted``, exit code 130) instead of the traceback of
whatever import it cut. (A stop while the interpreter itself starts, before this module runs, is Python's.)
"""
from __future__ import annotations

import sys

# In the order of the pipeline; each is the name of its module of pointgeope.commands.
COMMANDS = ("info", "synth", "prepare", "train", "evaluate", "predict", "report", "ablate", "viz")


def command_modules() -> list:
    """The module of each of :data:`COMMANDS`, imported (each a few standard modules at most)."""
    import importlib

    return [importlib.import_module(f"pointgeope.commands.{name}") for name in COMMANDS]


def build_parser():
    """The ``argparse.ArgumentParser`` of ``pointgeope`` and its sub-commands."""
    import argparse

    from pointgeope import __version__
    from pointgeope.commands import help_text
    from pointgeope.errors import add_debug_argument

    parser = argparse.ArgumentParser(
        prog="pointgeope",
        description="3D point-cloud semantic segmentation with GeoPE (S3DIS, Point Transformer).",
    )
    parser.add_argument("--version", action="version", version=f"pointgeope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error of the input")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in zip(COMMANDS, command_modules(), strict=True):
        cmd = sub.add_parser(name, help=module.HELP, description=help_text(module.__doc__),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        add_debug_argument(cmd, default=argparse.SUPPRESS)  # does not reset a --debug given before COMMAND
        cmd.set_defaults(func=module.main)
    return parser


def _prog(argv: list[str]) -> str:
    """``pointgeope <command>`` of a command line not parsed yet: its first word that is no option."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return f"pointgeope {word}" if word in COMMANDS else "pointgeope"


def main(argv: list[str] | None = None) -> int:
    argv_given, stops = argv, []
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # from the first line: a Ctrl-C while the commands are imported is one line too
        from pointgeope.commands import parse_args
        from pointgeope.errors import run_command, settle_exit, stop_on_sigterm

        with stop_on_sigterm() as stops:
            parser = build_parser()
            args = parse_args(parser, argv)
    except (KeyboardInterrupt, Exception) as err:  # (what a stop cut may raise an error in its place)
        from pointgeope.errors import stop_behind, stopped

        stop = err if isinstance(err, KeyboardInterrupt) else stop_behind(err, stops)
        if stop is None or "--debug" in argv:
            raise
        return stopped(_prog(argv), stop)
    if args.command is None:
        parser.print_help()
        return 0
    prog = f"pointgeope {args.command}"
    # this process's own command line (not a caller's list): the process exits after it
    return settle_exit(run_command(prog, args.func, args, debug=args.debug), prog if argv_given is None else None)


if __name__ == "__main__":
    sys.exit(main())
