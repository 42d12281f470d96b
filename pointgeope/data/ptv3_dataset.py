"""S3DIS training samples of Pointcept's PTv3 recipe (``data.augment: pointcept_ptv3``).

Sample ``index`` of epoch ``e`` (``S3DISTrainPTv3``), from room ``index % num_rooms``, with the generator
``sample_rng(seed, e, index)`` as in :class:`~pointgeope.data.dataset.S3DISTrain`:

1. the room (``room_sample``: colour 0..255);
2. ``ptv3_train_transform`` (:mod:`pointgeope.data.ptv3_transforms`: centre, augment, grid-sample at
   0.02 m with ``grid_coord``, the 60 % sphere crop, at most 204,800 points, centre x/y, colour / 255);
3. :func:`ptv3_data`::

       Data(pos (N, 3) float32, x (N, 6) float32 = [rgb | xyz], y (N,) int64,
            grid_coord (N, 3) int64, mix_draw (1,) float32)

``mix_draw ~ U(0, 1)`` is drawn from the sample's generator after the pipeline: the batch-level Mix3D
(:mod:`pointgeope.data.mix3d`) mixes a batch when its first sample's draw is below ``mix_prob``, so the
decision is as reproducible as the samples (a resumed run mixes the same batches).

The features are ``[rgb | xyz]``, PTv1's layout: Pointcept's S3DIS config uses ``[rgb | normal]``, and the
project's prepared rooms carry no normals (``docs/ptv3-recipe.md``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from pointgeope.data.dataset import S3DISTrain, room_sample, sample_rng
from pointgeope.data.ptv3_transforms import ptv3_train_transform
from pointgeope.data.transforms import Sample, Transform


def ptv3_data(sample: Sample, color: bool = True, mix_draw: float | None = None) -> Data:
    """``Data(pos, x = [rgb | xyz] (or [xyz] without color), y, grid_coord)`` of a PTv3 block whose colour is
    already 0..1 (``NormalizeColor``) and which carries ``grid_coord``; with ``mix_draw`` also that."""
    if "grid_coord" not in sample:
        raise KeyError("expected a 'grid_coord' array in the sample (apply ptv3_transforms.GridSample), got keys "
                       + str(sorted(sample)))
    coord = np.asarray(sample["coord"], dtype=np.float32)
    parts = ([np.asarray(sample["color"], dtype=np.float32)] if color else []) + [coord]
    x = np.concatenate(parts, axis=1) if len(parts) > 1 else coord.copy()
    data = Data(pos=torch.from_numpy(coord.copy()), x=torch.from_numpy(x),
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
        cache: keep the rooms each worker has read in memory.
    """

    def __init__(self, root: str | Path, areas: list[str] | tuple[str, ...], *, grid_size: float = 0.02,
                 crop_rate: float | None = 0.6, point_max: int | None = 204_800, loop: int = 30,
                 transform: Transform | None = None, seed: int = 0, color: bool = True, cache: bool = False):
        pipeline = ptv3_train_transform(grid_size, crop_rate, point_max) if transform is None else transform
        super().__init__(root, areas, grid_size=grid_size, voxel_max=point_max or 2**62, loop=loop,
                         transform=pipeline, seed=seed, height=False, color=color, cache=cache)
        self.color = color

    @property
    def in_channels(self) -> int:
        return 6 if self.color else 3

    def __getitem__(self, index: int) -> Data:
        if not 0 <= index < len(self):
            raise IndexError(f"expected an index in [0, {len(self)}), got {index}")
        rng = sample_rng(self.seed, self.epoch, index)
        room = self.store.read(self.rooms[index % len(self.rooms)])
        sample = self.transform(room_sample(room["coord"], room["color"], room["label"]), rng)
        return ptv3_data(sample, self.color, mix_draw=float(rng.random()))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(areas={list(self.areas)}, rooms={len(self.rooms)}, loop={self.loop}, "
                f"seed={self.seed}, transform={self.transform!r})")
