"""The positional encoding of a :class:`~pointgeope.nn.point_transformer_conv.GeoPEPointTransformerConv` as its
``state_dict`` keeps it (key ``pe``, UTF-8 bytes as ``uint8``), and read back as the encoding it names.

Saved: the encoding's settings as JSON, its fields by name in sorted order::

    {"absolute": false, "relation_delta": false, "rotation": "geope", "value": "rpe"}

so that a checkpoint names its encoding by what it computes, not by a preset's name (which may be renamed) nor by
the dataclass's printed ``repr`` (which may change its wording): a layer loads it where its encoding is equal, field
by field. Read: that JSON (a field missing takes the dataclass's default, so a field added later with its old
behaviour as default keeps old checkpoints loading), a key of :data:`pointgeope.model.PRESETS` (checkpoints that
saved a preset by name) or ``PositionalEncoding(rotation='geope', relation_delta=True, value='geope',
absolute=False)`` (those that saved a custom encoding's ``repr``); anything else reads as ``None`` and is said by
:func:`unread_encoding`. The text comes from a file: it is parsed, never run, and no text (nested ten thousand
deep, a literal that cannot be built) escapes as a traceback.

Loaded (:func:`load_encoding`, the layer's ``_load_from_state_dict``): an entry naming another encoding is an error
naming both. A checkpoint with settings but no entry was saved before layers recorded their encoding: its
parameters and settings fit every encoding of the same kind (``geope``, ``geope+rpe``, ``lingeope``, ``rope3d``
and ``ape`` have the same ones), so it loads into the layer's encoding, as it did, with a warning that names that
assumption and how to record it (save it again once loaded). Refusing it would leave no way to load a checkpoint
that is right; loading it silently left a wrong encoding unsaid.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import sys
import warnings

from pointgeope.model.attention import PRESETS, PositionalEncoding
from pointgeope.nn.conv_options import pe_argument
from pointgeope.recorded_text import repr_bounded

__all__ = ["encoding_text", "saved_text", "saved_encoding", "unread_encoding", "load_encoding"]

# each field's kind, that of its default: text for ``rotation`` and ``value``, bool for the others
_KINDS = {field.name: type(field.default) for field in dataclasses.fields(PositionalEncoding)}


def encoding_text(pe: PositionalEncoding) -> str:
    """The text saved for ``pe``: its fields as JSON, keys sorted."""
    return json.dumps(dataclasses.asdict(pe), sort_keys=True)


def saved_text(value: object) -> str | None:
    """The text of the saved ``pe`` entry ``value`` (UTF-8 bytes as a ``uint8`` tensor); ``None`` for anything
    else (a damaged checkpoint's entry: not a tensor, not bytes, not UTF-8)."""
    try:
        return bytes(value.reshape(-1).tolist()).decode()
    except (AttributeError, TypeError, ValueError):
        return None


def unread_encoding(value: object) -> str:
    """What a line says of the saved ``pe`` entry ``value`` that names no encoding: what was expected and what
    came (its text where it is text, cut: a later version's field or rotation, a hand edit), and what to do."""
    text = saved_text(value)
    if text is None:
        return f"expected the encoding as UTF-8 bytes (uint8), got {repr_bounded(value, 80)}"
    return (f"expected an encoding this version knows (its settings as JSON, or a preset's name), got "
            f"{repr_bounded(text, 160)}; load it with the version that saved it")


def saved_encoding(text: str) -> PositionalEncoding | None:
    """The encoding ``text`` (saved by :func:`encoding_text` or by an older version: a preset's name, a ``repr``)
    names; ``None`` where it names none (a damaged or hand-edited entry)."""
    if text in PRESETS:
        return PRESETS[text]
    try:
        fields = json.loads(text) if text.startswith("{") else _repr_fields(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):   # what json and ast raise on text
        return None                                                 # (ast.literal_eval's documented five)
    return _encoding(fields)


def _repr_fields(text: str) -> dict | None:
    """The keyword arguments of ``PositionalEncoding(field=literal, ...)`` (a dataclass ``repr``); ``None`` for
    other text. Parsed, never evaluated."""
    call = ast.parse(text, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "PositionalEncoding"
            and not call.args and all(k.arg is not None for k in call.keywords)):
        return None
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def _encoding(fields: object) -> PositionalEncoding | None:
    """The encoding of ``fields`` (field -> value, each a field of the dataclass with a value of its kind,
    :data:`_KINDS`); ``None`` otherwise."""
    if not isinstance(fields, dict) or not all(name in _KINDS and type(value) is _KINDS[name]
                                               for name, value in fields.items()):
        return None
    try:
        return PositionalEncoding(**fields)
    except ValueError:                                               # a rotation or value term it does not know
        return None


def load_encoding(saved: object, pe: PositionalEncoding, prefix: str, settings: dict[str, float],
                  missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]) -> None:
    """Compare a state_dict's ``pe`` entry ``saved`` (``None`` where it has none) with the layer's encoding ``pe``
    (``settings``: the layer's, which it saves with an entry): an entry of a layer without settings is unexpected,
    one that names no encoding or another one an error, and none where the settings were saved a ``UserWarning``
    (the module docstring; where they are missing too, as in PyG's own checkpoints, the missing keys say it)."""
    if saved is not None and not settings:
        unexpected_keys.append(prefix + "pe")
    elif saved is not None and (loaded := saved_encoding(saved_text(saved) or "")) is None:
        error_msgs.append(f"{prefix}pe: {unread_encoding(saved)}")
    elif saved is not None and loaded != pe:                          # equal settings load, however saved
        error_msgs.append(f"{prefix}pe: the checkpoint was saved with pe={pe_argument(loaded)}, this layer has pe="
                          f"{pe_argument(pe)}; build it with pe={pe_argument(loaded)} to load it")
    elif saved is None and settings and not any(prefix + name in missing_keys for name in settings):
        warnings.warn(f"the checkpoint names no encoding (saved before layers recorded it): loaded as pe="
                      f"{pe_argument(pe)}, unconfirmed; if it was trained with that, save it again to record it",
                      UserWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` (for a warning of :func:`load_encoding`) of the line that called ``load_state_dict``:
    the first frame outside ``pointgeope/nn`` and torch's ``nn/modules``. One text for every layer, shown from
    that line: Python's default filter shows it once per line, not once per layer of the model loaded."""
    import torch.nn.modules.module as torch_module
    inside = tuple(os.path.join(os.path.dirname(path), "") for path in (__file__, torch_module.__file__))
    frame, level = sys._getframe(2), 2  # 1: load_encoding, which warns
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level
