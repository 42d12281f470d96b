"""PTv3's ``[rgb | normal]`` features (``data.normal``): the normals through the augmentations, the samples and the
test's views, against what each transform does to a direction (Pointcept's ``RandomRotate`` turns it with the
points, ``RandomFlip`` flips its x and y, scale and jitter leave it), written here from those definitions."""
from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch

from pointgeope.data.dataset import room_sample
from pointgeope.data.features import feature_channels, feature_names
from pointgeope.data.ptv3_dataset import S3DISTrainPTv3, check_normals, ptv3_data
from pointgeope.data.ptv3_test import PTV3_TEST_VIEWS, ptv3_room_pieces, ptv3_view
from pointgeope.data.ptv3_transforms import CenterShift, GridSample, NormalizeColor, RandomDropout, SphereCrop
from pointgeope.data.transforms import Compose, RandomFlip, RandomJitter, RandomRotate, RandomScale
from pointgeope.errors import UserError
from tests.data.conftest import decode_index


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, 3))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def sample_of(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` points in a 3 x 2.5 x 2 m box with random unit normals; colour ``i`` encodes point ``i``."""
    rng = np.random.default_rng(seed)
    index = np.arange(n)
    color = np.stack([index % 256, (index // 256) % 256, index // 65536], axis=1).astype(np.float32)
    return {"coord": (rng.random((n, 3)) * [3.0, 2.5, 2.0]).astype(np.float32), "color": color,
            "label": (index % 13).astype(np.int64), "normal": unit(rng, n)}


QUARTER_TURNS = [("z", (1, 0, 0), (0, 1, 0)), ("x", (0, 1, 0), (0, 0, 1)), ("y", (0, 0, 1), (1, 0, 0))]


@pytest.mark.parametrize("axis, before, after", QUARTER_TURNS)
def test_a_quarter_turn_takes_a_known_normal_to_the_next_axis(axis, before, after):
    """theta = pi/2 exactly (angle range (0.5, 0.5) in units of pi): right-handed, x -> y about z, y -> z about x,
    z -> x about y; the centre of the turn moves the points, never a direction."""
    s = {"coord": np.array([[5.0, 6.0, 7.0], [1.0, 2.0, 3.0]], np.float32),
         "normal": np.array([before] * 2, np.float32)}
    out = RandomRotate((0.5, 0.5), axis=axis, center=None, p=1.0)(s, np.random.default_rng(0))
    np.testing.assert_allclose(out["normal"], [after] * 2, atol=1e-7)
    assert out["normal"].dtype == np.float32 and s["normal"].tolist() == [list(before)] * 2    # input unchanged


@pytest.mark.parametrize("axis", ["x", "y", "z"])
def test_normals_turn_as_the_points_turn_about_the_origin(axis):
    """The normals' turn is the points' own: with ``coord == normal`` and the turn about the origin, both stay equal
    for any drawn angle; lengths stay 1."""
    s = sample_of(50, seed=1)
    s["coord"] = s["normal"].copy()
    out = RandomRotate((-1.0, 1.0), axis=axis, center=(0.0, 0.0, 0.0), p=1.0)(s, np.random.default_rng(7))
    assert not np.allclose(out["normal"], s["normal"])
    np.testing.assert_allclose(out["normal"], out["coord"], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out["normal"], axis=1), 1.0, atol=1e-6)


def test_a_flip_negates_the_normals_x_and_y_with_the_points():
    s = sample_of(20, seed=2)
    out = RandomFlip(p=1.0)(s, np.random.default_rng(0))
    np.testing.assert_array_equal(out["normal"], s["normal"] * np.float32([-1, -1, 1]))
    for seed in range(8):                                # each axis flips or not: normals follow coord's signs
        s["coord"] = s["normal"].copy()
        out = RandomFlip(p=0.5)(s, np.random.default_rng(seed))
        np.testing.assert_array_equal(out["normal"], out["coord"])
    assert RandomFlip(p=0.0)(s, np.random.default_rng(0))["normal"] is s["normal"]


def test_scale_and_jitter_leave_the_normals():
    s = sample_of(30, seed=3)
    for t in (RandomScale((0.5, 2.0)), RandomJitter(sigma=0.05, clip=0.1)):
        assert t(s, np.random.default_rng(0))["normal"] is s["normal"]


def test_the_geometric_pipeline_turns_every_normal_by_the_points_own_rotation():
    """PTv3's geometric transforms with every coin on: each kept point's normal is ``R n`` of its own normal, with
    ``R`` the orthogonal part of the map the points went through (``s R p + t`` plus a jitter of 2 cm at most)."""
    s = sample_of(6000, seed=4)
    pipeline = Compose([CenterShift(True), RandomDropout(0.2, p=1.0),
                        RandomRotate((-1.0, 1.0), axis="z", center=(0.0, 0.0, 0.0), p=1.0),
                        RandomRotate((-1 / 64, 1 / 64), axis="x", p=1.0),
                        RandomRotate((-1 / 64, 1 / 64), axis="y", p=1.0),
                        RandomScale((0.9, 1.1)), RandomFlip(p=1.0), RandomJitter(0.005, 0.02),
                        GridSample(0.1), SphereCrop(sample_rate=0.6), CenterShift(False)])
    out = pipeline(s, np.random.default_rng(5))
    index = decode_index(out["color"] / 255)
    before = CenterShift(True)(s)["coord"][index].astype(np.float64)
    design = np.c_[before, np.ones(len(index))]
    affine = np.linalg.lstsq(design, out["coord"].astype(np.float64), rcond=None)[0][:3]    # p_out = p A + t
    scale = abs(np.linalg.det(affine)) ** (1 / 3)
    rotation = np.linalg.lstsq(s["normal"][index].astype(np.float64), out["normal"].astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(rotation, affine / scale, atol=2e-3)       # the points' rotation (and flip)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-5)
    np.testing.assert_allclose(s["normal"][index] @ rotation, out["normal"], atol=1e-5)


def test_the_features_are_the_colour_then_the_normal():
    s = sample_of(40, seed=6)
    s["grid_coord"] = np.zeros((40, 3), np.int64)
    s = NormalizeColor()(s)
    data = ptv3_data(s, normal=True)
    np.testing.assert_array_equal(data.x.numpy(), np.c_[s["color"], s["normal"]])
    np.testing.assert_array_equal(ptv3_data(s, color=False, normal=True).x.numpy(), s["normal"])
    np.testing.assert_array_equal(ptv3_data(s).x.numpy(), np.c_[s["color"], s["coord"]])   # [rgb | xyz]
    with pytest.raises(KeyError, match="'normal'"):
        ptv3_data({k: v for k, v in s.items() if k != "normal"}, normal=True)


def test_feature_names_and_channels():
    assert feature_names() == ["rgb", "xyz"] and feature_names(normal=True) == ["rgb", "normal"]
    assert feature_names(color=False, normal=True) == ["normal"]
    assert feature_names(height=True) == ["rgb", "xyz", "height"]
    assert [feature_channels(feature_names(c, n, h)) for c, n, h in
            [(1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 0, 1), (0, 0, 1)]] == [6, 6, 3, 7, 4]


def test_a_test_view_flips_the_normals_and_its_scale_leaves_them():
    s = sample_of(10, seed=7)
    np.testing.assert_array_equal(ptv3_view(s, 1.1, False)["normal"], s["normal"])
    np.testing.assert_array_equal(ptv3_view(s, 0.9, True)["normal"], s["normal"] * np.float32([-1, -1, 1]))


def test_every_test_piece_carries_its_points_normals_as_its_view_shows_them():
    s = sample_of(3000, seed=8)
    sample = room_sample(s["coord"], s["color"], s["label"])
    views = []
    for index, data in ptv3_room_pieces(sample, 0.2, seed=0, on_view=views.append, normal=s["normal"]):
        _, flip = PTV3_TEST_VIEWS[len(views) - 1]
        np.testing.assert_array_equal(decode_index(data.x[:, :3].numpy()), index)
        expected = s["normal"][index] * (np.float32([-1, -1, 1]) if flip else np.float32(1))
        np.testing.assert_array_equal(data.x[:, 3:].numpy(), expected)
    assert len(views) == 10
    with pytest.raises(ValueError, match=r"expected normals of shape \(3000, 3\)"):
        from pointgeope.data.ptv3_test import feature_normals
        feature_normals(True, s["normal"][:5], 3000)


@pytest.fixture(scope="module")
def with_normals(prepared, tmp_path_factory):
    """The small prepared data (Area_1, Area_2) with ``/<room>/normal`` of random unit vectors, and those."""
    root, rooms = prepared
    out = tmp_path_factory.mktemp("with_normals")
    normals = {}
    for area in ("Area_1", "Area_2"):
        shutil.copyfile(root / f"{area}.h5", out / f"{area}.h5")
        with h5py.File(out / f"{area}.h5", "r+") as f:
            for name in f:
                if "normal" in f[name]:
                    del f[name]["normal"]
                normals[area, name] = unit(np.random.default_rng(len(normals)), f[name]["coord"].shape[0])
                f[name].create_dataset("normal", data=normals[area, name].astype(np.float16))
    return out, rooms, normals


def test_a_sample_keeps_each_kept_points_normal(with_normals):
    root, rooms, normals = with_normals
    ds = S3DISTrainPTv3(root, ["Area_1"], grid_size=0.05, loop=1, normal=True,
                        transform=Compose([CenterShift(True), GridSample(0.05), CenterShift(False), NormalizeColor()]))
    assert ds.in_channels == 6 and "normal=True" in repr(ds)
    data = ds[0]
    index = decode_index(data.x[:, :3].numpy())
    expected = normals["Area_1", "room_1"].astype(np.float16).astype(np.float32)      # stored float16, read float32
    assert data.x.dtype == torch.float32
    np.testing.assert_array_equal(data.x[:, 3:].numpy(), expected[index])
    np.testing.assert_array_equal(data.y.numpy(), rooms["Area_1"]["room_1"]["label"][index])
    full = S3DISTrainPTv3(root, ["Area_1", "Area_2"], grid_size=0.05, point_max=900, loop=2, seed=3, normal=True)
    x = full[3].x.numpy()
    np.testing.assert_allclose(np.linalg.norm(x[:, 3:], axis=1), 1.0, atol=2e-3)       # turned, still unit


def test_rooms_without_normals_are_refused_in_one_line_before_any_sample(prepared, tmp_path):
    root = tmp_path
    for area in ("Area_1", "Area_2"):                       # as a prepare before normals wrote them
        shutil.copyfile(prepared[0] / f"{area}.h5", root / f"{area}.h5")
        with h5py.File(root / f"{area}.h5", "r+") as f:
            for name in f:
                if "normal" in f[name]:
                    del f[name]["normal"]
    with pytest.raises(UserError) as err:
        S3DISTrainPTv3(root, ["Area_1", "Area_2"], grid_size=0.05, loop=1, normal=True)
    message = str(err.value)
    assert "\n" not in message and "Area_1.h5: room 'room_1' (and 1 more room) has no point normals" in message
    assert "pointgeope prepare" in message and "data.normal=false" in message
    S3DISTrainPTv3(root, ["Area_1"], grid_size=0.05, loop=1)                  # [rgb | xyz] reads none
    check_normals([])


def test_the_rooms_without_normals_past_the_first_are_counted_in_the_right_number(tmp_path):
    """``room 'a' (and 1 more room)``, ``(and 2 more rooms)``: the count of the rooms not named agrees with its
    noun (it read ``1 more rooms``)."""
    from pointgeope.data.rooms import RoomRef
    from pointgeope.h5 import write_area

    def room(n):
        return {"coord": np.zeros((n, 3)), "color": np.zeros((n, 3)), "label": np.zeros(n), "instance": np.zeros(n)}

    path = tmp_path / "Area_1.h5"
    write_area(path, "Area_1", [(name, room(4), {"num_points": 4}) for name in "abc"], 1000.0)
    for count, more in ((2, " (and 1 more room)"), (3, " (and 2 more rooms)"), (1, "")):
        with pytest.raises(UserError) as err:
            check_normals([RoomRef(path, "Area_1", name, 4) for name in "abc"[:count]])
        assert str(err.value).startswith(f"{path}: room 'a'{more} has no point normals (prepared by an older ")
