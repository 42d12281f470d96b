"""The reference of every config key, read from the config itself: the documentation's configuration page
is generated from it (``docs/hooks/config_keys.py``), so that it cannot drift from the code.

Each key of :class:`~pointgeope.engine.config.Config` (``section.key``, ``eval.tta.scales``) gets its type and
default from the dataclasses, its allowed values from :data:`~pointgeope.engine.config_ranges.RANGES` and its
description from the comments written beside the field in the source: the comment on the field's line with
its continuation lines (a ``#`` followed by a deep indent), or the comment lines just above the field::

    # parameters without weight decay: ...                 <- above: describes no_weight_decay
    no_weight_decay: list[...] = ...
    augment: Literal[...] = "ptv1"  # training augmentations: the authors' set,
    #                                 Pointcept's PTv1 variant, or none            <- continues augment's
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from typing import Any

from pointgeope.engine.config import Config
from pointgeope.engine.config_check import type_name
from pointgeope.engine.config_ranges import RANGES, Range

__all__ = ["KeyReference", "config_keys", "markdown_tables"]

_CONTINUATION_INDENT = 2  # a comment line whose text starts this many spaces after '#' continues the one above


@dataclass(frozen=True)
class KeyReference:
    """One key of the config: ``key`` (``section.key``), its ``type``, ``default`` (as YAML writes it), the
    allowed ``values`` (the range of a number, ``""`` where the type says it all) and its ``description``."""

    key: str
    type: str
    default: str
    values: str
    description: str


def field_comments(cls: type) -> dict[str, str]:
    """The comment describing each field of the dataclass ``cls`` in its source (``""`` where none)."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {tok.start[0]: tok.string.lstrip("#") for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                if tok.type == tokenize.COMMENT}
    lines = source.splitlines()
    fields = {node.lineno: node.target.id for node in ast.parse(source).body[0].body
              if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    out = {name: [] for name in fields.values()}
    above: list[str] = []
    last = None  # the field whose comment a continuation line extends
    for number in range(1, len(lines) + 1):
        text = comments.get(number)
        if number in fields:
            last = fields[number]
            out[last] = above + ([text] if text is not None else [])
            above = []
        elif text is not None and lines[number - 1].lstrip().startswith("#"):
            if last is not None and text.startswith(" " * _CONTINUATION_INDENT):
                out[last].append(text)
            else:
                above.append(text)
                last = None
        else:
            above, last = [], None
    return {name: " ".join(part.strip() for part in parts) for name, parts in out.items()}


def _yaml(value: Any) -> str:
    """``value`` as it is written in a config file: ``null``, ``true``, ``[0.6, 0.8]``, ``ptv1``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def _values(key: str, tp: Any) -> str:
    """The allowed values of a key beyond its type: its range, each entry's for a list."""
    if key not in RANGES or RANGES[key] == Range():
        return ""
    text = str(RANGES[key])
    is_list = typing.get_origin(tp) is list or any(typing.get_origin(a) is list for a in typing.get_args(tp))
    return f"each {text}" if is_list else text


def config_keys(cls: type = Config, prefix: str = "", default: Any = None) -> list[KeyReference]:
    """Every key of the config in the order of the dataclasses, nested sections (``eval.tta``) in place."""
    default = cls() if default is None else default
    comments = field_comments(cls)
    rows = []
    for name, tp in typing.get_type_hints(cls).items():
        key, value = f"{prefix}{name}", getattr(default, name)
        if dataclasses.is_dataclass(tp):
            rows += config_keys(tp, f"{key}.", value)
        else:
            rows.append(KeyReference(key, type_name(tp), _yaml(value), _values(key, tp), comments[name]))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_tables() -> str:
    """One markdown table per section of the config (``data``, ``model``, ...), with a heading each."""
    out, rows = [], config_keys()
    for section in (f.name for f in dataclasses.fields(Config)):
        out += [f"### `{section}`", "", "| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        out += [f"| `{r.key}` | {_cell(r.type)} | `{_cell(r.default)}` | {_cell(r.values)} | {_cell(r.description)} |"
                for r in rows if r.key.startswith(f"{section}.")]
        out.append("")
    return "\n".join(out)
