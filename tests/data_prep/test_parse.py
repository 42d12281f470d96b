"""data_prep/parse.py: both parsing paths agree bit for bit with np.loadtxt / strtod; repairs and drops."""
from __future__ import annotations

import io

import numpy as np
import pytest

from data_prep.parse import _parse_fast, _parse_lines, parse_many, parse_points


def _loadtxt(data: bytes) -> np.ndarray:
    return np.loadtxt(io.BytesIO(data), ndmin=2).reshape(-1, 6)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def _random_text(rng: np.random.Generator, rows: int) -> bytes:
    """Decimals in the shapes S3DIS and its re-exports use, with mixed whitespace and line endings."""
    formats = ["{:.3f}", "{:.6f}", "{:.1f}", "{:.0f}", "{:+.2f}", "{:.15g}", "{:.4f}"]
    seps, ends = [" ", "  ", "\t", " \t "], ["\n", "\r\n", "  \n", "\t\r\n"]
    lines = []
    for _ in range(rows):
        xyz = [formats[rng.integers(len(formats))].format(v) for v in rng.uniform(-120, 120, 3)]
        rgb = [str(v) if rng.random() < 0.8 else f"{v}.0" for v in rng.integers(0, 256, 3)]
        lines.append(seps[rng.integers(len(seps))].join(xyz + rgb) + ends[rng.integers(len(ends))])
    lines.insert(rows // 2, "\n")  # a blank line
    return "".join(lines).encode()


@pytest.mark.parametrize("single_space", [True, False], ids=["single-space", "mixed-blanks"])
def test_fast_path_is_bit_exact_against_loadtxt(single_space):
    rng = np.random.default_rng(0)
    data = _random_text(rng, 2000)
    if single_space:  # the S3DIS layout: one space between values, \n line ends
        data = b"\n".join(b" ".join(line.split()) for line in data.split(b"\n"))
    parsed = parse_points(data)
    assert parsed.path == "fast" and parsed.issues == ()
    assert _same_bits(parsed.values, _loadtxt(data))
    assert _same_bits(_parse_lines(data)[0], parsed.values)  # the slow path agrees


def test_fast_path_on_random_digit_strings():
    """1..19 digit mantissas, the point anywhere, with and without exponents: as Python's float()."""
    rng = np.random.default_rng(1)
    tokens = []
    for _ in range(12000):
        digits = "".join(rng.choice(list("0123456789"), rng.integers(1, 20)))
        cut = rng.integers(0, len(digits) + 1)
        token = digits[:cut] + "." + digits[cut:] if rng.random() < 0.8 else digits
        if rng.random() < 0.2:
            token += f"e{rng.integers(-30, 30)}"
        tokens.append(("-" if rng.random() < 0.3 else "") + token)
    data = "\n".join(" ".join(tokens[i:i + 6]) for i in range(0, len(tokens), 6)).encode()
    values = _parse_fast(data)
    assert values is not None
    expected = np.array([float(t) for t in tokens]).reshape(-1, 6)
    assert _same_bits(values, expected)


@pytest.mark.parametrize("text, path", [
    (b"1e3 2.5E-1 3 4 5 6\n", "fast"),                      # exponents
    (b"1.0000000000000001 2 3 4 5 6\n", "fast"),            # 17 digits
    (b"0.000000000000000000001 2 3 4 5 6\n", "fast"),
    (b"1 2 3 4 5 6", "fast"),                               # no final newline
    (b"\n\n1 2 3 4 5 6\n\n", "fast"),                       # blank lines
    (b"1 2 3 4 5 6 \r\n\t7 8  9 1 2 3\r\n", "fast"),         # CRLF, tabs, runs of blanks
    (b"", "fast"),
])
def test_paths_chosen_and_exact(text, path):
    parsed = parse_points(text)
    assert parsed.path == path and parsed.issues == ()
    assert _same_bits(parsed.values, _loadtxt(text) if text.strip() else np.empty((0, 6)))


def test_stray_control_byte_is_repaired_with_its_line():
    data = b"1 2 3 4 5 6\n7 8 9 10 11 12\n19.237 -9.505 103.0\x100000 71 64 54\n"
    parsed = parse_points(data)
    assert parsed.path == "lines"
    np.testing.assert_array_equal(parsed.values[2], [19.237, -9.505, 103.0, 71, 64, 54])
    assert len(parsed.issues) == 1
    issue = parsed.issues[0]
    assert (issue.line, issue.kind) == (3, "repaired")
    assert r"103.0\x100000" in issue.message and "103.00000" in issue.message


def test_bad_lines_are_dropped_with_their_line_numbers():
    data = (b"1 2 3 4 5 6\n"
            b"1 2 3 4 5\n"           # 2: five values
            b"1 2 abc 4 5 6\n"       # 3: non-numeric
            b"1 2 3 4 5 6 7\n"       # 4: seven values
            b"nan 2 3 4 5 6\n"       # 5: not finite
            b"1 2 3- 4 5 6\n"        # 6: a sign inside the number (no stray byte to drop)
            b"\x01\x02 2 3 4 5 6\n"  # 7: only stray bytes: nothing left to repair
            b"7 8 9 10 11 12\r\n")
    parsed = parse_points(data)
    np.testing.assert_array_equal(parsed.values, [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])
    assert [(i.line, i.kind) for i in parsed.issues] == [(n, "dropped") for n in (2, 3, 4, 5, 6, 7)]
    assert "expected 6 values, got 5" in parsed.issues[0].message
    assert "expected 6 values, got 7" in parsed.issues[2].message
    assert "'abc'" in parsed.issues[1].message
    assert parsed.count("dropped") == 6 and parsed.count("repaired") == 0


@pytest.mark.parametrize("text", [b"1-2 0 0 0 0 0\n", b"1.2.3 0 0 0 0 0\n", b"- 0 0 0 0 0\n", b"1 2 3\n4 5 6\n",
                                  b"1 2 3 4 5 6\x10\n", b"True 1 2 3 4 5\n", b"nan 1 2 3 4 5\n",
                                  b"1e400 1 2 3 4 5\n", b"1 2 3 4 5 6\r7 8 9 1 2\r", b"1 2 3 4 5 6\n1 2 3 4 5\n"])
def test_fast_path_refuses_what_it_cannot_parse_exactly(text):
    assert _parse_fast(text) is None
    parsed = parse_points(text)  # the line-by-line path keeps only lines of six finite numbers
    assert parsed.path == "lines" and parsed.count("dropped") >= 1 or parsed.count("repaired") == 1


def test_lone_cr_line_ends_are_line_ends_on_both_paths():
    """Old Mac files end lines with a lone \\r: the line path read the whole file as one 18-value line and
    dropped it (every point of the object lost, counted as "1 dropped line")."""
    lines = [b"1.0 2.0 3.0 10 20 30", b"1.1 2.1 3.1 10 20 30", b"1.2 2.2 3.2 10 20 30"]
    expected = _loadtxt(b"\n".join(lines))
    parsed = parse_points(b"\r".join(lines) + b"\r")
    assert parsed.path == "fast" and parsed.issues == () and _same_bits(parsed.values, expected)
    slow = b"\r".join(lines[:2] + [b"1 2 3", b"1.2 2.2\x01 3.2 10 20 30"]) + b"\r"  # a short line, a stray byte
    values, issues, numbers = _parse_lines(slow)
    assert _same_bits(values, expected)
    assert [(i.line, i.kind) for i in issues] == [(3, "dropped"), (4, "repaired")]
    np.testing.assert_array_equal(numbers, [1, 2, 4])
    mixed = b"1 2 3 4 5 6\r\nbad\r7 8 9 1 2 3\n\r4 5 6 7 8 9"  # \r\n, \r, \n and \r: lines 1 to 5
    parsed = parse_points(mixed)
    assert [(i.line, i.kind) for i in parsed.issues] == [(2, "dropped")]
    np.testing.assert_array_equal(parsed.line_numbers(mixed, np.arange(3)), [1, 3, 5])
    fast = b"1 2 3 4 5 6\r\r7 8 9 1 2 3\r\n4 5 6 7 8 9\n"
    parsed = parse_points(fast)
    assert parsed.path == "fast"
    np.testing.assert_array_equal(parsed.line_numbers(fast, np.arange(3)), [1, 3, 4])


def test_nul_byte_inside_a_number_is_repaired_on_its_line():
    """A NUL is a stray control byte like \\x10, repaired or dropped on its line (test_room: it no longer
    makes the whole file 'binary')."""
    parsed = parse_points(b"1 2 3 4 5 6\n7.5 8\x00.25 9 10 11 12\n1\x002 3 4\n")
    np.testing.assert_array_equal(parsed.values, [[1, 2, 3, 4, 5, 6], [7.5, 8.25, 9, 10, 11, 12]])
    assert [(i.line, i.kind) for i in parsed.issues] == [(2, "repaired"), (3, "dropped")]
    assert r"'8\x00.25' -> 8.25" in parsed.issues[0].message


def test_line_numbers_of_rows_on_both_paths():
    fast = b"\n1 2 3 4 5 6\n\n7 8 9 1 2 3\n"
    slow = b"1 2 3 4 5 6\nbad\n\n7 8 9 1 2 3\n"
    for data, lines in [(fast, [2, 4]), (slow, [1, 4])]:
        parsed = parse_points(data)
        np.testing.assert_array_equal(parsed.line_numbers(data, np.arange(2)), lines)


def test_float_colours_parse():
    parsed = parse_points(b"1.5 2.5 3.5 12.6 254.5 -0.4\n")
    np.testing.assert_array_equal(parsed.values, [[1.5, 2.5, 3.5, 12.6, 254.5, -0.4]])


# Texts parse_many must give exactly as parse_points does: plain ones (joined), and each reason to parse a
# text alone (blank line, CRLF, tabs, runs of blanks, a short, long, non-finite or stray-byte line, no text).
_MANY = [b"1 2 3 4 5 6\n7.25 -8e-3 9 10 11 12\n", b"0.1 0.2 0.3 255 0 1", b"3 3 3 3 3 3\n",
         b"1 2 3 4 5 6\n\n7 8 9 10 11 12\n", b"1 2 3 4 5 6\r\n", b"1\t2 3 4 5 6\n", b"1  2 3 4 5 6\n",
         b"1 2 3 4 5\n", b"1 2 3 4 5 6 7\n", b"1e400 2 3 4 5 6\n", b"-7.3\x1093 1 2 3 4 5\n", b"", b"\n",
         b"1 2 3 4 5 6\n 7 8 9 1 2 3\n", b"-0 +1 .5 5. 1E2 6\n", b"1 2 3 4 5 6\n \n7 8 9 1 2 3\n",
         b"1 2 3 4 5 6 \n", b"1 2 3 4 5 6\n1 2 3 4 5\n", b"1 2 3 4 5 6\n1 2 3 4 5 6 7\n", b"1 2 3 4 5 6\n1 2 3 4 5 \n"]


@pytest.mark.parametrize("order", range(4))
def test_parse_many_equals_parse_points_on_each_text(order):
    rng = np.random.default_rng(order)
    plain = [b"\n".join(b" ".join(line.split()) for line in _random_text(rng, 300).split(b"\n") if line.strip())
             for _ in range(3)]
    texts = [bytes(t) for t in rng.permutation(np.array(_MANY + plain, dtype=object))]
    for many, text in zip(parse_many(texts), texts, strict=True):
        one = parse_points(text)
        assert _same_bits(np.ascontiguousarray(many.values), one.values), text[:40]
        assert (many.issues, many.path) == (one.issues, one.path)
        if text.strip():
            np.testing.assert_array_equal(many.line_numbers(text, np.arange(len(many.values))),
                                          one.line_numbers(text, np.arange(len(one.values))))


def test_parse_many_reads_plain_texts_in_one_pandas_call(monkeypatch):
    """Why it exists: pandas' fixed cost per call is as large as parsing a 200 kB file; a plain text
    among others that must be parsed alone is still joined with the other plain ones."""
    import pandas as pd

    calls = []
    real = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(5)
    plain = [b"\n".join(b" ".join(line.split()) for line in _random_text(rng, 50).split(b"\n") if line.strip())
             for _ in range(20)]
    assert all(p.path == "fast" for p in parse_many(plain)) and len(calls) == 1
    calls.clear()
    parse_many(plain[:10] + [b"1\t2 3 4 5 6\n"] + plain[10:])
    assert len(calls) == 3  # the joined plain texts, then the tabbed one alone: ' ' fails, runs of blanks work


@pytest.mark.parametrize("token, why", [
    ("\u22121.5", "non-ASCII"),       # a Unicode minus: removing it gave +1.5 (the point mirrored)
    ("2\u00b75", "non-ASCII"),        # a middle-dot decimal mark: removing it gave 25
    ("2.5\u00a0", "non-ASCII"),       # an NBSP after a number
    ("\u00a01.5", "non-ASCII"),       # an NBSP before a number: was repaired, while ...
    ("1\x0e5", "decimal point"),      # '.' (0x2e) with bit 5 lost: removing it gave 15
    ("10\x103.5", "decimal point"),   # '0' (0x30) with bit 5 lost: 103.5 or 1003.5?
    ("1.5e-1\x172", "decimal point"), # in the exponent: 1.5e-12 or 1.5e-172?
    ("\x011.5", "sign"),              # where a '-' may have been: the sign position
    ("-\x011.5", "sign"),
    ("1e\x015", "sign"),              # the exponent's sign position
])
def test_stray_bytes_that_may_carry_a_sign_or_a_point_drop_their_line(token, why):
    """Only control bytes that cannot have been a sign or a decimal point are removed; anything else (the
    non-ASCII bytes of a Unicode minus or decimal mark above all) would change the value: the line is
    dropped, naming the token and why."""
    data = f"1 2 3 4 5 6\n7 {token} 9 10 11 12\n".encode()
    parsed = parse_points(data)
    np.testing.assert_array_equal(parsed.values, [[1, 2, 3, 4, 5, 6]])
    assert [(i.line, i.kind) for i in parsed.issues] == [(2, "dropped")]
    assert why in parsed.issues[0].message and repr(token.encode())[2:-1] in parsed.issues[0].message


def test_an_nbsp_drops_its_line_wherever_it_is():
    """An NBSP (UTF-8 c2 a0) before a number was 'repaired' and one after it, a seventh token, dropped the
    line: both now drop it, as does one between two numbers (removing it joined them: '1 2' became 12)."""
    for line in ["\u00a01 2 3 4 5 6", "1 2 3 4 5 6 \u00a0", "1\u00a02 3 4 5 6 7", "1 2 3 4 5\u00a0 6"]:
        parsed = parse_points(f"{line}\n7 8 9 10 11 12\n".encode())
        np.testing.assert_array_equal(parsed.values, [[7, 8, 9, 10, 11, 12]], err_msg=line)
        assert [(i.line, i.kind) for i in parsed.issues] == [(1, "dropped")], line


@pytest.mark.parametrize("token, value", [
    (b"103.0\x100000", 103.0),   # S3DIS Area_5/hallway_6: between digits after the point
    (b"-7.3\x1093", -7.393),
    (b"8\x00.25", 8.25),          # next to the point: the point is there, the byte is not it
    (b"2.2\x01", 2.2),            # after the last digit
    (b"6\x10", 6.0),              # after the last digit of an integer ('6.' is 6)
    (b"1.\x015", 1.5),            # after the point
    (b"1\x01e5", 1e5),            # before the exponent ('1.e5' is 1e5)
    (b"0.12\x7f5", 0.125),        # DEL in the fraction
    (b"1.5e-1\x01", 1.5e-1),      # after the exponent's last digit
])
def test_control_bytes_that_cannot_be_a_sign_or_point_are_repaired(token, value):
    parsed = parse_points(b"0 0 " + token + b" 0 0 0\n")
    np.testing.assert_array_equal(parsed.values, [[0, 0, value, 0, 0, 0]])
    assert [(i.line, i.kind) for i in parsed.issues] == [(1, "repaired")]


def test_a_lost_sign_or_point_is_never_repaired_into_another_value():
    """Replace a sign or the point of random numbers (every shape S3DIS and its re-exports write) by a random
    control byte: the line is dropped, or (a final point: '5.' is 5) kept with the value unchanged."""
    rng = np.random.default_rng(7)
    formats = ["{:.3f}", "{:.6f}", "{:.1f}", "{:.0f}.", "{:.2e}", "{:.15g}", "{:+.4f}"]
    controls = [c for c in range(32) if c not in b"\t\n\r\x0b\x0c"] + [0x7f]
    checked = 0
    for _ in range(3000):
        value = rng.uniform(-150, 150)
        number = formats[rng.integers(len(formats))].format(value) if rng.random() < 0.9 else (
            "-" * (value < 0) + f".{abs(value):.0f}")  # '.5', '-.25'
        spots = [i for i, c in enumerate(number) if c in "+-."]
        if not spots:
            continue
        at = spots[rng.integers(len(spots))]
        token = number[:at].encode() + bytes([controls[rng.integers(len(controls))]]) + number[at + 1:].encode()
        parsed = parse_points(b"0 0 " + token + b" 0 0 0\n")
        assert not len(parsed.values) or parsed.values[0, 2] == float(number), (number, token)
        checked += 1
    assert checked > 2000


def test_a_blank_line_among_well_formed_texts_keeps_every_row_in_its_own_file():
    """A blank line (skipped by pandas) in one plain text among well-formed ones: the joined parse has fewer rows
    than lines, so the texts are parsed alone; split by line counts, the rows would go to the wrong files."""
    texts = [b"1 2 3 4 5 6\n\n7 8 9 10 11 12\n", b"13 14 15 16 17 18\n", b"19 20 21 22 23 24"]
    got = [p.values.tolist() for p in parse_many(texts)]
    assert got == [[[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], [[13, 14, 15, 16, 17, 18]], [[19, 20, 21, 22, 23, 24]]]

