"""Find the rooms of a raw S3DIS tree, in a folder or in a ``.zip`` read in place, and read their files.

Accepted layouts (``Stanford3dDataset_v1.2_Aligned_Version`` or the non-aligned v1.2), at any depth::

    [top/]Area_N/<room>/Annotations/<class>_<k>.txt   lines "x y z r g b": the only files parsed
    [top/]Area_N/<room>/Annotations/<folder>/...      not read: named with a warning, as other files there
    [top/]Area_N/<room>/<room>.txt                    the whole room again: ignored
    [top/]Area_N/<file>                               e.g. alignment angles: ignored

macOS junk (``__MACOSX/``, ``.DS_Store``, ``._*``) is skipped; a zip member's ``\\`` is a separator (zips
made by Windows tools) and its ``.`` components are dropped (``./Area_1/...``, as some archivers write).
Refused before anything is parsed, each naming the member, file or folder: a zip
member with an absolute path or a ``..`` component, a duplicate zip member, an annotation member larger
than ``ZipLimits.max_member_bytes`` or compressed more than ``ZipLimits.max_ratio`` times (zip bombs), a
file or folder name that is not valid UTF-8, a folder that cannot be listed, a symbolic link to a folder
that holds it (a loop), an ``Area_N.zip`` whose area has no folder (a zip inside RAW is not opened: its area
would vanish from the folds; another archive or a partial download likewise, one named otherwise that holds an
area's or the dataset's name in a warning), a zip member under ``Area_N`` that is a symbolic link (``zip -y``:
its data is the target's path; a folder's links are followed), an ``Area_N`` folder without a room (it would
vanish from the folds), a room without annotations, two folders of one area number (``Area_1`` and
``Area_01``) and two files of one object (``wall_1.txt`` and ``wall_1.TXT``; :mod:`data_prep.names`). A
member that is corrupt (bad CRC, broken deflate stream) or a file that cannot be read is an error naming it.
RAW without ``Area_N`` folders says what it holds (or that RAW is itself an area folder: give its parent).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from data_prep.limits import ZipLimits
from data_prep.names import (
    SourceError,
    add_area,
    archive_files,
    area_name,
    area_number,
    check_member,
    check_name,
    check_objects,
    check_packed_areas,
    check_zipped_areas,
    is_junk,
    likely_area,
    likely_areas,
    member_name,
    misnamed_area,
    object_class,
    object_key,
    raw_archive,
    shown_paths,
    warn_likely_areas,
)
from pointgeope.constants import AREA_NAME
from pointgeope.plural import agreeing, counted
from pointgeope.recorded_text import repr_bounded

__all__ = ["Entry", "FolderSource", "Room", "Source", "SourceError", "ZipSource", "object_class", "object_key",
           "open_source"]


# Bump when the parsed output of the same raw files changes: prepared rooms then no longer match.
# 3: lone-CR line ends are line ends; one NUL byte no longer makes a text file binary (repaired on its line);
#    UTF-16 text is decoded.
# 4: stray bytes that may be a sign or a decimal mark drop their line instead of being removed; a room's
#    colours within [0, 1], some fractional, are scaled by 255.
# Not for per-file colour ranges nor a room's origin: S3DIS parses as before, a bump would make runs refuse their data.
PARSER_VERSION = 4


@dataclass(frozen=True)
class Entry:
    """A file (or folder) of the raw source: posix path inside it, size and a change stamp."""

    path: str
    size: int = 0
    stamp: int = 0  # mtime in ns for a folder, CRC-32 for a zip member
    is_dir: bool = False


@dataclass(frozen=True)
class Room:
    """One room: ``Area_N/<room>`` and its annotation files in instance order (see :func:`object_key`)."""

    area: str
    name: str
    path: str  # posix path of the room folder inside the source
    files: tuple[Entry, ...]
    location: str  # the source (folder or zip) as given, for the `source` attribute

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def signature(self, settings: object = None) -> str:
        """Hash of the source location, the parser version, each file's name, size and stamp, and the
        ``repr`` of the settings that change the output (the point limits)."""
        items = [PARSER_VERSION, self.location, self.path, repr(settings)]
        items += [[f.path, f.size, f.stamp] for f in self.files]
        return hashlib.sha1(json.dumps(items).encode()).hexdigest()


class Source:
    """Base of the two kinds of raw input: lists :class:`Entry` objects and reads files by path."""

    location: str
    ignored: tuple[str, ...] = ()  # non-.txt files in Annotations folders, set by rooms()
    ignored_folders: tuple[tuple[str, int], ...] = ()  # (folder inside Annotations, files in it), by rooms()
    unreadable: tuple[str, ...] = ()  # folders outside the areas that could not be listed, set by entries()

    def entries(self) -> list[Entry]:
        raise NotImplementedError(f"{type(self).__name__} must list its entries")

    def read(self, path: str) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must read files")

    def check(self, entry: Entry) -> None:
        """Refuse an annotation file before it is read (zip limits); a folder accepts every file."""

    def rooms(self) -> list[Room]:
        """All rooms, sorted by area number then room name; the error names every room without annotations."""
        areas: dict[str, str] = {}  # area -> its folder path
        rooms: dict[tuple[str, str], list[Entry]] = {}
        has_annotations: set[tuple[str, str]] = set()
        ignored: list[str] = []
        folders: dict[str, int] = {}  # folder inside an Annotations folder -> files under it (not read)
        hidden: list[str] = []  # hidden room folders (".office_1"), named if no room is left
        misnamed: set[str] = set()  # folders of rooms named like an area but not Area_N ("area_1")
        spelt: dict[tuple[str, str], str] = {}  # room -> its "annotations" folder in another case
        entries = self.entries()
        for entry in entries:
            parts = entry.path.strip("/").split("/")
            if is_junk(entry.path):
                if entry.is_dir and len(parts) >= 2 and AREA_NAME.fullmatch(parts[-2]) and parts[-1].startswith("."):
                    hidden.append(entry.path)
                continue
            check_name(self.location, entry.path)
            at = next((i for i, part in enumerate(parts) if AREA_NAME.fullmatch(part)), None)
            if at is None:
                misnamed.update(misnamed_area(parts))
                continue
            area, area_path = parts[at], "/".join(parts[:at + 1])
            if areas.get(area) != area_path:  # a new area
                add_area(self.location, areas, area, area_path)
            rest = parts[at + 1:]
            if len(rest) < 2 and not (len(rest) == 1 and entry.is_dir):
                continue  # Area_N itself or a loose file in it
            key = (area, rest[0])
            rooms.setdefault(key, [])
            if len(rest) >= 2 and rest[1] != "Annotations" and rest[1].lower() == "annotations":
                spelt[key] = rest[1]
            if len(rest) >= 2 and rest[1] == "Annotations":
                has_annotations.add(key)
                if len(rest) == 3 and not entry.is_dir:
                    if rest[2].lower().endswith(".txt"):
                        rooms[key].append(entry)
                    else:
                        ignored.append(entry.path)
                elif len(rest) >= 3:  # a folder inside Annotations (a zip may list only its files)
                    folder = "/".join(parts[:at + 4])
                    folders[folder] = folders.get(folder, 0) + (not entry.is_dir)
        if misnamed:  # its rooms would vanish from the folds without a word; named before a zip of its area
            them = agreeing(len(misnamed), "it", "them")
            raise SourceError(f"{self.location}: expected area folders named exactly Area_N (Area_1 ... Area_6), "
                              f"found rooms with Annotations in {', '.join(sorted(misnamed))}, which would be left "
                              f"out of the folds: rename {them} {', '.join(area_name(m) for m in sorted(misnamed))} "
                              f"(or remove {them} to prepare the other areas)")
        listed = archive_files([(e.path, e.is_dir) for e in entries if not is_junk(e.path)])
        in_zip = isinstance(self, ZipSource)
        check_zipped_areas(self.location, listed, areas, in_zip)
        check_packed_areas(self.location, listed, areas, in_zip)
        if not areas:
            raise SourceError(self._no_area_message(entries, likely_areas(self.location, listed, areas, in_zip,
                                                                             any_archive=True)))
        warn_likely_areas(self.location, listed, areas, in_zip)
        bare = [f"{areas[a]}/{r} ({_why_bare(f'{areas[a]}/{r}', (a, r) in has_annotations, spelt.get((a, r)))})"
                for (a, r), files in sorted(rooms.items()) if not files]
        if bare:
            raise SourceError(f"{self.location}: expected Annotations/<class>_<k>.txt files (lines 'x y z r g b') "
                              f"in every room; {counted(len(bare), 'room')} without: {', '.join(bare)}")
        empty = sorted(path for area, path in areas.items() if not any(a == area for a, _ in rooms))
        if empty:  # an extraction or copy that stopped early: the area would vanish from the folds
            hidden = [h for h in hidden if h.rsplit("/", 1)[0] in empty]
            skipped = f"; hidden folders are skipped: {', '.join(sorted(hidden))} (rename them)" if hidden else ""
            them = agreeing(len(empty), "it", "them")
            fix = "" if len(empty) == len(areas) else (f" (an unpacking or copy that stopped early?); unpack or copy "
                                                        f"{them} again, or remove {them} to prepare the other areas")
            raise SourceError(f"{self.location}: expected room folders in {', '.join(empty)}, found none"
                              f"{skipped}{fix}")
        out = []
        for (area, name), files in rooms.items():
            files.sort(key=lambda e: object_key(e.path.rsplit("/", 1)[-1]))
            check_objects(self.location, files)
            out.append(Room(area, name, f"{areas[area]}/{name}", tuple(files), self.location))
        out.sort(key=lambda r: (area_number(r.area), r.name))
        self.ignored = tuple(ignored)
        self.ignored_folders = tuple(sorted(folders.items()))
        return out

    def _no_area_message(self, entries: list[Entry], likely: list[str]) -> str:
        """Why no ``Area_N`` folder was found, and what to do: RAW is itself an area folder (give its
        parent), or its names hold backslashes (a Windows zip unpacked as is), or it holds a file that may be an
        area's archive by its name (``likely``, :func:`data_prep.names.likely_areas`), or what RAW holds."""
        start = f"{self.location}: expected Area_N folders (raw S3DIS v1.2 layout), found none"
        if AREA_NAME.fullmatch(Path(self.location).name):
            return f"{start}: RAW is itself one; give its parent folder, {Path(self.location).parent}"
        names = sorted({e.path.split("/")[0] for e in entries if not is_junk(e.path)})
        if any(AREA_NAME.search(name) and "\\" in name for name in names):
            return (f"{start}; its names hold '\\' separators (a zip made on Windows, unpacked by a tool that kept "
                    "them): give the .zip itself, or unpack it with `unzip`")
        if self.unreadable:
            return f"{start}; cannot read {', '.join(self.unreadable)}: check its permissions (ls -ld)"
        if likely:
            return f"{start}; {likely_area(self.location, likely[0], isinstance(self, ZipSource), {})}"
        return (f"{start}; it holds {shown_paths(names) or 'nothing'}: point RAW at the folder (or .zip) that holds "
                "Area_1 ... Area_6")


def _why_bare(room: str, has_annotations: bool, spelt: str | None) -> str:
    """Why the room folder ``room`` gives no annotation file, and what to do."""
    if has_annotations:
        return (f"no <class>_<k>.txt in Annotations: an unpacking that stopped early? extract the room again, "
                f"or remove {room}")
    if spelt:
        return f"its folder is spelt {spelt}: rename it {room}/Annotations"
    return f"no Annotations folder: extract the room again, or remove {room}"


class FolderSource(Source):
    """A raw tree on disk."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.location = str(self.root)

    def entries(self) -> list[Entry]:
        """Every file and folder under the root, symbolic links followed (linked areas count too); hidden
        folders are listed (a hidden room is named) but not walked. A link to a folder that holds it (a
        loop) is an error naming it, as is a folder that cannot be listed if it is RAW or in an ``Area_N``
        folder (``os.walk`` alone follows the first ~40 levels deep and skips the second silently); one
        elsewhere (``lost+found``) is skipped, and named if no area is found."""
        out: list[Entry] = []
        self.unreadable = ()
        for folder, dirs, files in os.walk(self.root, onerror=self._unreadable, followlinks=True):
            rel = Path(folder).relative_to(self.root).as_posix()
            prefix = "" if rel == "." else rel + "/"
            dirs[:] = [d for d in dirs if d != "__MACOSX"]
            out.extend(Entry(prefix + d, is_dir=True) for d in dirs)
            dirs[:] = [d for d in dirs if not d.startswith(".") and self._not_a_loop(prefix + d)]
            for name in files:
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError as err:  # a dangling link, a file gone meanwhile
                    raise SourceError(f"{os.path.join(folder, name)}: cannot be read ({err.strerror or err}); "
                                      "check that it exists and is readable") from None
                out.append(Entry(prefix + name, st.st_size, st.st_mtime_ns))
        return out

    def _unreadable(self, err: OSError) -> None:
        """``os.walk``'s ``onerror`` (see :meth:`entries`)."""
        parts = Path(err.filename).relative_to(self.root).parts
        if not parts or any(AREA_NAME.fullmatch(part) for part in parts):
            raise SourceError(f"{err.filename}: cannot be read ({err.strerror or err}); check its permissions "
                              "(ls -ld), or ask its owner") from None
        self.unreadable += (f"{err.filename} ({err.strerror or err})",)

    def _not_a_loop(self, path: str) -> bool:
        """``True`` for a folder to walk; a symbolic link to a folder that contains it (``ln -s ..``) is an
        error naming it. A link elsewhere, even to a folder walked already, is walked (linked areas)."""
        full = self.root / path
        if not full.is_symlink():
            return True
        target, here = os.path.realpath(full), os.path.realpath(full.parent)
        if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
            raise SourceError(f"{full} (a symbolic link to {os.readlink(full)}): leads back to {target}, which "
                              "holds it: a loop; remove the link")
        return True

    def read(self, path: str) -> bytes:
        try:
            return (self.root / path).read_bytes()
        except OSError as err:
            raise SourceError(f"{self.root / path}: cannot be read ({err.strerror or err}); "
                              "check that it exists and is readable") from None


class ZipSource(Source):
    """A raw tree inside a ``.zip``, read member by member without unpacking (one handle per process)."""

    def __init__(self, path: str | Path, limits: ZipLimits = ZipLimits()) -> None:
        self.path = Path(path).resolve()
        self.location = str(self.path)
        self.limits = limits
        self._zip: zipfile.ZipFile | None = None
        self._infos: dict[str, zipfile.ZipInfo] | None = None  # by the names of member_name

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_zip": None, "_infos": None}  # a worker process opens its own handle

    def _info(self, path: str) -> zipfile.ZipInfo:
        """The member of an entry's path (its name decoded as :func:`member_name` does)."""
        if self._infos is None:
            self._index(self.zip.infolist())
        return self._infos[path] if path in self._infos else self.zip.getinfo(path)

    def _index(self, infos: list[zipfile.ZipInfo]) -> None:
        self._infos = {member_name(self.location, i): i for i in infos}

    @property
    def zip(self) -> zipfile.ZipFile:
        if self._zip is None:
            try:
                self._zip = zipfile.ZipFile(self.path)
            except (zipfile.BadZipFile, OSError) as err:
                raise SourceError(f"{self.location}: not a readable zip ({err}); download it again") from None
        return self._zip

    def entries(self) -> list[Entry]:
        infos = self.zip.infolist()
        seen: set[str] = set()
        for info in infos:
            check_member(self.location, info.filename)
            name = member_name(self.location, info)  # two raw names may decode to one (UTF-8 flag on one only)
            if name in seen and name:  # "" is the zip's top folder ("./"), which may come twice
                raise SourceError(f"{self.location}: member {name!r} is in the archive twice; expected "
                                  "each file once (re-create the zip)")
            seen.add(name)
            link = stat.S_ISLNK(info.external_attr >> 16)  # the Unix mode in the high bits
            if link and not is_junk(name) and any(AREA_NAME.fullmatch(p) for p in name.split("/")):
                self._refuse_link(name, info)
        self._index(infos)
        return [Entry(name.rstrip("/"), i.file_size, i.CRC, name.endswith("/")) for name, i in self._infos.items()
                if name]  # "./": the zip's top folder itself

    def _refuse_link(self, name: str, info: zipfile.ZipInfo) -> None:
        """A link stored as a link (``zip -y``, macOS): parsed as a file of one line, its object was lost."""
        with self.zip.open(info) as f:   # its data is the target's path: at most PATH_MAX (4096 bytes) of it read
            target = repr_bounded(f.read(4096).decode("utf-8", "backslashreplace"), 200)
        raise SourceError(f"{self.location}: member {name.rstrip('/')!r} is a symbolic link to {target}, which "
                          "prepare does not follow inside a zip; zip the tree without -y (zip -r follows links) or "
                          "prepare the extracted folder")

    def check(self, entry: Entry) -> None:
        """Refuse a member beyond :class:`ZipLimits` before reading it."""
        info = self._info(entry.path)
        if info.file_size > self.limits.max_member_bytes:
            raise SourceError(f"{self.location}: member {entry.path!r} unpacks to {info.file_size:,} bytes, more "
                              f"than --zip-max-member {self.limits.max_member_bytes:,}; raise the limit if it is real")
        ratio = info.file_size / max(info.compress_size, 1)
        if ratio > self.limits.max_ratio:
            raise SourceError(f"{self.location}: member {entry.path!r} is compressed {ratio:.0f}x, more than "
                              f"--zip-max-ratio {self.limits.max_ratio:g} (a zip bomb?); raise the limit if it is real")

    def read(self, path: str) -> bytes:
        info = self._info(path)
        try:
            with self.zip.open(info) as f:
                data = f.read(self.limits.max_member_bytes + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as err:
            raise SourceError(f"{self.location}: member {path!r} is corrupt ({err}); download the zip "
                              "again") from None
        if len(data) > self.limits.max_member_bytes:  # the header under-stated the size
            raise SourceError(f"{self.location}: member {path!r} unpacks to more than --zip-max-member "
                              f"{self.limits.max_member_bytes:,} bytes; raise the limit if it is real")
        return data


def open_source(raw: str | Path, zip_limits: ZipLimits = ZipLimits()) -> Source:
    """A :class:`FolderSource` for a folder, a :class:`ZipSource` for a zip file."""
    raw = Path(raw)
    if raw.is_dir():
        return FolderSource(raw)
    if raw.is_file() and zipfile.is_zipfile(raw):
        return ZipSource(raw, zip_limits)
    if raw.is_file():
        with open(raw, "rb") as f:
            head = f.read(4)
        if head == b"PK\x03\x04":  # a zip's first member, but no end record (the directory is at the end)
            raise SourceError(f"{raw}: a zip cut short ({raw.stat().st_size:,} bytes, no end record): an incomplete "
                              "download or copy; compare its size with the original's and download or copy it again")
        if raw.suffix.lower() == ".zip":
            found = f"it starts with {head!r}, a zip with b'PK\\x03\\x04'" if head else "it is empty"
            raise SourceError(f"{raw}: named .zip but not a zip ({found}): an error page or a failed download saved "
                              "in its place?; download it again")
        if line := raw_archive(raw):  # a tar, 7z or rar: how to unpack it
            raise SourceError(line)
    what = "a file that is not a zip" if raw.exists() else "nothing"
    raise SourceError(f"expected RAW to be an S3DIS folder or .zip, found {what} at {raw}")
