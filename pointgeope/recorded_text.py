"""A value read back from a record (a fold's ``metrics.json``, a prediction's ``_pred.json``) in words that fit in
the line that says it, whatever the file holds.

A record written by the toolkit holds a short printable string (``"bf16"``, ``"2.13.0+cu126"``,
``"NVIDIA H200"``) or an integer (a thread count) where the report or predict's skip line prints it. A value
edited by hand or damaged on disk can hold anything JSON can: a newline (which would split a note of
``report.md`` into two list items), a string of a megabyte, a list where a number was. Such a value is said as
``repr`` writes it (control characters escaped: one line), cut to :data:`LIMIT` characters, and marked
``(looks damaged)``: ``'2.13.0\\n- x' (looks damaged)``. A setting of a recorded config (any JSON value) is said
as an override writes it (:func:`setting_text`) or as ``repr`` writes it (:func:`setting_repr`), and found
damaged where that is not one printable line of at most :data:`SETTING_LIMIT` characters. Every value a message
cuts, here and in the refusals of every reader, is cut by :func:`bounded`, which marks the cut and says the
length (``'yyy... (100,002 characters)``): no reader takes a part for the whole. No torch here: the report
imports it, and imports none.
"""
from __future__ import annotations

import re

LIMIT = 64   # characters of a value said as it is; longer (as recorded or as repr writes it) is cut
DAMAGED = " (looks damaged)"
SETTING_LIMIT = 500   # characters of a setting said as it is (a long data.root): more is damage
_LINE_BREAK = re.compile(r"\s*[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]\s*")  # str.splitlines's breaks, with their indent


def recorded_text(value: object, kind: type = str) -> str:
    """``value`` as it is (``str(value)``) where it is a ``kind`` (``str`` or ``int``; a bool is no int here)
    and, for a string, printable (no control character or surrogate: :meth:`str.isprintable`), not blank (empty
    or spaces alone) and at most :data:`LIMIT` characters; else :func:`damaged_text`.
    ``recorded_text("bf16") == "bf16"``, ``recorded_text(2, int) == "2"``,
    ``recorded_text("a\\nb") == "'a\\\\nb' (looks damaged)"``."""
    if isinstance(value, kind) and not isinstance(value, bool):
        if not isinstance(value, str) or (value.isprintable() and value.strip() and len(value) <= LIMIT):
            return str(value)
    return damaged_text(value)


def damaged_text(value: object) -> str:
    """``repr(value)`` cut to :data:`LIMIT` characters (:func:`repr_bounded`), followed by :data:`DAMAGED`: a value its
    reader has found damaged, on one line (``repr`` escapes control characters and surrogates)."""
    return repr_bounded(value, LIMIT) + DAMAGED


def setting_damaged(value: object) -> bool:
    """Whether a recorded setting's value is one no version writes: not one printable line of at most
    :data:`SETTING_LIMIT` characters as an override writes it (``value_text``: a string as it is, anything else as
    JSON). A newline in a hand-edited ``metrics.json``'s config, a megabyte."""
    text = _value_text(value)
    return not (text.isprintable() and len(text) <= SETTING_LIMIT)


def setting_text(value: object) -> str:
    """A recorded setting as an override writes it (``rpe``, ``[1.0, 1.1]``, ``null``); a damaged one
    (:func:`setting_damaged`) as :func:`damaged_text` says it: one bounded line, marked."""
    return damaged_text(value) if setting_damaged(value) else _value_text(value)


def _value_text(value: object) -> str:
    """``config_yaml.value_text``, imported when a setting is said: it imports yaml, which ``pip install ".[nn]"``
    lacks, and this module's cuts serve code that such an install runs (``data_prep.synth``'s records)."""
    from pointgeope.engine.config_yaml import value_text

    return value_text(value)


def setting_repr(value: object) -> str:
    """A recorded setting as ``repr`` writes it (``'rpe'``, ``[1.0, 1.1]``, ``None``); a damaged one
    (:func:`setting_damaged`) as :func:`damaged_text` says it: one bounded line, marked."""
    return damaged_text(value) if setting_damaged(value) else repr(value)


def bounded(text: str, limit: int = SETTING_LIMIT) -> str:
    """A value of a message as ``repr`` or :func:`json.dumps` wrote it (one line), cut to ``limit`` characters
    where longer, the last three ``...``, with its length: ``'yyy... (100,002 characters)``; whole where not.
    The one cut of a value in a message: a class name of a megabyte in a damaged ``metrics.json`` made a refusal
    line as long, and a cut with no mark (``{value!r:.40}``) let a reader take the part for the whole."""
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text):,} characters)"


def repr_bounded(value: object, limit: int = SETTING_LIMIT) -> str:
    """``repr(value)`` on one line, cut by :func:`bounded` to ``limit`` characters: a value a refusal got, as it
    got it (``got {repr_bounded(value, 40)}``), marked where cut. A string's ``repr`` escapes its line breaks; a
    tensor's or an array's of two dimensions breaks between rows (``tensor([[0., 0.],\\n        [0., 0.]])``, a
    checkpoint entry edited into one): each break and the indent around it is one space
    (``tensor([[0., 0.], [0., 0.]])``)."""
    return bounded(_LINE_BREAK.sub(" ", repr(value)), limit)
