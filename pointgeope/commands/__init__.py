"""The sub-commands of ``pointgeope``, one thin module each, in the order of the pipeline.

Every module here has the same shape, and nothing else::

    \"\"\"What the command does, with examples (shown by ``pointgeope <command> --help``).\"\"\"
    HELP = "one line for the list of ``pointgeope --help``"

    def add_arguments(parser): ...     # the options
    def main(args) -> int: ...         # turn the options into one call of the implementation, imported
                                       # inside main: ``pointgeope --help`` never imports torch or h5py

The implementation lives where the data flows (``data_prep``, ``pointgeope.engine``, ``pointgeope.report``,
``pointgeope.viz``) and takes plain values (a config, paths), except ``predict`` and ``viz``'s room view,
whose many options it reads from the parsed command line. ``pointgeope/cli.py`` builds the
parser from the list of these modules; ``train.py`` at the repository root reuses
:mod:`pointgeope.commands.train`.
"""
from __future__ import annotations

import os
import re

_OVERRIDE = re.compile(r"[A-Za-z_]+(\.[A-Za-z_]+)+=.*")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")       # :mod:`pointgeope.x`, :func:`~a.b`


def help_text(doc: str | None) -> str:
    """A command module's docstring as its ``--help`` shows it in a terminal: the reST the docstrings are written
    in (double backquotes, roles such as ``:mod:``, a literal block's ``::``) turned to plain text with single
    backquotes around code (``x`` -> `x`, a block's ``into DIR::`` -> ``into DIR:``); ``""`` for ``None`` (under
    ``python -OO`` a module has no docstring: the commands run, their help without its text)."""
    text = _ROLE.sub(r"`\1`", (doc or "").strip()).replace("``", "`")
    return re.sub(r"(?<=\S)::$", ":", re.sub(r"^::$\n?", "", text, flags=re.M), flags=re.M)


def given(text: str) -> str:
    """An argparse ``type`` for every file or folder argument of every command: ``text`` as it is, but an empty or
    blank one (``"$UNSET"``, ``"$A $B"``), which ``Path`` takes for ``.``, the working folder, or for a folder
    named by spaces, is refused in argparse's one line naming the argument: ``synth ""``, ``prepare RAW ""``,
    ``predict ... --out ""`` and ``report --out ""`` wrote their files there, ``--data-root ""`` was left out
    (the config's folder used) and ``viz --ply ""`` opened a window. The one owner of this refusal."""
    if not text.strip():
        import argparse

        got = "an empty one" if not text else f"a blank one {text!r}"
        raise argparse.ArgumentTypeError(f"expected a path, got {got} (an unset shell variable?); give the path, "
                                         "or . for the current folder")
    return text


def path_arg(text: str):
    """:func:`given` as a ``Path``."""
    from pathlib import Path

    return Path(given(text))


def split_overrides(items: list[str]) -> tuple[list[str], list[str]]:
    """``(others, overrides)`` of a positional list that may mix inputs with ``section.key=value``
    overrides (``predict``): an item shaped as an override that names no existing file is one."""
    overrides = [item for item in items if _OVERRIDE.fullmatch(item) and not os.path.lexists(item)]
    return [item for item in items if item not in overrides], overrides


def config_overrides(overrides: list[str], options: dict[str, tuple[str, str | None]], say=None) -> list[str]:
    """The ``section.key=value`` overrides of the command line, then one for each option given (``options``:
    flag -> (its config key, its value or None); ``--data-root`` is a shorthand for ``data.root``). The last
    of a key given twice wins, as the later of two ``--flag`` does: a command line often appends to a common
    list (``$COMMON train.epochs=1``). It is said in one warning line naming both (``say``, default print: to
    the first process only under torchrun), so that a key set by mistake twice is not silently overridden. An
    option's value is ``None`` when not given; an empty or blank folder is refused before, by its argparse type
    (:func:`given`)."""
    from pointgeope.engine.config import override_key  # here, not at the top: ``--help`` never imports torch

    say = say or (lambda line: print(line, flush=True) if os.environ.get("RANK", "0") == "0" else None)
    seen: dict[str, str] = {}
    for text in overrides:
        key = override_key(text)
        if key in seen:
            say(f"warning: {key} is given twice ({seen[key]!r}, then {text!r}): the last is used")
        seen[key] = text
    for flag, (key, value) in options.items():
        if value is not None and key in seen:
            say(f"warning: {key} is given twice ({seen[key]!r}, then {flag} {value}): {flag} is used")
    return list(overrides) + [f"{key}={value}" for key, value in options.values() if value is not None]


def parse_args(parser, argv: list[str] | None = None):
    """``parser.parse_args(argv)``, except that the ``section.key=value`` overrides of a command may come on
    both sides of its options: argparse takes a positional list in one run, so ``a=1 --run-dir R b=2``
    left ``b=2`` "unrecognized". Anything else unknown is still an error."""
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides or []) + extra
    return args
