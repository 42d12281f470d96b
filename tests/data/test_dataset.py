"""Training blocks, and test-time pieces of a room sample, over the small prepared fixture."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.data.dataset import S3DISTrain, room_sample
from pointgeope.data.folds import load_folds
from pointgeope.data.fragments import room_pieces, voxel_fragments
from pointgeope.data.transforms import Compose, ToData
from pointgeope.data.voxelize import grid_coord
from tests.data.conftest import decode_index


def train_set(root, **kw) -> S3DISTrain:
    fold = load_folds(root)[3]
    return S3DISTrain(root, fold.train, **{"loop": 3, "voxel_max": 800, "seed": 7, **kw})


def test_length_is_rooms_times_loop_and_rooms_come_from_the_fold(prepared):
    root, rooms = prepared
    ds = train_set(root)
    assert ds.areas == ("Area_1", "Area_2")
    assert [(r.area, r.name, r.num_points) for r in ds.rooms] == [
        (a, name, len(room["label"])) for a in ("Area_1", "Area_2") for name, room in rooms[a].items()]
    assert len(ds) == 4 * 3
    with pytest.raises(IndexError, match=r"\[0, 12\)"):
        ds[12]


@pytest.mark.parametrize("height", [False, True])
def test_sample_shapes_dtypes_and_feature_layout(prepared, height):
    root, _ = prepared
    data = train_set(root, height=height)[1]
    n = data.num_nodes
    assert 0 < n <= 800
    assert data.pos.shape == (n, 3) and data.pos.dtype == torch.float32
    assert data.x.shape == (n, 7 if height else 6) and data.x.dtype == torch.float32
    assert data.y.shape == (n,) and data.y.dtype == torch.int64
    torch.testing.assert_close(data.pos.min(0).values, torch.zeros(3))       # shifted to minimum 0
    torch.testing.assert_close(data.x[:, 3:6], data.pos)                       # [rgb | xyz | (h)]
    assert data.x[:, :3].min() >= 0 and data.x[:, :3].max() <= 1
    if height:
        assert data.x[:, 6].min() >= 0 and data.x[:, 6].max() <= 1


def test_voxelization_keeps_original_points_and_labels(prepared):
    """Without augmentation every row is an original point (decoded from its colour) with its label,
    at its original position up to the block's shift, and at most one per 4 cm voxel of the room."""
    root, rooms = prepared
    ds = train_set(root, transform=Compose([]), voxel_max=100_000, loop=1)
    for k, ref in enumerate(ds.rooms):
        room = rooms[ref.area][ref.name]
        data = ds[k]
        index = decode_index(data.x[:, :3].numpy())
        assert len(np.unique(index)) == len(index)
        np.testing.assert_array_equal(data.y.numpy(), room["label"][index])
        shifted = room["coord"][index] - room["coord"][index].min(0)
        np.testing.assert_allclose(data.pos.numpy(), shifted, atol=1e-5)
        grid = grid_coord(room["coord"], 0.04)
        voxel = np.ravel_multi_index(tuple(grid), tuple(grid.max(1) + 1))
        assert len(index) == len(np.unique(voxel))                   # one per occupied voxel
        assert len(np.unique(voxel[index])) == len(index)


def test_block_points_are_shuffled_out_of_voxel_order(prepared):
    """Step 5 (PTv1's ``shuffle_index``): the block's rows are a seeded random permutation, not the grid
    sample's voxel-key order (FPS starts at row 0). Without a crop every occupied voxel gives one row; the
    row order is uncorrelated with the voxel's raveled key (x, then y, then z), and another epoch orders
    the same voxels differently."""
    root, rooms = prepared
    ds = train_set(root, transform=Compose([]), voxel_max=100_000, loop=2)
    ref = ds.rooms[0]
    coord = rooms[ref.area][ref.name]["coord"]
    cell = np.floor((coord - coord.min(0)) / np.float32(0.04)).astype(np.int64)     # (N, 3) voxel of each point
    dims = cell.max(0) + 1
    key = (cell[:, 0] * dims[1] + cell[:, 1]) * dims[2] + cell[:, 2]
    orders = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        for index in (0, len(ds.rooms)):                     # room 0, twice per epoch (loop=2)
            row_key = key[decode_index(ds[index].x[:, :3].numpy())]
            assert sorted(row_key.tolist()) == sorted(set(key.tolist()))      # every voxel once
            rank = np.argsort(np.argsort(row_key))
            assert abs(np.corrcoef(rank, np.arange(len(rank)))[0, 1]) < 0.2      # 1.0 in voxel order
            orders.append(row_key)
    assert len({tuple(o.tolist()) for o in orders}) == 4     # each sample its own order
    again = train_set(root, transform=Compose([]), voxel_max=100_000, loop=2)
    again.set_epoch(1)
    np.testing.assert_array_equal(key[decode_index(again[len(ds.rooms)].x[:, :3].numpy())], orders[3])


def test_crop_limits_the_block_to_voxel_max(prepared):
    root, _ = prepared
    ds = train_set(root, transform=Compose([]), voxel_max=300)
    assert all(ds[i].num_nodes == 300 for i in range(4))


def test_samples_are_deterministic_given_seed_epoch_index(prepared):
    root, _ = prepared
    a, b = train_set(root), train_set(root)
    first = a[5]
    for other in (a[5], b[5]):
        torch.testing.assert_close(first.pos, other.pos)
        torch.testing.assert_close(first.x, other.x)
        torch.testing.assert_close(first.y, other.y)
    b.set_epoch(1)
    assert not torch.equal(first.x, b[5].x)
    a.set_epoch(1)
    torch.testing.assert_close(a[5].x, b[5].x)
    assert not torch.equal(first.x, train_set(root, seed=8)[5].x)
    assert not torch.equal(a[1].x, a[5].x)       # same room (index % 4), another sample


def test_test_pieces_of_a_prepared_room_cover_it_and_map_back(prepared):
    """The one test-time path: ``room_sample`` of a stored room, its fragments, their crops."""
    _, rooms = prepared
    for name, room in rooms["Area_3"].items():
        n = len(room["label"])
        sample = room_sample(room["coord"], room["color"], room["label"])
        rng = np.random.default_rng(1)
        counts = np.zeros(n, np.int64)
        to_data = ToData()
        for index, piece in room_pieces(sample, voxel_fragments(sample["coord"], 0.04, rng), 700, rng):
            data = to_data(piece)
            assert data.num_nodes == len(index) <= 700
            assert index.dtype == np.int64
            np.testing.assert_array_equal(decode_index(data.x[:, :3].numpy()), index)
            np.testing.assert_array_equal(data.y.numpy(), room["label"][index])
            torch.testing.assert_close(data.pos.min(0).values, torch.zeros(3))
            grid = grid_coord(room["coord"], 0.04)[:, index]
            assert len(np.unique(grid, axis=1).T) == len(index)      # one point per voxel
            counts[index] += 1
        assert counts.min() >= 1, name                                # every point predicted


def test_the_augmentation_is_applied_to_every_block(prepared):
    """``transform`` runs on every sample: a colour inversion (no draw, no change to the points) gives the same
    blocks, points and labels in the same order, with colours ``1 - rgb``."""
    root, _ = prepared
    from pointgeope.data.transforms import Transform

    class Invert(Transform):
        def __call__(self, sample, rng):
            return {**sample, "color": 255 - sample["color"]}

    plain = train_set(root, transform=Compose([]))
    inverted = train_set(root, transform=Compose([Invert()]))
    for k in range(len(plain)):
        a, b = plain[k], inverted[k]
        torch.testing.assert_close(b.pos, a.pos)
        torch.testing.assert_close(b.y, a.y)
        torch.testing.assert_close(b.x[:, :3], 1 - a.x[:, :3], rtol=0, atol=1e-6)


def test_room_sample_shifts_the_room_to_a_minimum_of_0():
    coord = np.array([[-3.0, 10.0, 2.5], [1.0, 12.0, 4.5], [-1.0, 11.0, 3.0]])
    sample = room_sample(coord, np.full((3, 3), 7), height=True)
    np.testing.assert_array_equal(sample["coord"], (coord - [-3.0, 10.0, 2.5]).astype(np.float32))
    np.testing.assert_array_equal(sample["height"], np.array([0.0, 1.0, 0.25], dtype=np.float32))
    assert sample["color"].dtype == np.float32 and sample["label"].tolist() == [0, 0, 0]
