"""The text of a config file, in the encodings YAML reads (YAML 1.2, 5.2): UTF-8 (with or without Notepad's byte-order
mark), UTF-16 and UTF-32, told by their byte-order mark or, without one, by the NUL bytes around an ASCII first
character (a key's letter, ``#``, ``-``, a space or a line end: ``m\\0`` opens UTF-16LE, ``\\0m`` UTF-16BE,
``m\\0\\0\\0`` UTF-32LE), as :mod:`pointgeope.text_codec` tells them. Windows writes UTF-16: Windows
PowerShell's ``>`` and ``Out-File`` and Notepad's "Unicode" with the mark, ``iconv -t UTF-16LE``, Python's
``utf-16-le`` and some editors' "UCS-2 LE" without it. Such a file was called binary (it holds NUL bytes) or "not
UTF-8". Any other file with a NUL byte is binary (a checkpoint given as ``--config``; UTF-16 or UTF-32 text without
its mark whose first character is not ASCII, which YAML's rule cannot tell either). Line ends are read as text mode
reads them (``\\r\\n`` and ``\\r`` end a line, as ``\\n`` does).
"""
from __future__ import annotations

from pathlib import Path
from shlex import quote

from pointgeope.engine.config_check import ConfigError
from pointgeope.text_codec import HEAD, detect, printable


def config_text(path: Path) -> str:
    """The text of the config file ``path`` (:mod:`this module <pointgeope.engine.config_text>`), or a
    :class:`ConfigError` naming it: binary (a NUL byte, no UTF-16 or UTF-32 text), UTF-8 that does not decode (the
    line and the byte), UTF-16 or UTF-32 with its mark that does not decode (cut short: how to convert it)."""
    data = path.read_bytes()
    codec = detect(data[:HEAD])
    try:
        text = data.decode(codec.codec)
    except UnicodeDecodeError as err:
        if codec.name == "UTF-8" and b"\0" not in data:
            at = codec.mark + err.start  # a byte of the file (the codec counts from after the mark)
            line = data[:at].replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1  # as the text's
            raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[at]:02x}); a config is a UTF-8 "
                              "YAML file: save it as UTF-8") from None
        if codec.mark and codec.name != "UTF-8":
            raise ConfigError(f"{path}: {codec.name} text (by its byte-order mark) that does not decode ({err.reason} "
                              f"at byte {err.start}: cut short?); a config is a YAML file in UTF-8: convert it (iconv "
                              f"-f {codec.name} -t UTF-8 {quote(str(path))} > NEW.yaml) and check its end") from None
        raise _binary(path) from None  # NUL bytes that are no UTF-16 or UTF-32 text either
    if "\0" in text or not (codec.mark or codec.name == "UTF-8" or printable(text)):  # a guess of numbers
        raise _binary(path)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _binary(path: Path) -> ConfigError:
    """The refusal of a file with NUL bytes that is no UTF-16 or UTF-32 text (a checkpoint given as ``--config``)."""
    return ConfigError(f"{path}: a binary file (it holds NUL bytes; a checkpoint or an array?), not a YAML config; "
                       "give a config such as configs/demo.yaml, or a fold's config.yaml")
