"""Voxel fragments partition the room; crops cover a large fragment."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.data.fragments import split_into_crops, voxel_fragments
from pointgeope.data.voxelize import crop_nearest
from tests.data.test_voxelize import cloud, reference_voxels


@pytest.mark.parametrize("seed", [0, 1])
def test_fragments_partition_the_room_with_one_point_per_voxel(seed):
    coord = cloud(2500, seed, extent=(1.0, 0.8, 0.6))
    voxels = reference_voxels(coord, 0.1)
    voxel_of = {i: key for key, members in voxels.items() for i in members}
    fragments = voxel_fragments(coord, 0.1, np.random.default_rng(seed))
    assert len(fragments) == max(len(m) for m in voxels.values())
    everything = np.concatenate(fragments)
    np.testing.assert_array_equal(np.sort(everything), np.arange(len(coord)))   # every index once
    for f, fragment in enumerate(fragments):
        keys = [voxel_of[int(i)] for i in fragment]
        assert len(set(keys)) == len(keys)                                     # one point per voxel
        assert set(keys) == {k for k, m in voxels.items() if len(m) > f}        # every voxel with > f


def test_fragments_are_seeded_shuffles():
    coord = cloud(1000, 2, extent=(0.4, 0.4, 0.4))
    a = voxel_fragments(coord, 0.1, np.random.default_rng(0))
    b = voxel_fragments(coord, 0.1, np.random.default_rng(0))
    c = voxel_fragments(coord, 0.1, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(np.sort(a[0]), np.sort(c[0]))


def test_single_point_room_is_one_fragment():
    fragments = voxel_fragments(np.zeros((1, 3), np.float32), 0.04, np.random.default_rng(0))
    assert [f.tolist() for f in fragments] == [[0]]


@pytest.mark.parametrize("voxel_max", [50, 333, 1000])
def test_crops_cover_every_point_with_nearest_neighbour_crops(voxel_max):
    coord = cloud(1000, 3)
    crops = split_into_crops(coord, voxel_max, np.random.default_rng(0))
    covered = np.zeros(len(coord), bool)
    for crop in crops:
        assert len(crop) == min(voxel_max, len(coord))
        assert len(np.unique(crop)) == len(crop)
        covered[crop] = True
    assert covered.all()
    if voxel_max >= len(coord):
        assert len(crops) == 1
    else:
        assert len(crops) >= int(np.ceil(len(coord) / voxel_max))
        # Each crop is the voxel_max nearest points of some point of the crop (its seed).
        for crop in crops[:3]:
            assert any(set(crop_nearest(coord, voxel_max, coord[s]).tolist()) == set(crop.tolist())
                       for s in crop)


def test_crops_terminate_on_duplicates():
    coord = np.zeros((30, 3), np.float32)
    crops = split_into_crops(coord, 7, np.random.default_rng(0))
    assert set(np.concatenate(crops).tolist()) == set(range(30))
