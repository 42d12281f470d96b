"""S3DIS training blocks (Point Transformer's recipe) and the builder of a room's sample.

Training sample ``index`` (``S3DISTrain``), from room ``index % num_rooms``, with its own generator
``np.random.default_rng(np.random.SeedSequence([seed, epoch, index]))`` (no global random state, so a
resumed run sees exactly the same samples; call ``set_epoch`` before each epoch):

1. read the room (``RoomStore``: lazily opened HDF5, fork-safe), shift ``coord`` so its minimum is 0,
   colour to float 0..255; with ``height=True`` add the room-normalised height;
2. ``transform(sample, rng)`` (default ``s3dis_train_transform()``: the authors' scale and colour set);
3. grid sampling at ``grid_size`` (0.04 m): one random point per occupied voxel (``voxel_sample``);
4. if more than ``voxel_max`` (80,000) points remain, keep the ``voxel_max`` nearest to a random one;
5. shuffle the points (PTv1), shift ``coord`` so the block's minimum is 0 again;
6. ``Points(pos (N,3) float32, x (N,6|7) float32 = [rgb/255 | pos | (height)], y (N,) int64)``
   (``color=False``: ``x = [pos | (height)]``, 3 or 4 channels), ``x`` checked finite
   (:mod:`pointgeope.data.sample_check`: a refusal names the room and its point).

``len`` is ``num_rooms * loop``: one epoch passes ``loop`` times over every room.

``room_sample`` is the one builder of a room's sample: training blocks start from it, and so does the
test-time path (``pointgeope.engine.evaluate``, which cuts it into ``pointgeope.data.fragments``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from pointgeope.data.points import Points
from pointgeope.data.rooms import RoomRef, RoomStore, list_area_rooms
from pointgeope.data.sample_check import ROW, check_sample
from pointgeope.data.transforms import (
    AddNormalizedHeight,
    Sample,
    ToData,
    Transform,
    s3dis_train_transform,
    shift_to_origin,
    take_points,
)
from pointgeope.data.voxelize import column_min, random_crop, voxel_sample


def sample_rng(*entropy: int) -> np.random.Generator:
    """The generator of one sample, e.g. ``sample_rng(seed, epoch, index)``."""
    return np.random.default_rng(np.random.SeedSequence([int(e) for e in entropy]))


def room_sample(coord: np.ndarray, color: np.ndarray, label: np.ndarray | None = None,
                height: bool = False) -> Sample:
    """A room's arrays as a pipeline sample: ``coord`` float32 shifted to a minimum of 0, ``color``
    float32 0..255, ``label`` int64 (zeros when ``None``, e.g. at test time), plus the normalised
    ``height`` of the whole room when ``height``."""
    coord = np.asarray(coord, dtype=np.float32)
    n = coord.shape[0]
    sample = {"coord": coord - column_min(coord),
              "color": np.asarray(color).astype(np.float32),
              "label": np.zeros(n, dtype=np.int64) if label is None else np.asarray(label).astype(np.int64)}
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

    checks_samples = True           # __getitem__ checks each sample's x: the loader does not again (sample_check)

    def __getitem__(self, index: int) -> Points:
        data = self.to_data(self.sample(index)[0])
        check_sample(self, index, data.x)
        return data

    def sample(self, index: int, rows: bool = False) -> tuple[Sample, np.random.Generator]:
        """Sample ``index`` of the current epoch before its ``Points`` (steps 1-5 of the module docstring), and
        its generator after them; with ``rows`` it also carries each point's row in its room (``"row"``,
        :mod:`pointgeope.data.sample_check`, which names a refused point with it)."""
        if not 0 <= index < len(self):
            raise IndexError(f"expected an index in [0, {len(self)}), got {index}")
        rng = sample_rng(self.seed, self.epoch, index)
        room = self.store.read(self.rooms[index % len(self.rooms)])
        sample = room_sample(room["coord"], room["color"], room["label"], self.height)
        if rows:
            sample[ROW] = np.arange(sample["coord"].shape[0])
        sample = self.transform(sample, rng)
        keep = voxel_sample(sample["coord"], self.grid_size, rng)
        keep = keep[random_crop(np.take(sample["coord"], keep, axis=0), self.voxel_max, rng)]
        keep = keep[rng.permutation(keep.shape[0])]
        return shift_to_origin(take_points(sample, keep)), rng

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(areas={list(self.areas)}, rooms={len(self.rooms)}, loop={self.loop}, "
                f"grid_size={self.grid_size}, voxel_max={self.voxel_max}, height={self.height}, "
                f"seed={self.seed}, transform={self.transform!r})")
