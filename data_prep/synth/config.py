"""What ``pointgeope synth`` generates: :class:`SynthConfig` and the ``--size`` presets (stdlib only, so
that ``pointgeope --help`` imports nothing heavy)."""
from __future__ import annotations

from dataclasses import dataclass

MAX_ROOMS_PER_AREA = 1000
# Points per m^2: one a square micrometre, a million times real S3DIS's; above ~1e306 a room's point count is
# no finite number, and the memory estimate refused far lower densities anyway.
MAX_DENSITY = 1e12


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
        if not 1 <= self.rooms_per_area <= MAX_ROOMS_PER_AREA:
            raise ValueError(f"expected --rooms-per-area from 1 to {MAX_ROOMS_PER_AREA}, got {self.rooms_per_area}: "
                             "the bound is there because the rooms are planned before any is written, and an "
                             "S3DIS area holds 44 to 68 of them")
        if not 0 < self.density <= MAX_DENSITY:
            raise ValueError(f"expected --density, a positive number of points per m^2 up to {MAX_DENSITY:g} (one a "
                             f"square micrometre; real S3DIS has 5,000-10,000), got {self.density}")
        if not 0 <= self.noise < 0.1:
            raise ValueError(f"expected --noise >= 0 and < 0.1 m (a tenth of a metre is no scanner's noise), got "
                             f"{self.noise}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"expected --seed from 0 to 2^63 - 1 (numpy seeds are non-negative), got {self.seed}")
        if not 1 <= self.min_points <= 10**6:
            raise ValueError("expected min_points from 1 to 10^6 (points of the smallest object), "
                             f"got {self.min_points}")


# tiny: tests (~3-6k points a room, well under a second); demo: the CPU demo (~35-85k a room);
# bench: scanner-like density (~1M points a room).
PRESETS: dict[str, SynthConfig] = {
    "tiny": SynthConfig(rooms_per_area=2, density=25.0),
    "demo": SynthConfig(rooms_per_area=4, density=360.0),
    "bench": SynthConfig(rooms_per_area=2, density=7000.0),
}
