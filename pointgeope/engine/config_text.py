"""The text of a config file, in the encodings YAML reads (YAML 1.2, 5.2): UTF-8 (with or without Notepad's byte-order
mark), and UTF-16 or UTF-32, told by their byte-order mark or, UTF-16 without one, by the NUL byte of its first
character (ASCII in any config: a key's letter, ``#``, ``-``, a space or a line end; ``m\\0`` opens UTF-16LE, ``\\0m``
UTF-16BE). Windows writes UTF-16: Windows PowerShell's ``>`` and ``Out-File`` and Notepad's "Unicode" with the mark,
``iconv -t UTF-16LE``, Python's ``utf-16-le`` and some editors' "UCS-2 LE" without it. Such a file was called binary
(it holds NUL bytes) or "not UTF-8". Any other file with a NUL byte is binary (a checkpoint given as ``--config``).
Line ends are read as text mode reads them (``\\r\\n`` and ``\\r`` end a line, as ``\\n`` does).
"""
from __future__ import annotations

from pathlib import Path
from shlex import quote

from pointgeope.engine.config_check import ConfigError

# the byte-order marks, UTF-32's first (its little-endian mark begins with UTF-16's)
_MARKS = ((b"\xff\xfe\0\0", "utf-32", "UTF-32"), (b"\0\0\xfe\xff", "utf-32", "UTF-32"),
          (b"\xff\xfe", "utf-16", "UTF-16"), (b"\xfe\xff", "utf-16", "UTF-16"))
# the bytes a config's first character may be: printable ASCII, a tab or a line end (YAML's detection assumes ASCII)
_FIRST = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def _codec(data: bytes) -> tuple[str, str, bool]:
    """``(codec, name, marked)`` of a config's bytes ``data``: by its byte-order mark, else UTF-16 where one of its
    first two bytes is NUL and the other a character a config starts with (:data:`_FIRST`; little-endian where the
    second is NUL), else UTF-8. An array of small 16-bit numbers (``05 00 07 00``) is not read as text: it was, and
    "not valid YAML: unacceptable character #x0005" hid that it is binary."""
    for mark, codec, name in _MARKS:
        if data.startswith(mark):
            return codec, name, True
    if len(data) >= 2 and 0 in data[:2] and (data[0] or data[1]) in _FIRST:  # one NUL, one such character
        return ("utf-16-be", "UTF-16BE", False) if data[0] == 0 else ("utf-16-le", "UTF-16LE", False)
    return "utf-8", "UTF-8", False


def config_text(path: Path) -> str:
    """The text of the config file ``path`` (:mod:`this module <pointgeope.engine.config_text>`), or a
    :class:`ConfigError` naming it: binary (a NUL byte, no UTF-16 or UTF-32 text), UTF-8 that does not decode (the
    line and the byte), UTF-16 or UTF-32 with its mark that does not decode (cut short: how to convert it)."""
    data = path.read_bytes()
    codec, name, marked = _codec(data)
    try:
        text = data.decode(codec)
    except UnicodeDecodeError as err:
        if marked:
            raise ConfigError(f"{path}: {name} text (by its byte-order mark) that does not decode ({err.reason} at "
                              f"byte {err.start}: cut short?); a config is a YAML file in UTF-8: convert it "
                              f"(iconv -f {name} -t UTF-8 {quote(str(path))} > NEW.yaml) and check its end") from None
        if codec == "utf-8" and b"\0" not in data:
            line = data[:err.start].replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1  # as the text's
            raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x}); a config is a UTF-8 "
                              "YAML file: save it as UTF-8") from None
        raise _binary(path) from None  # NUL bytes that are no UTF-16 text either
    if "\0" in text:
        raise _binary(path)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _binary(path: Path) -> ConfigError:
    """The refusal of a file with NUL bytes that is no UTF-16 or UTF-32 text (a checkpoint given as ``--config``)."""
    return ConfigError(f"{path}: a binary file (it holds NUL bytes; a checkpoint or an array?), not a YAML config; "
                       "give a config such as configs/demo.yaml, or a fold's config.yaml")
