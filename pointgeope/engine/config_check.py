"""A (partial) mapping of the run configuration checked against the config's dataclasses, merged and built.

Every layer of a config (a file of the ``base:`` chain, an override, a checkpoint's saved mapping) is
checked on its own by :func:`check_mapping` against the dataclass of its section
(:class:`pointgeope.engine.config.Config` at the top): an unknown key is an error with the closest known
key as a suggestion (an override's dotted form written in a file is named as such); a value of the wrong
type is an error naming the key and what was expected (:func:`type_name`), ints being taken as floats and
YAML 1.1's ``'1e-4'`` strings as numbers; every value is then checked against its allowed range
(:func:`pointgeope.engine.config_values.value_problem`). Each error is a :class:`ConfigError` naming the
file and the key's line (``FILE:LINE``, :func:`pointgeope.engine.config_yaml.at_line`) or the override.

The checked layers are merged (:func:`merge`: the top layer's keys win, sections merged key by key) and
the result built into the dataclasses (:func:`build`).
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal

from pointgeope.engine.config_values import value_problem
from pointgeope.engine.config_yaml import at_line, closest_key, dotted_key_message, quote_hint
from pointgeope.engine.record_keys import older_value
from pointgeope.errors import UserError
from pointgeope.number_kind import is_number, is_whole

__all__ = ["ConfigError", "type_name", "check_mapping", "merge", "build"]


# An optional field may be written Optional[int] (typing.Union) or int | None (types.UnionType before Python 3.14)
_UNIONS = (typing.Union, types.UnionType)


class ConfigError(UserError, ValueError):
    """A config file or override that does not fit the :class:`Config` dataclasses."""


def _hints(cls) -> dict[str, Any]:
    """The resolved type hints of dataclass ``cls`` (key -> type)."""
    return typing.get_type_hints(cls)


def type_name(tp) -> str:
    """A type hint as the messages and the configuration reference write it: ``'sgd' | 'adamw'``,
    ``float | null``, ``list[int]``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in _UNIONS:
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list[{type_name(typing.get_args(tp)[0])}]"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp, where: str) -> Any:
    """``value`` as type ``tp`` (ints accepted as floats, '1e-4' strings as floats), else ConfigError."""
    origin = typing.get_origin(tp)
    if origin in _UNIONS:
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {type_name(tp)}, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: expected one of {', '.join(map(repr, choices))}, got {value!r}{hint}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected {type_name(tp)}, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if is_whole(value):
            return value
    elif tp is float:
        if is_number(value):
            try:
                return float(value)
            except OverflowError:  # an int past float's range (1 and 400 zeros): no float holds it
                raise ConfigError(f"{where}: expected {type_name(tp)}, got {value!r}, beyond float's range "
                                  f"(+-1.8e308)") from None
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            return check_mapping(value, tp, where)
    raise ConfigError(f"{where}: expected {type_name(tp)}, got {value!r} ({type(value).__name__})"
                      f"{quote_hint(tp, value)}")


def _today(value: Any, tp, name: str) -> Any:
    """``value`` of key ``name`` in today's form where an older version wrote it otherwise
    (:func:`pointgeope.engine.record_keys.older_value`); a ConfigError where no value of today's means it."""
    choices = ", ".join(map(repr, typing.get_args(tp))) if typing.get_origin(tp) is Literal else type_name(tp)
    try:
        return older_value(name, value, choices)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_mapping(raw: dict, cls, where: str, prefix: str = "", lines: dict | None = None) -> dict:
    """Check the keys and types of a partial mapping for dataclass ``cls``; returns it coerced. ``lines``:
    the line of each key in the file ``where`` (``config_yaml.load_yaml_lines``), named as ``FILE:LINE``."""
    if not isinstance(raw, dict):
        name = prefix.rstrip(".")
        got = (repr(raw) if raw is not None else f"null; an override sets one key of a section: {name}.KEY=VALUE"
               if where.startswith("override ") else
               f"nothing (every key under '{name.rpartition('.')[2]}:' left out?); give it a key, or remove it")
        raise ConfigError(f"{at_line(where, lines, name)}: expected a mapping for {name or 'the config'}, got {got}")
    hints = _hints(cls)
    out = {}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in hints and "." in str(key):   # an override's form written in a file: optim.lr: 0.5
            raise ConfigError(dotted_key_message(where, lines, prefix, str(key), value))
        if key not in hints:
            close = closest_key(str(key), list(hints))
            hint = (f"; did you mean '{prefix}{close}'?" if close
                    else f"; known keys: {', '.join(prefix + k for k in hints)}")
            raise ConfigError(f"{at_line(where, lines, name)}: unknown key {name!r}{hint}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            out[key] = check_mapping(value, tp, where, f"{name}.", lines)
            continue
        try:
            out[key] = _coerce(_today(value, tp, name), tp, name)
        except ConfigError as err:
            raise ConfigError(f"{at_line(where, lines, name, str(err))}: {err}") from None
        problem = value_problem(out[key], name)
        if problem:
            raise ConfigError(f"{at_line(where, lines, name, problem)}: {problem}")
    return out


def merge(base: dict, top: dict) -> dict:
    """``base`` with ``top``'s keys on it: a section both hold is merged key by key, any other value of
    ``top`` replaces ``base``'s (a list included)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build(cls, raw: dict):
    """The dataclass ``cls`` of a checked mapping (:func:`check_mapping`), its sections built recursively; the
    keys it leaves out keep their defaults."""
    hints = _hints(cls)
    kwargs = {k: (build(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v) for k, v in raw.items()}
    return cls(**kwargs)
