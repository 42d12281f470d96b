"""What prepare accepts, as plain settings (``--max-extent``, ``--outliers``, ``--zip-max-member``,
``--zip-max-ratio``): the points of a room (``data_prep/room.py``) and the members of a zip
(``data_prep/source.py``). Stdlib only, so that ``pointgeope --help`` imports nothing heavy."""
from __future__ import annotations

from dataclasses import dataclass

from pointgeope.constants import MAX_ROOM_EXTENT


@dataclass(frozen=True)
class PointLimits:
    """What counts as a valid point: within ``max_extent`` metres of the room's median on each axis.
    ``outliers``: ``"drop"`` the points beyond (reported), or ``"refuse"`` the whole room."""

    max_extent: float = MAX_ROOM_EXTENT
    outliers: str = "drop"


@dataclass(frozen=True)
class ZipLimits:
    """The largest annotation member read from a zip and its largest compression ratio (S3DIS's largest
    annotation file is a few hundred MB, compressed about 3x)."""

    max_member_bytes: int = 8 * 2**30
    max_ratio: float = 100.0
