"""PTv3's training samples, Mix3D and the 10-view test pieces on the small prepared dataset."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.data.dataset import room_sample
from pointgeope.data.mix3d import Mix3D, mixed_offsets
from pointgeope.data.points import Points, collate
from pointgeope.data.ptv3_dataset import S3DISTrainPTv3
from pointgeope.data.ptv3_test import PTV3_TEST_VIEWS, ptv3_room_pieces
from pointgeope.data.ptv3_transforms import pointcept_grid
from tests.data.conftest import decode_index


def test_samples_are_reproducible_centred_and_carry_grid_coord(prepared):
    root, rooms = prepared
    ds = S3DISTrainPTv3(root, ["Area_1", "Area_2"], grid_size=0.05, crop_rate=0.6, point_max=900, loop=2, seed=3)
    assert len(ds) == 8 and ds.in_channels == 6
    a, b = ds[5], ds[5]
    for key in ("pos", "x", "y", "grid_coord", "mix_draw"):
        assert torch.equal(a[key], b[key])
    ds.set_epoch(1)
    assert not torch.equal(ds[5].pos, a.pos) or not torch.equal(ds[5].y, a.y)
    assert a.pos.shape[0] <= 900 and a.grid_coord.dtype == torch.int64 and a.x.shape == (a.pos.shape[0], 6)
    assert 0.0 <= float(a.mix_draw) < 1.0
    assert len({tuple(g) for g in a.grid_coord.tolist()}) == a.pos.shape[0]     # one point per cell
    np.testing.assert_allclose(a.x[:, 3:].numpy(), a.pos.numpy())               # x = [rgb | xyz]
    assert a.x[:, :3].min() >= 0 and a.x[:, :3].max() <= 1


def test_without_augmentation_a_sample_is_the_rooms_points_with_their_labels(prepared):
    root, rooms = prepared
    from pointgeope.data.ptv3_transforms import CenterShift, GridSample, NormalizeColor
    from pointgeope.data.transforms import Compose
    ds = S3DISTrainPTv3(root, ["Area_1"], grid_size=0.05, loop=1,
                        transform=Compose([CenterShift(True), GridSample(0.05), CenterShift(False), NormalizeColor()]))
    data = ds[0]
    room = rooms["Area_1"]["room_1"]
    index = decode_index(data.x[:, :3].numpy())
    np.testing.assert_array_equal(data.y.numpy(), room["label"][index])
    centred = CenterShift(True)(room_sample(room["coord"], room["color"], room["label"]))["coord"]
    occupied = {tuple(g) for g in pointcept_grid(centred, 0.05).T}
    assert {tuple(g) for g in data.grid_coord.tolist()} == occupied and data.pos.shape[0] == len(occupied)
    lo, hi = data.pos.min(0).values, data.pos.max(0).values
    torch.testing.assert_close((lo[:2] + hi[:2]) / 2, torch.zeros(2), atol=1e-5, rtol=0)


def test_mixed_offsets_merge_pairs_and_keep_an_odd_last_sample():
    assert mixed_offsets(torch.tensor([3, 7, 12, 20])).tolist() == [7, 20]
    assert mixed_offsets(torch.tensor([3, 7, 12])).tolist() == [7, 12]
    assert mixed_offsets(torch.tensor([5])).tolist() == [5]
    with pytest.raises(ValueError, match="offset"):
        mixed_offsets(torch.tensor([], dtype=torch.long))


def _batch(draw: float, sizes=(3, 4, 5)) -> Points:
    return collate([Points(pos=torch.rand(n, 3), mix_draw=torch.tensor([draw])) for n in sizes])


def test_mix3d_merges_by_the_first_draw_and_leaves_the_batch_alone():
    batch = _batch(0.5)
    ptr, vec = batch.ptr.clone(), batch.batch.clone()
    mixed = Mix3D(0.8)(batch)
    assert mixed.ptr.tolist() == [0, 7, 12] and mixed.num_graphs == 2
    assert mixed.batch.tolist() == [0] * 7 + [1] * 5
    assert torch.equal(batch.ptr, ptr) and torch.equal(batch.batch, vec) and batch.num_graphs == 3
    assert torch.equal(mixed.pos, batch.pos)                   # the points do not move
    assert Mix3D(0.5)(batch) is batch                          # draw 0.5 is not below 0.5
    assert Mix3D(0.0)(_batch(0.0)).ptr.tolist() == [0, 3, 7, 12]
    with pytest.raises(KeyError, match="mix_draw"):
        Mix3D(0.8)(collate([Points(pos=torch.rand(2, 3))]))


def test_mix3d_rate_follows_the_samples_draws(prepared):
    root, _ = prepared
    ds = S3DISTrainPTv3(root, ["Area_1", "Area_2"], grid_size=0.1, crop_rate=None, point_max=None, loop=100)
    draws = np.array([float(ds[i].mix_draw) for i in range(400)])
    assert 0.72 < (draws < 0.8).mean() < 0.88


def test_test_pieces_cover_every_point_in_every_view_one_point_per_cell(prepared):
    _, rooms = prepared
    room = rooms["Area_2"]["room_2"]
    sample = room_sample(room["coord"], room["color"], room["label"])
    n = sample["coord"].shape[0]
    seen = np.zeros((len(PTV3_TEST_VIEWS), n), dtype=np.int64)
    views = []
    pieces = ptv3_room_pieces(sample, 0.1, seed=0, on_view=views.append)
    for index, data in pieces:
        v = len(views) - 1
        seen[v, index] += 1
        assert len({tuple(g) for g in data.grid_coord.tolist()}) == index.shape[0]
        scale, flip = PTV3_TEST_VIEWS[v]
        lo, hi = data.pos.min(0).values, data.pos.max(0).values
        torch.testing.assert_close((lo[:2] + hi[:2]) / 2, torch.zeros(2), atol=1e-5, rtol=0)
        # a point's view coordinates: centred room, scaled, flipped in x and y
        c = sample["coord"][index].astype(np.float64)
        c = c - [(sample["coord"][:, 0].min() + sample["coord"][:, 0].max()) / 2,
                 (sample["coord"][:, 1].min() + sample["coord"][:, 1].max()) / 2, sample["coord"][:, 2].min()]
        c = c * scale * ([-1, -1, 1] if flip else 1)
        np.testing.assert_allclose(data.pos.numpy()[:, 2], c[:, 2], atol=1e-4)
        np.testing.assert_allclose(np.ptp(data.pos.numpy()[:, :2], axis=0), np.ptp(c[:, :2], axis=0), atol=1e-4)
        np.testing.assert_allclose(data.x[:, :3].numpy(), sample["color"][index] / 255, rtol=1e-6)
    assert len(views) == 10 and (seen >= 1).all()
    for v, frags in enumerate(views):
        counts = np.bincount(np.unique(frags.grid, axis=1, return_inverse=True)[1].ravel())
        assert len(frags) == counts.max()                          # as many fragments as the fullest cell
        assert seen[v].sum() == len(frags) * counts.shape[0]       # each fragment: one point per cell


def test_the_loader_yields_mixed_batches_with_grid_coord(prepared):
    from pointgeope.data.loader import make_loader

    root, _ = prepared
    ds = S3DISTrainPTv3(root, ["Area_1", "Area_2"], grid_size=0.1, crop_rate=0.6, point_max=None, loop=6, seed=1)
    loader = make_loader(ds, 4, seed=1, drop_last=True, batch_transform=Mix3D(0.8))
    sizes = []
    for batch in loader:
        assert batch.grid_coord.shape == batch.pos.shape and int(batch.ptr[-1]) == batch.pos.shape[0]
        sizes.append(batch.ptr.numel() - 1)
        mixed = float(batch.mix_draw[0]) < 0.8
        assert sizes[-1] == (2 if mixed else 4)
    assert len(sizes) == 6
