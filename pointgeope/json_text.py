"""The JSON of a record read back (``metrics.json``, a prediction's ``_pred.json``, ``manifest.json``, ``folds.json``,
a lock's owner): :func:`loads` is :func:`json.loads` whose every refusal of the text is a
:class:`json.JSONDecodeError`, so that a reader's one ``except json.JSONDecodeError`` (or ``ValueError``) says a
damaged file in one line.

:func:`json.loads` refuses two damaged texts otherwise: an integer of more than ``sys.get_int_max_str_digits()``
digits (4300; a plain ``ValueError``, not a ``JSONDecodeError``) and arrays or objects nested deeper than the
interpreter's recursion allows (``RecursionError``, no ``ValueError`` at all). Both became tracebacks of ``report``
and ``train`` on a damaged ``metrics.json``. No torch here.
"""
from __future__ import annotations

import json
import re
import sys

_DIGITS = re.compile(r"\d+")


def loads(text: str | bytes):
    """``json.loads(text)``; a :class:`json.JSONDecodeError` for every text it refuses, at the refused integer's
    position (``line:column`` as ``JSONDecodeError`` counts them), or at the start for nesting too deep."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")   # (a UnicodeDecodeError, as json.loads raises for bytes not UTF-8)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deep to read", text, 0) from None
    except ValueError as err:   # an integer too long to convert (the only other ValueError json.loads raises)
        limit = sys.get_int_max_str_digits()
        at = next((m.start() for m in _DIGITS.finditer(text) if limit and len(m.group()) > limit), 0)
        raise json.JSONDecodeError(f"an integer of more than {limit} digits ({err.__class__.__name__})", text,
                                   at) from None
