"""Generate synthetic S3DIS rooms in the raw layout of Stanford3dDataset_v1.2_Aligned_Version.

OUT/Area_N/<room>_<k>/<room>_<k>.txt holds every point of a room, OUT/Area_N/<room>_<k>/Annotations/
<class>_<i>.txt the points of one object, lines "x y z r g b" ("%.3f %.3f %.3f %d %d %d"). Rooms are
offices, conference rooms and hallways with all 13 classes placed as in real buildings, sampled at a
scanner-like density with a few millimetres of noise. Some defects of the real files are planted on
purpose (--defects, on by default) and listed with their file and line in OUT/synth_manifest.json,
beside the rooms and their per-class point counts. The same seed gives the same bytes; an interrupted
run resumes where it stopped.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from pointgeope.errors import UserError


@dataclass(frozen=True)
class SynthConfig:
    """What to generate.

    Args:
        areas: number of areas, ``Area_1 .. Area_<areas>`` (1..6).
        rooms_per_area: rooms in each area; the first is always an office.
        density: points per m^2 of surface (real S3DIS is roughly 5,000-10,000).
        noise: standard deviation of the gaussian noise on each coordinate, metres.
        min_points: fewest points of any object, so that small ones survive low densities.
        seed: the seed of every random draw.
        defects: plant the real dataset's defects (control byte, stairs, CRLF, trailing spaces).
    """

    areas: int = 6
    rooms_per_area: int = 4
    density: float = 360.0
    noise: float = 0.003
    min_points: int = 12
    seed: int = 0
    defects: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.areas <= 6:
            raise ValueError(f"expected 1 to 6 areas (S3DIS has 6), got {self.areas}")
        if self.rooms_per_area < 1:
            raise ValueError(f"expected at least one room per area, got {self.rooms_per_area}")
        if not self.density > 0:
            raise ValueError(f"expected a positive density in points per m^2, got {self.density}")
        if not 0 <= self.noise < 0.1:
            raise ValueError(f"expected a noise of 0 to 0.1 m, got {self.noise}")
        if self.min_points < 1:
            raise ValueError(f"expected min_points >= 1, got {self.min_points}")


# tiny: tests (~3-6k points a room, well under a second); demo: the CPU demo (~35-85k a room);
# bench: scanner-like density (~1M points a room).
PRESETS: dict[str, SynthConfig] = {
    "tiny": SynthConfig(rooms_per_area=2, density=25.0),
    "demo": SynthConfig(rooms_per_area=4, density=360.0),
    "bench": SynthConfig(rooms_per_area=2, density=7000.0),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pointgeope synth``: OUT, a ``--size`` preset and the fields that override it."""
    parser.add_argument("out", type=Path, metavar="OUT", help="folder to write the Area_N folders into")
    parser.add_argument("--size", choices=sorted(PRESETS), default="demo",
                        help="preset of areas, rooms and density (default: demo); the options below override it")
    parser.add_argument("--areas", type=int, help="number of areas (1-6)")
    parser.add_argument("--rooms-per-area", type=int, help="rooms in each area")
    parser.add_argument("--density", type=float, help="points per m^2 of surface")
    parser.add_argument("--noise", type=float, help="gaussian noise on the coordinates, metres")
    parser.add_argument("--seed", type=int, help="random seed (default 0)")
    parser.add_argument("--defects", action=argparse.BooleanOptionalAction, default=None,
                        help="plant the real dataset's defects (default: on)")


def config_from_args(args: argparse.Namespace) -> SynthConfig:
    """The preset named by ``--size`` with every option given on the command line put over it."""
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(SynthConfig)
                 if getattr(args, f.name, None) is not None}
    return dataclasses.replace(PRESETS[args.size], **overrides)


def main(args: argparse.Namespace) -> int:
    """Generate (or finish) OUT, then print the planted defects and the counts; bad settings are a UserError."""
    from data_prep.synth.dataset import MANIFEST, generate

    try:
        config = config_from_args(args)
        start = time.perf_counter()
        manifest = generate(args.out, config)
    except ValueError as err:  # bad settings: a user error (one line, exit code 2)
        raise UserError(str(err)) from None
    totals = manifest["totals"]
    print(f"planted {len(manifest['defects'])} defects:")
    for defect in manifest["defects"]:
        where = f"line {defect['line']}" if defect.get("line") else "every line" if defect["kind"] != "stairs" \
            else f"{defect['points']} points, maps to {defect['maps_to']}"
        print(f"  {defect['kind']:<16} {defect['file']}  ({where})")
    print(f"{totals['rooms']} rooms, {totals['points']:,} points in {args.out} "
          f"({time.perf_counter() - start:.1f} s); manifest {args.out / MANIFEST}")
    print("points per class: " + ", ".join(f"{k} {v:,}" for k, v in totals["class_counts"].items()))
    return 0
