"""A config saved as UTF-16 (Windows PowerShell's ``>``, Notepad's "Unicode": with a byte-order mark; ``iconv -t
UTF-16LE`` or an editor's "UCS-2 LE": without) was refused: without the mark as "a binary file (it holds NUL bytes; a
checkpoint or an array?)", with it as "not UTF-8 text (byte 0xff)"; UTF-32 without its mark was called binary too.
YAML reads UTF-16 and UTF-32 (YAML 1.2, 5.2), and so does the config reader now; a binary file is still called
binary."""
from __future__ import annotations

from shlex import split

import numpy as np
import pytest

from pointgeope.engine.config import Config, ConfigError, load_config

# Not the defaults: a file read as something else (or not at all) would not give this config.
TEXT = "# a recipe\nmodel:\n  pe: rpe\noptim:\n  lr: 0.125\ntrain:\n  epochs: 7\n"


def _written(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("encoding", "mark"), [
    ("utf-16-le", b""), ("utf-16-be", b""), ("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
    ("utf-32-le", b"\xff\xfe\0\0"), ("utf-32-be", b"\0\0\xfe\xff"), ("utf-32-le", b""), ("utf-32-be", b""),
    ("utf-8", b"\xef\xbb\xbf")])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_config_in_utf16_or_utf32_reads_as_its_utf8_copy(tmp_path, encoding, mark, newline):
    """Each encoding YAML reads, with Windows line ends too (PowerShell writes CRLF): the config of the UTF-8 file."""
    reference = load_config(_written(tmp_path / "utf8.yaml", TEXT.encode()))
    assert (reference.model.pe, reference.optim.lr, reference.train.epochs) == ("rpe", 0.125, 7)
    assert reference != Config()
    config = _written(tmp_path / "other.yaml", mark + TEXT.replace("\n", newline).encode(encoding))
    assert load_config(config) == reference


def test_a_utf16_base_and_the_lines_of_a_utf16_file(tmp_path):
    """A ``base:`` in UTF-16 is read too, and a problem's line is the line in the file (CRLF ends counted once)."""
    _written(tmp_path / "base.yaml", b"\xff\xfe" + TEXT.replace("\n", "\r\n").encode("utf-16-le"))
    top = _written(tmp_path / "top.yaml", "base: base.yaml\r\ntrain:\r\n  epochs: 3\r\n".encode("utf-16-le"))
    config = load_config(top)
    assert (config.model.pe, config.optim.lr, config.train.epochs) == ("rpe", 0.125, 3)
    bad = _written(tmp_path / "bad.yaml", "model:\r\n  pe: rpe\r\n  planez: [8]\r\n".encode("utf-16-le"))
    with pytest.raises(ConfigError, match=rf"^{bad}:3: unknown key 'model\.planez'"):
        load_config(bad)


@pytest.mark.parametrize("data", [
    b"PK\x03\x04\x14\x00\x00\x00\x08\x00 a checkpoint's zip",  # torch.save
    b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'}\n\x00\x00\x80?",  # np.save
    b"a\x00\x00\x00b\x00",  # a NUL second byte, but a NUL character once decoded
    b"a\x00\x00\xd8",  # a NUL second byte, then a lone surrogate: no UTF-16
    bytes([5, 0, 7, 0, 9, 0, 1, 0] * 4),  # 16-bit numbers: UTF-16LE of control characters (was "not valid YAML")
    bytes([0, 5, 0, 7, 0, 9, 0, 1] * 4),  # and big-endian
    bytes([5, 0, 0, 0, 7, 0, 0, 0] * 4), bytes([0, 0, 0, 5, 0, 0, 0, 7] * 4),  # 32-bit numbers
    "é: 1\n".encode("utf-16-le"), "é: 1\n".encode("utf-32-be"),  # no mark, a non-ASCII first: no rule tells it
])
def test_a_binary_file_is_still_called_binary(tmp_path, data):
    path = _written(tmp_path / "c.yaml", data)
    with pytest.raises(ConfigError, match=rf"^{path}: a binary file \(it holds NUL bytes; a checkpoint or an array"):
        load_config(path)


@pytest.mark.parametrize("dtype", ["<i4", ">i4", "<i2", ">i2", "<u2"])
@pytest.mark.parametrize("first", [9, 10, 13, 32, 65, 100, 126])
def test_an_array_whose_first_number_is_an_ascii_code_is_called_binary(tmp_path, dtype, first):
    """Labels or counts as 16- or 32-bit numbers, the first a printable ASCII code or a tab or line end: the NUL
    bytes around it fit UTF-16 or UTF-32 without a mark, and the config was refused as "not valid YAML: unacceptable
    character #x0005" (32-bit ones were called binary before UTF-32 was read)."""
    path = _written(tmp_path / "c.yaml", np.array([first, 5, 7, 1000, 3], dtype=dtype).tobytes())
    with pytest.raises(ConfigError, match=rf"^{path}: a binary file \(it holds NUL bytes; a checkpoint or an array"):
        load_config(path)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-be"])
def test_text_without_a_mark_holding_a_character_yaml_refuses_is_called_binary(tmp_path, encoding):
    """The rule reads only the first character's NUL bytes: the rest of a text so told must be YAML's (5.1)."""
    path = _written(tmp_path / "c.yaml", "model:\x07\n".encode(encoding))
    with pytest.raises(ConfigError, match=rf"^{path}: a binary file"):
        load_config(path)
    marked = _written(tmp_path / "m.yaml", "\ufeffmodel:\x07\n".encode(encoding))  # with its mark: text, YAML's word
    with pytest.raises(ConfigError, match="unacceptable character #x0007"):
        load_config(marked)


def test_utf16_with_its_mark_cut_short_says_how_to_convert_it(tmp_path):
    """The last character's first byte, alone, is at 2 (the mark) + 2 * (len(TEXT) - 1)."""
    path = _written(tmp_path / "c.yaml", b"\xff\xfe" + TEXT.encode("utf-16-le")[:-1])
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}: UTF-16 text (by its byte-order mark) that does not decode (truncated data at "
                              f"byte {2 * len(TEXT)}: cut short?); a config is a YAML file in UTF-8: convert it "
                              f"(iconv -f UTF-16 -t UTF-8 {path} > NEW.yaml) and check its end")


def test_the_convert_command_holds_a_path_with_a_space_as_one_word(tmp_path):
    """It was ``iconv -f UTF-16 -t UTF-8 /my configs/c.yaml > NEW.yaml``: two words for the shell, neither the file."""
    (tmp_path / "my configs").mkdir()
    path = _written(tmp_path / "my configs" / "c.yaml", b"\xff\xfe" + TEXT.encode("utf-16-le")[:-1])
    with pytest.raises(ConfigError) as err:
        load_config(path)
    command = str(err.value).split("convert it (", 1)[1].rsplit(") and check its end", 1)[0]
    assert split(command) == ["iconv", "-f", "UTF-16", "-t", "UTF-8", str(path), ">", "NEW.yaml"]


@pytest.mark.parametrize("mark", [b"", b"\xef\xbb\xbf"])
@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_utf8_that_does_not_decode_names_its_line_and_byte(tmp_path, newline, mark):
    """Its line counted as YAML's own errors count them: ``\\r`` alone ends a line too (it was line 1). With
    Notepad's mark too, whose 3 bytes the codec does not count."""
    path = _written(tmp_path / "c.yaml", mark + f"# x{newline}model:{newline}  pe: rpe  # caf".encode() + b"\xe9\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: not UTF-8 text \(byte 0xe9\); a config is a UTF-8 YAML file"):
        load_config(path)
