"""Prepare raw S3DIS (a folder or a .zip of Stanford3dDataset_v1.2[_Aligned_Version]) as OUT/Area_N.h5.

Writes OUT/Area_N.h5 (one group per room, with a unit normal per point: ``pointgeope/data/normals.py``;
rooms an older version stored without normals are parsed again), OUT/manifest.json (points and class
histogram per room, the checksum of each area file, the rooms refused) and OUT/folds.json (fold k tests on
Area_k), then a summary per area. What is written is validated (see ``data_prep/room.py``): coordinates finite in
float32 and within --max-extent of the room, no empty room. Reruns skip rooms already prepared from the
same files, after checking each area file against its checksum; a killed run, rerun, finishes with the
same files as an uninterrupted one (SIGTERM stops the workers too). One prepare at a time per OUT
(``OUT/.lock``), and none while a train or evaluate reads OUT. An area whose every room is refused now has
its previous file moved aside to OUT/Area_N.h5.refused.
"""
from __future__ import annotations

import argparse
import math
import os

from data_prep.limits import PointLimits, ZipLimits
from pointgeope.commands import path_arg
from pointgeope.constants import MAX_ROOM_EXTENT
from pointgeope.errors import UserError

HELP = "raw S3DIS (folder or .zip) -> OUT/Area_N.h5, manifest.json, folds.json"


def _size_arg(text: str) -> int:
    """``"8G"``, ``"500M"``, ``"1000000"`` -> bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    size = text.strip().upper().removesuffix("B")
    try:
        return int(float(size[:-1]) * units[size[-1]]) if size[-1:] in units else int(size)
    except (ValueError, OverflowError):  # "nanG"; "infG" overflows int()
        raise argparse.ArgumentTypeError(f"expected a size such as 8G or 500M, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("raw", type=path_arg, help="raw S3DIS folder or .zip (Area_N/<room>/Annotations/*.txt)")
    parser.add_argument("out", type=path_arg, help="output folder for Area_N.h5, manifest.json, folds.json")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="parallel worker processes (default: the CPU count, at most 8)")
    parser.add_argument("--force", action="store_true", help="reparse every room even if it is up to date")
    parser.add_argument("--max-extent", type=float, default=MAX_ROOM_EXTENT, metavar="METRES",
                        help=f"largest room; points farther from the room's median are outliers "
                             f"(default {MAX_ROOM_EXTENT:g})")
    parser.add_argument("--outliers", choices=("drop", "refuse"), default="drop",
                        help="drop outlying points (reported by file and line) or refuse their room (default drop)")
    parser.add_argument("--zip-max-member", type=_size_arg, default=ZipLimits.max_member_bytes, metavar="SIZE",
                        help="largest annotation file read from a zip (default 8G)")
    parser.add_argument("--zip-max-ratio", type=float, default=ZipLimits.max_ratio, metavar="N",
                        help=f"largest compression ratio of a zip member (default {ZipLimits.max_ratio:g})")


def main(args: argparse.Namespace) -> int:
    from data_prep.prepare import PrepareConfig, prepare

    if args.jobs < 1:
        raise UserError(f"expected --jobs >= 1, got {args.jobs}")
    if not args.max_extent > 0:
        raise UserError(f"expected --max-extent > 0 metres, got {args.max_extent}")
    if not args.zip_max_member > 0:     # 0 or -1 refused every member, when its zip was read
        raise UserError(f"expected --zip-max-member > 0 bytes (a size such as 8G or 500M), got {args.zip_max_member}")
    if not (math.isfinite(args.zip_max_ratio) and args.zip_max_ratio > 0):  # nan turned the zip-bomb guard off
        raise UserError(f"expected --zip-max-ratio > 0 (a finite compression ratio), got {args.zip_max_ratio}")
    prepare(PrepareConfig(args.raw, args.out, args.jobs, args.force,
                          limits=PointLimits(args.max_extent, args.outliers),
                          zip_limits=ZipLimits(args.zip_max_member, args.zip_max_ratio)))
    return 0
