"""S3DIS training samples of Pointcept's PTv3 recipe (``data.augment: pointcept_ptv3``).

Sample ``index`` of epoch ``e`` (``S3DISTrainPTv3``), from room ``index % num_rooms``, with the generator
``sample_rng(seed, e, index)`` as in :class:`~pointgeope.data.dataset.S3DISTrain`:

1. the room (``room_sample``: colour 0..255; with ``normal`` also its ``"normal"``, float32);
2. ``ptv3_train_transform`` (:mod:`pointgeope.data.ptv3_transforms`: centre, augment, grid-sample at
   0.02 m with ``grid_coord``, the 60 % sphere crop, at most 204,800 points, centre x/y, colour / 255);
3. :func:`ptv3_data`::

       Points(pos (N, 3) float32, x (N, 6) float32 = [rgb | normal], y (N,) int64,
            grid_coord (N, 3) int64, mix_draw (1,) float32)

   (``x = [rgb | xyz]`` with ``data.normal: false``, :mod:`pointgeope.data.features`).

``mix_draw ~ U(0, 1)`` is drawn from the sample's generator after the pipeline: the batch-level Mix3D
(:mod:`pointgeope.data.mix3d`) mixes a batch when its first sample's draw is below ``mix_prob``, so the
decision is as reproducible as the samples (a resumed run mixes the same batches).

With ``normal`` (``data.normal: true``, the recipe's) the room's unit normals (prepare's, ``/<room>/normal``)
ride along as the sample's ``"normal"``: the rotations turn them and the flip flips them as they do ``coord``,
every selection of points keeps each kept point's own, and ``x = [rgb | normal]`` as Pointcept's S3DIS config
(``feat_keys=("color", "normal")``). Without it ``x = [rgb | xyz]``, the layout of runs recorded before the key.
A room file without normals (prepared by an older pointgeope) is refused when the samples are built, in one line
(:func:`check_normals`): ``pointgeope prepare`` into the same folder adds them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pointgeope.data.dataset import S3DISTrain, room_sample, sample_rng
from pointgeope.data.features import feature_channels, feature_names
from pointgeope.data.points import Points
from pointgeope.data.ptv3_transforms import ptv3_train_transform
from pointgeope.data.rooms import FIELDS, RoomRef, RoomStore
from pointgeope.data.sample_check import ROW, check_sample
from pointgeope.data.transforms import Sample, Transform
from pointgeope.h5 import NORMAL, SchemaError, open_area
from pointgeope.plural import counted


def ptv3_data(sample: Sample, color: bool = True, mix_draw: float | None = None, normal: bool = False) -> Points:
    """``Points(pos, x, y, grid_coord)`` of a PTv3 block whose colour is already 0..1 (``NormalizeColor``) and
    which carries ``grid_coord``; with ``mix_draw`` also that. ``x`` is ``[rgb | xyz]``, with ``normal``
    ``[rgb | normal]`` (the sample's ``"normal"``), ``[xyz]`` or ``[normal]`` without ``color``."""
    if "grid_coord" not in sample:
        raise KeyError("expected a 'grid_coord' array in the sample (apply ptv3_transforms.GridSample), got keys "
                       + str(sorted(sample)))
    if normal and NORMAL not in sample:
        raise KeyError(f"expected a {NORMAL!r} array in the sample (normal=True), got keys {sorted(sample)}")
    coord = np.asarray(sample["coord"], dtype=np.float32)
    geometry = np.asarray(sample[NORMAL], dtype=np.float32) if normal else coord
    parts = ([np.asarray(sample["color"], dtype=np.float32)] if color else []) + [geometry]
    x = np.concatenate(parts, axis=1) if len(parts) > 1 else geometry.copy()
    data = Points(pos=torch.from_numpy(coord.copy()), x=torch.from_numpy(x),
                y=torch.from_numpy(np.asarray(sample["label"], dtype=np.int64).copy()),
                grid_coord=torch.from_numpy(np.asarray(sample["grid_coord"], dtype=np.int64).copy()))
    if mix_draw is not None:
        data.mix_draw = torch.tensor([mix_draw], dtype=torch.float32)
    return data


class S3DISTrainPTv3(S3DISTrain):
    """PTv3's training samples from the rooms of ``areas`` (module docstring).

    Args:
        root: folder of the prepared ``Area_N.h5`` files, as :class:`~pointgeope.data.dataset.S3DISTrain`'s.
        areas: area names, e.g. ``Fold.train``.
        grid_size: PTv3's voxel edge (0.02 m).
        crop_rate: the fraction of a sample's voxels kept by the random sphere crop (0.6; None: no crop).
        point_max: most points in one sample (204,800; None: no limit).
        loop: passes over every room per epoch.
        transform: the pipeline, ``None`` for ``ptv3_train_transform(grid_size, crop_rate, point_max)``;
            it must end with 0..1 colours and ``grid_coord``.
        seed: base seed, as :class:`~pointgeope.data.dataset.S3DISTrain`'s.
        color: ``False`` leaves the colour out of the features (``x = [pos]``, geometry only).
        normal: ``x = [rgb | normal]`` from the rooms' normals (``data.normal``) in place of ``[rgb | xyz]``;
            every room must have them (:func:`check_normals`, before any sample).
        cache: keep the rooms each worker has read in memory.
    """

    def __init__(self, root: str | Path, areas: list[str] | tuple[str, ...], *, grid_size: float = 0.02,
                 crop_rate: float | None = 0.6, point_max: int | None = 204_800, loop: int = 30,
                 transform: Transform | None = None, seed: int = 0, color: bool = True, normal: bool = False,
                 cache: bool = False):
        pipeline = ptv3_train_transform(grid_size, crop_rate, point_max) if transform is None else transform
        super().__init__(root, areas, grid_size=grid_size, voxel_max=point_max or 2**62, loop=loop,
                         transform=pipeline, seed=seed, height=False, color=color, cache=cache)
        self.color, self.normal = color, normal
        if normal:
            check_normals(self.rooms)
            self.store = RoomStore(cache=cache, fields=(*FIELDS, NORMAL))

    @property
    def in_channels(self) -> int:
        return feature_channels(feature_names(self.color, self.normal))

    checks_samples = True           # __getitem__ checks each sample's x: the loader does not again (sample_check)

    def __getitem__(self, index: int) -> Points:
        sample, rng = self.sample(index)
        data = ptv3_data(sample, self.color, mix_draw=float(rng.random()), normal=self.normal)
        check_sample(self, index, data.x)
        return data

    def sample(self, index: int, rows: bool = False) -> tuple[Sample, np.random.Generator]:
        """Sample ``index`` of the current epoch through the pipeline (steps 1-2), and its generator, from which
        ``mix_draw`` is drawn next; with ``rows`` each point's row in its room too (``"row"``, as
        :meth:`S3DISTrain.sample`)."""
        if not 0 <= index < len(self):
            raise IndexError(f"expected an index in [0, {len(self)}), got {index}")
        rng = sample_rng(self.seed, self.epoch, index)
        room = self.store.read(self.rooms[index % len(self.rooms)])
        sample = room_sample(room["coord"], room["color"], room["label"])
        if self.normal:
            sample[NORMAL] = np.asarray(room[NORMAL], dtype=np.float32)
        if rows:
            sample[ROW] = np.arange(sample["coord"].shape[0])
        return self.transform(sample, rng), rng

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(areas={list(self.areas)}, rooms={len(self.rooms)}, loop={self.loop}, "
                f"seed={self.seed}, normal={self.normal}, transform={self.transform!r})")


def check_normals(rooms: list[RoomRef]) -> None:
    """Refuse, in one line, rooms whose area file holds no ``normal`` for them (a file prepared before
    prepare estimated normals): a :class:`~pointgeope.h5.SchemaError` naming the file, the room and the fix."""
    for path in dict.fromkeys(room.path for room in rooms):
        with open_area(path) as f:
            missing = [room.name for room in rooms if room.path == path and NORMAL not in f[room.name]]
        if missing:
            more = f" (and {counted(len(missing) - 1, 'more room')})" if len(missing) > 1 else ""
            raise SchemaError(f"{path}: room {missing[0]!r}{more} has no point normals (prepared by an older "
                              "pointgeope), but data.normal=true feeds PTv3 [rgb | normal]; run `pointgeope prepare` "
                              "again into the same folder (it adds them), or set data.normal=false")
