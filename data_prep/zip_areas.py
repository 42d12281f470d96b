"""The areas a zip inside RAW holds, read from its list of members: prepare opens a zip only as RAW itself, so a
zip of an area left in RAW under any name (``S3DIS_Area_3.zip``, ``Area_3_1.zip``, ``Area_3 (copy).zip``, the
whole dataset's ``Stanford3dDataset_v1.2_Aligned_Version.zip``) would vanish from the folds without a word where its
name is not one :data:`data_prep.names.ZIPPED_AREA` knows. Only the central directory is read (no member).
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from data_prep.names import LIKE_AREA, is_junk


def zipped_areas(path: str | Path) -> set[int]:
    """The area numbers ``N`` of the members of the zip ``path`` that lie in a room of an area folder (a folder named
    like an area, :data:`~data_prep.names.LIKE_AREA`, with at least a room and a file below it:
    ``Area_3/office_1/...``, ``S3DIS/area_3/office_1/...``); ``set()`` for a file that is no readable zip (not this
    check's to judge: nothing in it would be read either way; one named for an area, cut short, is named in a
    warning, :func:`data_prep.names.likely_areas`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return set()
    found = set()
    for name in names:
        parts = [part for part in name.replace("\\", "/").split("/") if part]
        if is_junk("/".join(parts)):
            continue
        found.update(int(m.group(1)) for part in parts[:-2] if (m := LIKE_AREA.fullmatch(part)))
    return found
