"""S3DIS datasets: training blocks (Point Transformer's recipe) and the test-time fragments of an area.

Training sample ``index`` (``S3DISTrain``), from room ``index % num_rooms``, with its own generator
``np.random.default_rng(np.random.SeedSequence([seed, epoch, index]))`` (no global random state, so a
resumed run sees exactly the same samples; call ``set_epoch`` before each epoch):

1. read the room (``RoomStore``: lazily opened HDF5, fork-safe), shift ``coord`` so its minimum is 0,
   colour to float 0..255; with ``height=True`` add the room-normalised height;
2. ``transform(sample, rng)`` (default ``s3dis_train_transform()``: scale and colour augmentations);
3. grid sampling at ``grid_size`` (0.04 m): one random point per occupied voxel (``voxel_sample``);
4. if more than ``voxel_max`` (80,000) points remain, keep the ``voxel_max`` nearest to a random one;
5. shuffle the points (PTv1), shift ``coord`` so the block's minimum is 0 again;
6. ``Data(pos (N,3) float32, x (N,6|7) float32 = [rgb/255 | pos | (height)], y (N,) int64)``
   (``color=False``: ``x = [pos | (height)]``, 3 or 4 channels).

``len`` is ``num_rooms * loop``: one epoch passes ``loop`` times over every room.

Test time (``S3DISTestArea``): item ``i`` is a ``TestRoom`` whose ``pieces`` are ``(Data, index)``
pairs: the voxel fragments of the room (``fragments.voxel_fragments``, each one point per voxel),
each split into crops of at most ``voxel_max`` points (``fragments.split_into_crops``), each shifted
to minimum 0 like a training block; ``index`` (int64) maps the piece's points into the room, and the
pieces together cover every point of the room at least once.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset
from torch_geometric.data import Data

from pointgeope.data.fragments import split_into_crops, voxel_fragments
from pointgeope.data.rooms import RoomRef, RoomStore, list_area_rooms
from pointgeope.data.transforms import AddNormalizedHeight, Sample, ToData, Transform, s3dis_train_transform
from pointgeope.data.voxelize import column_min, random_crop, voxel_sample


def sample_rng(*entropy: int) -> np.random.Generator:
    """The generator of one sample, e.g. ``sample_rng(seed, epoch, index)``."""
    return np.random.default_rng(np.random.SeedSequence([int(e) for e in entropy]))


def _take(sample: Sample, index: np.ndarray) -> Sample:
    # np.take(axis=0) gathers (N, 3) rows about 4x faster than value[index].
    return {key: np.take(value, index, axis=0) for key, value in sample.items()}


def _shift_to_origin(sample: Sample) -> Sample:
    out = dict(sample)
    out["coord"] = sample["coord"] - column_min(sample["coord"])
    return out


def room_pieces(sample: Sample, grid_size: float, voxel_max: int | None,
                rng: np.random.Generator) -> Iterator[tuple[np.ndarray, Sample]]:
    """Test-time pieces of a room: ``(index into the room (int64), piece shifted to minimum 0)``.

    The voxel fragments of the room (each point of each voxel in exactly one fragment), each split into
    crops of at most ``voxel_max`` points (``None``: no split); together they cover every point at least
    once. Lazy, so a caller may draw from ``rng`` between pieces (``S3DISTestArea``'s transform does).
    """
    for fragment in voxel_fragments(sample["coord"], grid_size, rng):
        crops = ([np.arange(fragment.shape[0], dtype=np.int64)] if voxel_max is None
                 else split_into_crops(np.take(sample["coord"], fragment, axis=0), voxel_max, rng))
        for crop in crops:
            index = fragment[crop]
            yield index, _shift_to_origin(_take(sample, index))


def _room_sample(room: dict[str, np.ndarray], height: bool) -> Sample:
    """Room arrays -> pipeline sample: coord shifted to minimum 0, colour float32 0..255, label int64."""
    coord = np.asarray(room["coord"], dtype=np.float32)
    sample = {"coord": coord - column_min(coord),
              "color": room["color"].astype(np.float32),
              "label": room["label"].astype(np.int64)}
    return AddNormalizedHeight()(sample) if height else sample


class S3DISTrain(Dataset):
    """Training blocks from the rooms of ``areas`` under ``root`` (see the module docstring).

    Args:
        root: folder of the prepared ``Area_N.h5`` files.
        areas: area names, e.g. ``Fold.train``.
        grid_size: voxel edge for grid sampling, metres.
        voxel_max: most points in one block (crop beyond).
        loop: passes over every room per epoch.
        transform: augmentation ``t(sample, rng) -> sample``; ``None`` for the S3DIS default, pass
            ``Compose([])`` for none.
        seed: base seed; sample ``index`` of epoch ``e`` draws from ``SeedSequence([seed, e, index])``.
        height: add the normalised height as the last feature channel.
        color: ``False`` leaves the colour out of the features (``x = [pos]``, geometry only).
        cache: keep the rooms each worker has read in memory.
    """

    def __init__(self, root: str | Path, areas: list[str] | tuple[str, ...], *, grid_size: float = 0.04,
                 voxel_max: int = 80_000, loop: int = 30, transform: Transform | None = None,
                 seed: int = 0, height: bool = False, color: bool = True, cache: bool = False):
        if loop < 1:
            raise ValueError(f"expected loop >= 1, got {loop}")
        if voxel_max < 1:
            raise ValueError(f"expected voxel_max >= 1, got {voxel_max}")
        self.rooms: list[RoomRef] = list_area_rooms(root, areas)
        if not self.rooms:
            raise ValueError(f"expected rooms in areas {list(areas)} under {root}, found none")
        self.areas = tuple(areas)
        self.grid_size = grid_size
        self.voxel_max = voxel_max
        self.loop = loop
        self.transform = s3dis_train_transform() if transform is None else transform
        self.seed = seed
        self.height = height
        self.to_data = ToData(height=height, color=color)
        self.store = RoomStore(cache=cache)
        self.epoch = 0

    @property
    def in_channels(self) -> int:
        return self.to_data.in_channels

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose samples ``__getitem__`` returns (before creating the loader iterator)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.rooms) * self.loop

    def __getitem__(self, index: int) -> Data:
        if not 0 <= index < len(self):
            raise IndexError(f"expected an index in [0, {len(self)}), got {index}")
        rng = sample_rng(self.seed, self.epoch, index)
        sample = _room_sample(self.store.read(self.rooms[index % len(self.rooms)]), self.height)
        sample = self.transform(sample, rng)
        keep = voxel_sample(sample["coord"], self.grid_size, rng)
        keep = keep[random_crop(np.take(sample["coord"], keep, axis=0), self.voxel_max, rng)]
        keep = keep[rng.permutation(keep.shape[0])]
        return self.to_data(_shift_to_origin(_take(sample, keep)))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(areas={list(self.areas)}, rooms={len(self.rooms)}, loop={self.loop}, "
                f"grid_size={self.grid_size}, voxel_max={self.voxel_max}, height={self.height}, "
                f"seed={self.seed}, transform={self.transform!r})")


@dataclass
class TestRoom:
    """One room at test time: its ``pieces`` cover every point (see the module docstring)."""

    area: str
    name: str
    num_points: int
    label: np.ndarray                          # (num_points,) uint8, ground truth
    pieces: list[tuple[Data, np.ndarray]]      # (block, int64 indices into the room)


class S3DISTestArea(Dataset):
    """The rooms of one test area, each cut into voxel fragments and crops (see the module docstring).

    Args:
        root: folder of the prepared ``Area_N.h5`` files.
        area: the area to test, e.g. ``"Area_5"``.
        grid_size, voxel_max, height: as for ``S3DISTrain`` (use the same values).
        seed: room ``i`` shuffles its voxels with ``SeedSequence([seed, i])``.
        transform: optional test-time transform of each piece (e.g. a fixed ``RandomScale``).
    """

    def __init__(self, root: str | Path, area: str, *, grid_size: float = 0.04, voxel_max: int = 80_000,
                 seed: int = 0, height: bool = False, transform: Transform | None = None):
        self.rooms: list[RoomRef] = list_area_rooms(root, [area])
        self.area = area
        self.grid_size = grid_size
        self.voxel_max = voxel_max
        self.seed = seed
        self.height = height
        self.transform = transform
        self.to_data = ToData(height=height)
        self.store = RoomStore(cache=False)

    def __len__(self) -> int:
        return len(self.rooms)

    def __getitem__(self, index: int) -> TestRoom:
        if not 0 <= index < len(self):
            raise IndexError(f"expected an index in [0, {len(self)}), got {index}")
        ref = self.rooms[index]
        room = self.store.read(ref)
        sample = _room_sample(room, self.height)
        rng = sample_rng(self.seed, index)
        pieces = []
        for index_in_room, piece in room_pieces(sample, self.grid_size, self.voxel_max, rng):
            if self.transform is not None:
                piece = _shift_to_origin(self.transform(piece, rng))
            pieces.append((self.to_data(piece), index_in_room))
        return TestRoom(ref.area, ref.name, ref.num_points, room["label"], pieces)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(area={self.area!r}, rooms={len(self.rooms)}, "
                f"grid_size={self.grid_size}, voxel_max={self.voxel_max}, height={self.height})")
