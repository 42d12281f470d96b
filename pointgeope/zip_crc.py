"""The CRC-32 check of a ``torch.save`` file, which ``torch.load`` does not make.

``torch.save`` writes a zip archive, one part per tensor's bytes, each with the CRC-32 of its bytes; a flipped
bit in a part (a disk's, a copy's) loads as another weight without a word. The engine's checkpoints
(:func:`pointgeope.engine.checkpoint.load_checkpoint`) and Pointcept's files
(:func:`pointgeope.model.ptv3.pointcept_state_dict`) are checked with :func:`changed_part`.
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

__all__ = ["changed_part"]


def changed_part(path: Path) -> str | None:
    """The first part of the checkpoint's zip archive (``torch.save``'s format: one part per tensor's bytes)
    whose bytes do not match the CRC-32 stored with it, ``None`` when all match (or the file is no zip,
    which ``torch.load`` has said). ``torch.load`` does not check them: a flipped bit in a tensor's bytes (a
    disk's, a copy's) loads as another weight without a word. Reads the file once more (about 0.3 s per GB
    from the page cache). A part whose stored CRC-32 is 0 is not checked: torch 2.6 on writes 0 for every
    part under ``torch.serialization.set_crc32_options(False)``, a file that ``torch.load`` reads as it is
    (an empty part's CRC-32 is 0 too; another part's is 0 once in 2**32)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.CRC != 0 and not _crc_matches(archive, info):
                    return info.filename
    except (zipfile.BadZipFile, OSError, EOFError):
        return None
    return None


def _crc_matches(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    """Whether the bytes of ``info`` match its CRC-32 (zipfile checks it as the part is read to its end). A
    part that zipfile cannot read as its entry says does not match either: a changed bit of its compression
    method in the central directory (stored -> deflated: ``torch.load`` reads other bytes without a word,
    zlib fails to inflate them), an entry marked encrypted or of a method zipfile does not know."""
    try:
        with archive.open(info) as part:
            while part.read(1 << 20):
                pass
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError):
        return False
    return True
