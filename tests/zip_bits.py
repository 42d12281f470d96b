"""A flipped bit in the stored bytes of one part of a zip file (``torch.save``'s format): the damage a disk or a
copy can do that ``torch.load`` does not see, since it skips the CRC-32 each part carries. The one set-up of the
tests that checkpoints (``tests/engine/test_checkpoint.py``) and Pointcept files
(``tests/model/ptv3/test_pointcept_equivalence.py``) are refused so damaged. A test imports it as ``tests.zip_bits``.
"""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path


def flip_bit(path: Path, part_size: int, byte: int) -> str:
    """Flip the low bit of byte ``byte`` of the stored data of the first part of ``part_size`` bytes in the zip
    file ``path``, in place. A local file header is 30 bytes, then the name and the extra field, whose lengths
    are the two ``uint16`` at offset 26; the data follows (``torch.save`` stores its parts uncompressed). Returns
    the part's name in the archive."""
    with zipfile.ZipFile(path) as archive:
        part = next(i for i in archive.infolist() if i.file_size == part_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[part.header_offset + 26:part.header_offset + 30])
    data[part.header_offset + 30 + name_len + extra_len + byte] ^= 0x01
    path.write_bytes(bytes(data))
    return part.filename
