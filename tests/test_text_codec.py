"""pointgeope/text_codec.py: YAML 1.2's encoding detection (section 5.2), the rule of configs and text scans.

The expected rows are the spec's table; each text is encoded by Python's own codec and must decode back whole."""
from __future__ import annotations

import pytest

from pointgeope.text_codec import detect

TEXT = "model:\n  pe: rpe\n"


@pytest.mark.parametrize(("encoding", "mark", "name"), [
    ("utf-32-be", b"\0\0\xfe\xff", "UTF-32"), ("utf-32-be", b"", "UTF-32BE"),
    ("utf-32-le", b"\xff\xfe\0\0", "UTF-32"), ("utf-32-le", b"", "UTF-32LE"),
    ("utf-16-be", b"\xfe\xff", "UTF-16"), ("utf-16-be", b"", "UTF-16BE"),
    ("utf-16-le", b"\xff\xfe", "UTF-16"), ("utf-16-le", b"", "UTF-16LE"),
    ("utf-8", b"\xef\xbb\xbf", "UTF-8"), ("utf-8", b"", "UTF-8")])
@pytest.mark.parametrize("text", [TEXT, "4.0 1.0 2.0 10 20 30\n", "# é\n", "\tx\n", "\r\n"])
def test_each_row_of_yamls_table(encoding, mark, name, text):
    data = mark + text.encode(encoding)
    codec = detect(data[:4])
    assert (codec.name, codec.mark) == (name, len(mark))
    assert data.decode(codec.codec) == text  # the mark dropped, nothing else


@pytest.mark.parametrize("data", [
    bytes([5, 0, 7, 0]), bytes([0, 5, 0, 7]),  # 16-bit numbers: no text starts with a control character
    bytes([5, 0, 0, 0]), bytes([0, 0, 0, 5]),  # 32-bit ones
    "é".encode("utf-16-le"), "é".encode("utf-32-le"), "é".encode("utf-16-be"),  # no rule for a non-ASCII first
    b"", b"a", b"\0"])
def test_anything_else_is_utf8(data):
    assert detect(data).codec == "utf-8"


def test_unprintable_share_counts_what_printable_refuses():
    from pointgeope.text_codec import unprintable_share

    assert unprintable_share("d\x05\x07") == pytest.approx(2 / 3)
    assert unprintable_share("4 5 \x1b[31m6") == pytest.approx(1 / 10)     # 10 characters
    assert unprintable_share("1\t2 \u00e9\n") == 0 and unprintable_share("") == 0
