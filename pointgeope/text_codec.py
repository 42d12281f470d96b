"""Which Unicode encoding a text file is in, from its first 4 bytes, as YAML 1.2 tells it (section 5.2, "Character
Encodings"): the one rule for configs (:mod:`pointgeope.engine.config_text`) and text scans
(:mod:`pointgeope.scans.text`).

=============  ===============  ========  (``x``: the first character, ASCII, :data:`FIRST`)
mark           first bytes      encoding
=============  ===============  ========
UTF-32 mark    ``00 00 FE FF``  UTF-32BE
none           ``00 00 00 x``   UTF-32BE
UTF-32 mark    ``FF FE 00 00``  UTF-32LE
none           ``x 00 00 00``   UTF-32LE
UTF-16 mark    ``FE FF``        UTF-16BE
none           ``00 x``         UTF-16BE
UTF-16 mark    ``FF FE``        UTF-16LE
none           ``x 00``         UTF-16LE
UTF-8 mark     ``EF BB BF``     UTF-8
anything else                   UTF-8
=============  ===============  ========

The rows without a mark read the NUL bytes around an ASCII first character (a key's letter, ``#``, ``-``, a digit,
a space or a line end): the table has no row for text without a mark whose first character is not ASCII
(``é`` in UTF-16LE is ``E9 00``), and neither has this module. Such a file is taken for UTF-8 and its NUL bytes
make the reader call it binary, saying that UTF-16 or UTF-32 text needs its mark. ``x`` is narrowed to printable
ASCII, a tab and the line ends, so that an array of small 16- or 32-bit numbers (``05 00 07 00``) is not read as
text of control characters: it is binary. An array whose first number is such a byte (``64 00 00 00 05 00 00 00``:
100, 5 as 32-bit numbers) fits a row without a mark; the text it decodes to holds a character that YAML's text may
not (:func:`printable`), which tells it from text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# the bytes a text's first character may be for the rows without a mark: printable ASCII, a tab or a line end
FIRST = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
HEAD = 4  # the bytes the rule reads
# a character outside YAML 1.2's printable set (5.1, c-printable): C0 controls but tab and line ends, DEL, C1 but NEL
_NOT_PRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Codec:
    """An encoding told by :func:`detect`.

    Attributes:
        codec: the Python codec that decodes the file's bytes whole, dropping the mark (``utf-16``, ``utf-32-le``,
            ``utf-8-sig``, ...).
        name: its name for a message and for ``iconv -f`` (``UTF-16``, ``UTF-32LE``, ``UTF-8``).
        mark: the length in bytes of the byte-order mark (0: none).
    """
    codec: str
    name: str
    mark: int = 0


_MARKS = ((b"\0\0\xfe\xff", Codec("utf-32", "UTF-32", 4)), (b"\xff\xfe\0\0", Codec("utf-32", "UTF-32", 4)),
          (b"\xfe\xff", Codec("utf-16", "UTF-16", 2)), (b"\xff\xfe", Codec("utf-16", "UTF-16", 2)),
          (b"\xef\xbb\xbf", Codec("utf-8-sig", "UTF-8", 3)))  # UTF-32LE's mark begins with UTF-16LE's: first
UTF8 = Codec("utf-8", "UTF-8")


def detect(head: bytes) -> Codec:
    """The encoding of a text file whose first bytes are ``head`` (:data:`HEAD` of them, or all of a shorter file),
    by the table of the module docstring."""
    for mark, codec in _MARKS:
        if head.startswith(mark):
            return codec
    nul = [b == 0 for b in head[:HEAD]]
    ascii_at = [b in FIRST for b in head[:HEAD]]
    if nul[:4] == [True, True, True, False] and ascii_at[3]:
        return Codec("utf-32-be", "UTF-32BE")
    if nul[:4] == [False, True, True, True] and ascii_at[0]:
        return Codec("utf-32-le", "UTF-32LE")
    if nul[:2] == [True, False] and ascii_at[1]:
        return Codec("utf-16-be", "UTF-16BE")
    if nul[:2] == [False, True] and ascii_at[0]:
        return Codec("utf-16-le", "UTF-16LE")
    return UTF8


def printable(text: str) -> bool:
    """Whether every character of ``text`` is one YAML's text may hold (YAML 1.2, 5.1: tab, line ends, printable
    ASCII, NEL and the rest of Unicode but C1 controls, surrogates, U+FFFE and U+FFFF): the check of a row without a
    mark, which reads only the NUL bytes around the first character; the numbers of a binary array decoded as
    UTF-16 or UTF-32 are control characters (``d\\x05\\x07`` for 100, 5, 7)."""
    return _NOT_PRINTABLE.search(text) is None


def unprintable_share(text: str) -> float:
    """The share of ``text``'s characters that :func:`printable` refuses (0 for no text): most of a binary array
    decoded as text (``d\\x05\\x07``: 2 of 3), a few of a text line with a terminal's colour codes (``\\x1b[31m``)."""
    return len(_NOT_PRINTABLE.findall(text)) / len(text) if text else 0.0
