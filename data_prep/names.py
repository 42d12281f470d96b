"""The names of a raw S3DIS tree: ``Area_N`` folders, ``<class>_<k>.txt`` objects, junk, and the names
refused before anything is read (each naming the file, folder or member): a name that is not valid UTF-8,
a zip member outside the tree, two folders of one area number (``Area_1`` and ``Area_01``: the folds would
hold the area twice) and two files of one object in a room (``wall_1.txt`` and ``wall_1.TXT``, or a copy
such as ``wall_1 - Copy.txt``, ``wall_1 copy.txt``, ``wall_1(1).txt`` or ``wall_1_backup.txt``: its points
would be read twice, the copy's as clutter).
"""
from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path, PurePosixPath
from shlex import quote

from pointgeope.constants import AREA_NAME, AREAS
from pointgeope.errors import UserError
from pointgeope.plural import agreeing, first_of

# area_1, AREA_1, Area 1, Area_1_Aligned (S3DIS's aligned version named in its folder): named, not read
LIKE_AREA = re.compile(r"area[ _-]?(\d+)(?:[ _-]aligned)?", re.IGNORECASE)
# an area's zip inside RAW, not opened: Area_3.zip, in any case or spelling of LIKE_AREA (area_3.zip, AREA 3.ZIP,
# Area_3_Aligned.zip), zipped twice (Area_3.zip.zip: a zip tool's name for a zip of Area_3.zip), or a second
# copy of it: a browser's second download (Area_3 (1).zip, Area_3(1).zip), a file manager's copy (Area_3 -
# Copy.zip, Area_3 - Copy (2).zip, Area_3 copy.zip, Area_3 copy 2.zip, Area_3 2.zip)
_AREA_COPY = r"area[ _-]?(\d+)(?:[ _-]aligned)?{}(?: ?\(\d+\)| - copy(?: \(\d+\))?| copy(?: \d+)?| \d+)?"
_ZIPPED = _AREA_COPY.format(r"(?:\.zip)?") + r"\.zip"
ZIPPED_AREA = re.compile(_ZIPPED, re.IGNORECASE)
# an area packed in a format prepare does not open, named as ZIPPED_AREA names a zip (Area_3.tar.gz, area_3.7z,
# Area_3 (1).rar, Area_3 - Copy.tgz), and a partial download of any of them (Area_3.zip.part: Firefox,
# Area_3.zip.crdownload: Chrome, Area_3.tar.gz.download: Safari)
_PACKED = _AREA_COPY.format("") + r"\.(?:tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz|tar|7z|rar)"
PACKED_AREA = re.compile(_PACKED, re.IGNORECASE)
PARTIAL_AREA = re.compile(rf"(?:{_ZIPPED}|{_PACKED})\.(?:part|crdownload|download)", re.IGNORECASE)
# an archive (or a partial download of one) whose name holds an area's as a word but is none of the above:
# S3DIS_Area_3.tar.gz, Area_3.gz (a tar.gz that lost its .tar; not notes.txt.gz, a file's), s3dis-area-3.7z.part;
# named in a warning
_HOLDS_AREA = re.compile(r"(?<![a-z0-9])area[ _-]?(\d+)(?![0-9])", re.IGNORECASE)
_ARCHIVE = re.compile(r"(?:.+\.(?:zip|tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz|tar|7z|rar)"
                      r"|(?:[^.]*|.*\.[^.]*[^.a-z][^.]*)\.(?:gz|bz2|xz))(?P<partial>\.(?:part|crdownload|download))?",
                      re.IGNORECASE)
# the words of the whole dataset's archive named for none of its areas (Stanford3dDataset_v1.2_Aligned_Version.tar,
# s3dis.tar.gz, dataset.7z, 2D-3D-S.zip.part): named in a warning while one of S3DIS's six has no folder
DATASET_NAME = re.compile(r"s3dis|stanford|dataset|2d-?3d-?s", re.IGNORECASE)
OBJECT = re.compile(r"(.+)_(\d+)")
# an object file's name: <class>_<k>, S3DIS's (clutter_3, stairs_1) or one's own class of words (side_table_1)
OBJECT_NAME = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)*_\d+")


class SourceError(UserError, ValueError):
    """The raw input is not an S3DIS tree that can be prepared."""


def object_key(name: str) -> tuple[str, int, str]:
    """Sort key of ``<class>_<k>.txt``: by class (lower case), then k as a number (chair_2 before chair_10)."""
    stem = PurePosixPath(name).stem
    match = OBJECT.fullmatch(stem)
    return (match.group(1).lower(), int(match.group(2)), stem) if match else (stem.lower(), -1, stem)


def object_class(name: str) -> str:
    """The class part of ``<class>_<k>.txt`` (lower case); unknown names are mapped by the caller."""
    return object_key(name)[0]


def is_junk(path: str) -> bool:
    """macOS debris (``__MACOSX/``, ``.DS_Store``, ``._*``) and anything hidden (``.work/``, ``.git/``)."""
    return any(part == "__MACOSX" or part.startswith(".") for part in path.split("/"))

def area_number(area: str) -> int:
    """``N`` of ``Area_N`` (``Area_01`` is 1)."""
    return int(AREA_NAME.fullmatch(area).group(1))


def misnamed_area(parts: list[str]) -> set[str]:
    """The folder among the path ``parts`` named like an area but not exactly ``Area_N`` (``area_1``,
    ``AREA_1``, ``Area 1``, ``Area-1``) whose room holds ``Annotations`` (in any case): ``{folder path}``."""
    for i, part in enumerate(parts[:-2]):
        if LIKE_AREA.fullmatch(part) and parts[i + 2].lower() == "annotations":
            return {"/".join(parts[:i + 1])}
    return set()


def area_name(folder: str) -> str:
    """The ``Area_N`` name of a folder named like an area (:func:`misnamed_area`): ``area_01`` is ``Area_1``."""
    return f"Area_{int(LIKE_AREA.fullmatch(folder.rsplit('/', 1)[-1]).group(1))}"


def add_area(location: str, areas: dict[str, str], area: str, path: str) -> None:
    """Record the folder ``path`` of ``area`` (``Area_N``) in ``areas`` (area -> folder); refuse a second
    folder of the area: the same name elsewhere (two versions of the dataset) or another spelling of its
    number (``Area_1`` and ``Area_01``, whose fold keys "1" and "01" name one test area)."""
    first = areas.setdefault(area, path)
    if first != path:
        raise SourceError(f"{location}: {area} found twice, at {first} and {path}; expected one S3DIS version "
                          "(point RAW at one of them)")
    other = next((a for a in areas if a != area and area_number(a) == area_number(area)), None)
    if other is not None:
        one, two = sorted((areas[other], path))
        raise SourceError(f"{location}: {one} and {two} are both area {area_number(area)}; expected one folder "
                          "per area number: rename or remove one")


def check_zipped_areas(location: str, files: list[str], areas: dict[str, str], in_zip: bool) -> None:
    """Refuse a zip named ``Area_N.zip`` (or another spelling or copy of that name, :data:`ZIPPED_AREA`:
    ``area_3.zip``, ``Area_3 (1).zip``) among ``files`` (the paths of RAW's files, or members of RAW's zip)
    whose area has no folder in ``areas`` (area -> folder), and in a RAW folder any zip, whatever its name, holding
    the rooms of such an area (:func:`data_prep.zip_areas.zipped_areas`: ``S3DIS_Area_3.zip``): prepare opens a
    zip only as RAW itself, so the area would vanish from the folds without a word (an area left zipped beside
    the unpacked others). A zip beside its unpacked folder is a leftover of the unpacking, not read as before.
    The ``unzip`` command the line gives, and the zip it says to give as RAW, are quoted for a shell
    (``'Area_3 (1).zip'``); a zip cut short (no end record: wget or curl stopped, the name kept) is named to be
    downloaded again first, as unzip fails on it."""
    from data_prep.zip_areas import zipped_areas

    named = _without_folder(ZIPPED_AREA, files, areas)
    zipped = sorted({*named, *(f for f in files if not in_zip and f.lower().endswith(".zip") and f not in named
                               and zipped_areas(PurePosixPath(location, f)) - _numbers(areas))})
    if not zipped:
        return
    n, first = len(zipped), PurePosixPath(location, zipped[0])
    them = agreeing(n, "it", "them")
    unpack = (f"unpack {location} and {them} into one folder and give that" if in_zip else
              f"unpack {them} there ({_unpack_command(first, str(first.parent))})")
    if cut := [f for f in zipped if not in_zip and not zipfile.is_zipfile(PurePosixPath(location, f))]:
        unpack = f"download {agreeing(n, 'it', shown_paths(cut))} again (no readable zip: cut short?) and {unpack}"
    if not areas and n == 1 and not in_zip:
        unpack += f", or give {quote(str(first))} itself as RAW"
    raise _left_out(location, zipped, agreeing(n, "is the zip of an area", "are the zips of areas") + " without a "
                    "folder here, and prepare opens no zip inside RAW", unpack, areas)


def _numbers(areas: dict[str, str]) -> set[int]:
    """The area numbers ``N`` of the areas with a folder (``areas``: area -> folder)."""
    return {area_number(a) for a in areas}


def _missing_areas(areas: dict[str, str]) -> list[str]:
    """S3DIS's areas (:data:`pointgeope.constants.AREAS`) without a folder in ``areas`` (area -> folder), by number
    (``Area_01`` has one for ``Area_1``)."""
    numbers = _numbers(areas)
    return [area for area in AREAS if area_number(area) not in numbers]


def _without_folder(pattern: re.Pattern, files: list[str], areas: dict[str, str]) -> list[str]:
    """The paths among ``files`` whose name (last component) ``pattern`` fullmatches, naming (its first group that
    matched) an area without a folder in ``areas`` (area -> folder), sorted: an area's archive prepare would pass
    over. One beside its area's folder is a leftover of the unpacking."""
    numbers = _numbers(areas)
    return sorted(f for f in files if (m := pattern.fullmatch(f.rsplit("/", 1)[-1]))
                  and int(next(g for g in m.groups() if g)) not in numbers)


def _left_out(location: str, found: list[str], what: str, action: str, areas: dict[str, str]) -> SourceError:
    """The one line of areas left in RAW as archives (or partial downloads of them) without their folder: the
    paths ``found`` (five shown, then how many more) and ``what`` they are (agreeing with their number), that
    their areas would be left out of the folds, ``action`` (how to take them in), and where other areas have a
    folder, that removing them prepares those."""
    n = len(found)
    other = f", or remove {agreeing(n, 'it', 'them')} to prepare the other areas" if areas else ""
    return SourceError(f"{location}: {shown_paths(found)} {what}: {agreeing(n, 'its area', 'their areas')} would be "
                       f"left out of the folds; {action}{other}")


def _beside(areas: dict[str, str], in_zip: bool) -> str:
    """Where an area's archive is to be unpacked, for a line: beside the areas with a folder (``areas``), in RAW
    itself or in a folder RAW's zip is unpacked into (``in_zip``); where RAW holds no area, nothing is beside."""
    if in_zip:
        return " beside the areas there" if areas else " in that folder"
    return " beside the other areas" if areas else ""


def shown_paths(paths: list[str]) -> str:
    """``paths`` for a line: the first five, then how many more."""
    return first_of(paths, 5)


def _unpack_command(path: PurePosixPath, folder: str) -> str:
    """The shell command that unpacks the archive ``path`` into ``folder``, by its format (quoted for a shell)."""
    lower = path.name.lower()
    if lower.endswith(".zip"):
        return f"unzip {quote(str(path))} -d {quote(folder)}"
    if lower.endswith(".7z"):
        return f"7z x {quote(str(path))} -o{quote(folder)}"
    if lower.endswith(".rar"):
        return f"unrar x {quote(str(path))} {quote(folder + '/')}"
    flag = ("z" if lower.endswith((".gz", ".tgz")) else "j" if lower.endswith((".bz2", ".tbz", ".tbz2")) else
            "J" if lower.endswith((".xz", ".txz")) else "")
    return f"tar -x{flag}f {quote(str(path))} -C {quote(folder)}"


def check_packed_areas(location: str, files: list[str], areas: dict[str, str], in_zip: bool) -> None:
    """Refuse, among ``files`` (as :func:`check_zipped_areas`), an area packed in a format prepare does not open
    (:data:`PACKED_AREA`: ``Area_3.tar.gz``, ``Area_3.7z``, ``Area_3 (1).rar``) or a partial download of an area's
    archive (:data:`PARTIAL_AREA`: ``Area_3.zip.part``, ``Area_3.zip.crdownload``) whose area has no folder in
    ``areas``: the area would vanish from the folds without a word. One beside its area's folder is a leftover,
    not read as before. The line gives the command that unpacks the first one with the tool for its format."""
    if partial := _without_folder(PARTIAL_AREA, files, areas):
        n = len(partial)
        what = agreeing(n, "is a partial download of an area's archive", "are partial downloads of areas' archives")
        into = f"unpack {location} into a folder, " if in_zip else ""   # the folder the place below is in
        raise _left_out(location, partial, f"{what} without a folder here", f"{into}finish or redo "
                        f"{agreeing(n, 'the download', 'the downloads')} and unpack {agreeing(n, 'it', 'them')}"
                        f"{_beside(areas, in_zip)}", areas)
    if packed := _without_folder(PACKED_AREA, files, areas):
        n, first = len(packed), PurePosixPath(location, packed[0])
        them = agreeing(n, "it", "them")
        unpack = (f"unpack {location} into a folder and {them}{_beside(areas, in_zip)}" if in_zip
                  else f"unpack {them}{_beside(areas, in_zip)} with the tool for {agreeing(n, 'its', 'each')} format "
                       f"({_unpack_command(first, str(first.parent))})")
        raise _left_out(location, packed, agreeing(n, "is an area", "are areas") + " packed in a format prepare does "
                        "not open, without a folder here", unpack, areas)


def archive_files(paths: list[tuple[str, bool]]) -> list[str]:
    """RAW's files as the archive checks see them, from ``paths`` (each entry's path and whether it is a folder):
    a download in progress that is a folder (Safari's ``Area_3.zip.download/``, a bundle holding the partial
    ``Area_3.zip`` and an ``Info.plist``) stands for the files in it, as one partial download of its name: the
    partial zip inside was taken for a whole one, and the line said to unzip it (which fails, the zip cut short)."""
    out: dict[str, None] = {}
    for path, is_dir in paths:
        parts = path.split("/")
        at = next((i for i, part in enumerate(parts) if part.lower().endswith(".download")
                   and (is_dir or i < len(parts) - 1)), None)
        if at is not None or not is_dir:
            out["/".join(parts[:at + 1]) if at is not None else path] = None
    return list(out)


def likely_areas(location: str, files: list[str], areas: dict[str, str], in_zip: bool,
                 any_archive: bool = False) -> list[str]:
    """The paths among ``files`` (as :func:`check_zipped_areas`) that may hold an area without a folder in
    ``areas``, by their name alone: an archive or a partial download of one whose name holds an area's as a word
    (``S3DIS_Area_3.tar.gz``, ``Area_3.gz``, ``s3dis-area-3.7z.part``), none the refusals know by name (they are
    checked first), and, while one of S3DIS's six areas has no folder, one outside the area folders whose name holds
    no area's but the dataset's (:data:`DATASET_NAME`: ``Stanford3dDataset_v1.2_Aligned_Version.tar``,
    ``s3dis.tar.gz``), or any name where ``any_archive`` (RAW holds no area: the refusal names the first, one named
    for an area or the dataset before ``notes.tar.gz``). Such a name does not say what the file holds
    (``Area_3_notes.tar.gz``), and a multi-GB archive is not opened to see: named, not refused. A zip in a RAW folder
    is among them only where it is no readable zip (cut short: no member list to read); a readable one's members say
    what it holds (:func:`check_zipped_areas`)."""
    numbers = _numbers(areas)
    missing = bool(_missing_areas(areas))

    def may_hold(path: str, name: str) -> bool:
        if m := _HOLDS_AREA.search(name):
            return int(m.group(1)) not in numbers
        return missing and (any_archive or bool(DATASET_NAME.search(name))) and not any(
            AREA_NAME.fullmatch(part) for part in path.split("/")[:-1])

    def named(path: str) -> tuple[bool, str]:  # those named for an area or the dataset first: the refusal names one
        name = path.rsplit("/", 1)[-1]
        return not (_HOLDS_AREA.search(name) or DATASET_NAME.search(name)), path

    return sorted((f for f in files if may_hold(f, name := f.rsplit("/", 1)[-1]) and _ARCHIVE.fullmatch(name)
                   and (in_zip or not name.lower().endswith(".zip")
                        or not zipfile.is_zipfile(PurePosixPath(location, f)))), key=named)


def likely_area(location: str, path: str, in_zip: bool, areas: dict[str, str]) -> str:
    """What the file ``path`` of :func:`likely_areas` may be (an archive of the area its name holds, or of the
    dataset whose areas without a folder in ``areas`` it may hold), and what to do if it is (the command that
    unpacks it, where RAW is a folder)."""
    name = path.rsplit("/", 1)[-1]
    first = PurePosixPath(location, path)
    held = _HOLDS_AREA.search(name)
    beside = _beside(areas, False) if held else ""
    unpack = f"unpack it{beside} ({_unpack_command(first, str(first.parent))}) and prepare again"
    if _ARCHIVE.fullmatch(name).group("partial"):
        action = f"finish the download, unpack it{beside} and prepare again"
    elif not in_zip and name.lower().endswith(".zip"):  # one that cannot be read (likely_areas)
        action = (f"download it again (it is no readable zip: cut short?), {unpack}" if held else
                  "download it again (it is no readable zip: cut short?) and give it itself as RAW")
    elif in_zip:
        action = f"unpack {location} into a folder and it{_beside(areas, True)}, then prepare that folder"
    else:
        action = unpack
    if held:
        return (f"{path} may be an archive of Area_{int(held.group(1))}, which has no folder here (by its name; "
                "prepare opens no archive inside RAW, so the area would be left out of the folds): if it holds the "
                f"area, {action}")
    if not areas:
        return f"{path} is an archive, and prepare opens no archive inside RAW: if it holds the dataset, {action}"
    missing = _missing_areas(areas)
    n = len(missing)
    return (f"{path} may be an archive of the whole dataset (by its name), and {', '.join(missing)} "
            f"{agreeing(n, 'has', 'have')} no folder here (prepare opens no archive inside RAW, so "
            f"{agreeing(n, 'it', 'they')} would be left out of the folds): if it holds "
            f"{agreeing(n, 'it', 'them')}, {action}")


def raw_archive(raw: Path) -> str | None:
    """The line for RAW given as an archive prepare does not read, by its name (:data:`_ARCHIVE`: a tar, 7z or rar,
    or a partial download of any archive): what to do, with the command that unpacks it; ``None`` for another
    file. Such a RAW was "a file that is not a zip", which said neither what to do nor how."""
    match = _ARCHIVE.fullmatch(raw.name)
    if match is None or (raw.name.lower().endswith(".zip") and not match.group("partial")):
        return None
    reads = "prepare reads a folder, or a .zip in place"
    if match.group("partial"):
        return f"{raw}: a partial download ({reads}): finish the download, then give what it becomes"
    return (f"{raw}: an archive that prepare does not read ({reads}): unpack it "
            f"({_unpack_command(PurePosixPath(raw), str(raw.parent))}) and give the folder it makes")


def warn_likely_areas(location: str, files: list[str], areas: dict[str, str], in_zip: bool) -> None:
    """A warning naming each file of :func:`likely_areas` (:func:`likely_area`): prepare goes on with the areas
    that have a folder."""
    for path in likely_areas(location, files, areas, in_zip):
        print(f"warning: {location}: {likely_area(location, path, in_zip, areas)}", file=sys.stderr)


def check_objects(location: str, files: list) -> None:
    """Refuse two annotation files of one room that name one object by :func:`object_key` (class in any
    case, ``k`` as a number, suffix in any case): ``wall_1.txt`` beside ``wall_1.TXT``, ``Wall_1.txt`` or
    ``wall_01.txt``, whose points would be read twice under one object. ``files``: the room's entries
    (``.path``)."""
    seen: dict[tuple, str] = {}
    for entry in files:
        name = PurePosixPath(entry.path)
        key = (*object_key(name.name)[:2], name.suffix.lower())
        first = seen.setdefault(key, entry.path)
        if first != entry.path:
            one, two = sorted((first, entry.path))
            what = f"{key[0]} {key[1]}" if key[1] >= 0 else key[0]
            raise SourceError(f"{location}: {one} and {two} name one object ({what}: the class is read in any "
                              "case, the number as a number); expected each object once: remove one")
    _check_copies(location, [entry.path for entry in files])


def _check_copies(location: str, paths: list[str]) -> None:
    """Refuse a file whose name is not ``<class>_<k>`` (:data:`OBJECT_NAME`: a class of one word, as S3DIS's,
    or of several joined by ``_``, one's own ``side_table_1`` beside ``table_1``) but holds the name of another
    object of the room as a word (``wall_2 - Copy``, ``wall_3 copy``, ``door_1(1)``, ``ceiling_1_backup``,
    ``wall_1.orig``, ``Copy of wall_2``; any case): a copy a file manager or a backup made, whose points
    would be read a second time as clutter. ``wall_1`` in ``wall_10`` is no match (a digit follows)."""
    stems = {PurePosixPath(path).stem.lower(): path for path in paths}
    for path in paths:
        stem = PurePosixPath(path).stem
        if OBJECT_NAME.fullmatch(stem):
            continue
        for other, other_path in stems.items():
            if other != stem.lower() and OBJECT_NAME.fullmatch(other) and re.search(
                    rf"(?<![a-z0-9]){re.escape(other)}(?![0-9])", stem.lower()):
                raise SourceError(f"{location}: {path} looks like a copy of {other_path} (its name holds "
                                  f"{PurePosixPath(other_path).stem!r}; S3DIS object files are named <class>_<k>.txt), "
                                  "and its points would be read again as clutter; expected each object once: "
                                  "remove the copy (or rename it <class>_<k>.txt if it is another object)")


def check_name(location: str, path: str) -> None:
    """Refuse a path that is not valid UTF-8 (it could not be stored in HDF5 nor printed)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise SourceError(f"{location}: the name {shown!r} is not valid UTF-8; rename it (room and file names "
                          "become HDF5 group names)") from None


def member_name(location: str, info: zipfile.ZipInfo) -> str:
    """The name of a zip member as its bytes say: UTF-8 when flagged so (bit 11), or when its bytes decode
    as UTF-8 (zip tools that do not set the flag). Other unflagged bytes may be cp437, cp850 or latin-1,
    which nothing tells apart (``zipfile`` reads them as cp437: latin-1 ``office\xe91`` became
    ``officeΘ1``), so they are refused, as a folder's non-UTF-8 name is, rather than guessed. The path is
    then read as a folder's would be (:func:`_posix_path`)."""
    if info.flag_bits & 0x800 or info.filename.isascii():
        return _posix_path(info.filename)
    raw = info.filename.encode("cp437")  # zipfile decoded the unflagged bytes as cp437: undo it
    try:
        return _posix_path(raw.decode("utf-8"))
    except UnicodeDecodeError:
        shown = raw.decode("utf-8", "backslashreplace")
        raise SourceError(f"{location}: the member name {shown!r} is not valid UTF-8 (a zip without the UTF-8 "
                          "flag: cp437, cp850 or latin-1?); rename it, or unpack the zip and give the folder") from None


def _posix_path(name: str) -> str:
    """A member's name as the path of a file in a folder: ``\\`` is a separator, as ``/`` is (zips made by
    Windows tools), and ``.`` and empty components are dropped (``./Area_1/office_2/`` is
    ``Area_1/office_2/``, as some archivers write it); a folder keeps its final ``/``. ``..`` stays (the
    name was refused by :func:`check_member`)."""
    path = name.replace("\\", "/")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return "/".join(parts) + ("/" if path.endswith("/") and parts else "")


def check_member(location: str, name: str) -> None:
    """Refuse a zip member that would land outside the tree: absolute path, drive letter or ``..``."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts:
        raise SourceError(f"{location}: refusing zip member {name!r}: expected relative paths inside the "
                          "archive, got an absolute path or '..'")
