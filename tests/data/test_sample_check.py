"""A training sample whose features are not finite (pointgeope/data/sample_check.py): refused where the dataset
makes it, naming the room and the room's point, and whether the stored room or the sample's pipeline made it. The
loader's check at collation named a row of the packed batch (after the voxel sampling, the crop and the shuffle),
which no file has."""
from __future__ import annotations

import re
import shutil

import h5py
import numpy as np
import pytest

from pointgeope.data.dataset import S3DISTrain
from pointgeope.data.ptv3_dataset import S3DISTrainPTv3
from pointgeope.data.ptv3_transforms import CenterShift, GridSample, NormalizeColor
from pointgeope.data.transforms import Compose, Transform

POINT = 1234   # the room point the transform spoils, in Area_1's room_2 (2,500 points: tests/data/conftest.py)


class SpoilOnePoint(Transform):
    """Writes NaN into the blue channel of room point ``POINT`` of the room of 2,500 points (a transform's bug);
    every other room and point as it came. The room sample arrives in the room's own point order."""

    def __call__(self, sample, rng=None):
        if sample["coord"].shape[0] != 2500:
            return sample
        color = sample["color"].copy()
        color[POINT, 2] = np.nan
        return {**sample, "color": color}


def _room_2_index(ds) -> int:
    return next(i for i, room in enumerate(ds.rooms) if (room.area, room.name) == ("Area_1", "room_2"))


def test_a_ptv1_sample_names_the_room_and_its_point_that_the_transform_spoiled(prepared):
    root, _ = prepared
    ds = S3DISTrain(root, ["Area_1", "Area_2"], grid_size=1e-4, voxel_max=10**6, loop=1, transform=SpoilOnePoint())
    assert ds[0].x.isfinite().all()                       # another room: built as before
    with pytest.raises(ValueError) as err:
        ds[_room_2_index(ds)]
    line = str(err.value)
    assert line.startswith(f"expected finite x (the features of training sample {_room_2_index(ds)}), got 1 NaN or "
                           f"infinite entries, the first at point {POINT} of room 'room_2' of Area_1 "
                           f"({root / 'Area_1.h5'}; the sample's row "), line
    row = int(re.search(r"the sample's row (\d+)", line)[1])
    sample, _ = ds.sample(_room_2_index(ds))               # the same sample: its row holds the spoiled point
    assert np.isnan(sample["color"][row, 2]) and np.isnan(sample["color"]).sum() == 1
    assert line.endswith("the room's stored coord, color are finite, so the sample's pipeline made it: check its "
                         "transform (SpoilOnePoint()) on that point"), line


def test_a_ptv3_sample_names_the_room_and_its_point(prepared):
    root, _ = prepared
    pipeline = Compose([SpoilOnePoint(), CenterShift(True), GridSample(1e-4), CenterShift(False), NormalizeColor()])
    ds = S3DISTrainPTv3(root, ["Area_1"], grid_size=1e-4, loop=1, transform=pipeline)
    with pytest.raises(ValueError, match=rf"the first at point {POINT} of room 'room_2' of Area_1 .*; the room's "
                                         r"stored coord, color are finite, so the sample's pipeline made it") as err:
        ds[_room_2_index(ds)]
    line = str(err.value)   # the pipeline's repr spans lines: said on one
    assert "\n" not in line and "check its transform (Compose([ SpoilOnePoint(), CenterShift(" in line, line


def test_a_stored_normal_that_is_not_finite_names_the_file_and_says_to_prepare_again(prepared, tmp_path):
    """A NaN normal in the file (prepare refuses one: the file is not prepare's) reaches PTv3's ``[rgb | normal]``:
    the stored point is named, and prepare again. (A NaN coordinate is refused before, by the voxel sampling.)"""
    root, _ = prepared
    for name in ("Area_1.h5", "Area_2.h5", "Area_3.h5", "folds.json"):
        shutil.copy(root / name, tmp_path / name)
    with h5py.File(tmp_path / "Area_2.h5", "r+") as f:
        for room in ("room_1", "room_2"):
            normal = np.tile(np.float32([0, 0, 1]), (f[room].attrs["num_points"], 1))
            if room == "room_1":
                normal[17] = [np.nan, 0, 1]
            f[room].create_dataset("normal", data=normal)
    pipeline = Compose([CenterShift(True), GridSample(1e-4), CenterShift(False), NormalizeColor()])
    ds = S3DISTrainPTv3(tmp_path, ["Area_2"], grid_size=1e-4, loop=1, transform=pipeline, normal=True)
    assert ds[1].x.isfinite().all()                       # room_2 of the same file
    with pytest.raises(ValueError) as err:
        ds[0]
    line = str(err.value)
    assert "the first at point 17 of room 'room_1' of Area_2" in line and line.endswith(
        f"the room's stored normal of point 17 is [nan, 0.0, 1.0], which prepare refuses: {tmp_path / 'Area_2.h5'} "
        f"is not the file prepare wrote; run `pointgeope prepare` again into {tmp_path}"), line
