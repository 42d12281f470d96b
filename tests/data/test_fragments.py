"""The published test-time voxel fragments, the fill of a capped vote, crops of a large fragment."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.data.fragments import fill_from_voxels, split_into_crops, voxel_fragments
from pointgeope.data.voxelize import crop_nearest
from tests.data.test_voxelize import cloud, reference_voxels


def authors_fragments(coord: np.ndarray, grid_size: float, rank: np.ndarray, which=None) -> dict[int, set[int]]:
    """The rule of the authors' ``tool/test.py``, written directly: order each voxel's points by
    ``rank`` (the shuffle); fragment ``f`` takes point ``f mod count`` of every voxel. Returns the
    fragments ``which`` (default: all ``max count`` of them) by number."""
    voxels = [sorted(members, key=lambda i: rank[i]) for members in reference_voxels(coord, grid_size).values()]
    count = max(len(m) for m in voxels)
    return {f: {m[f % len(m)] for m in voxels} for f in (range(count) if which is None else which)}


@pytest.mark.parametrize("seed", [0, 1])
def test_fragments_follow_the_authors_rule(seed):
    coord = cloud(2500, seed, extent=(1.0, 0.8, 0.6))
    coord[:40] = coord[0]                                 # one dense voxel: 40+ fragments
    fragments = voxel_fragments(coord, 0.1, np.random.default_rng(seed))
    rank = np.random.default_rng(seed).permutation(len(coord))     # the within-voxel shuffle's draw
    expected = authors_fragments(coord, 0.1, rank)
    assert len(fragments) == len(expected) >= 40
    assert [set(f.tolist()) for f in fragments] == [expected[f] for f in range(len(expected))]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_fragment_is_a_complete_grid_sample(seed):
    """Whatever the shuffle: every fragment holds one point of every occupied voxel; voxel v's picks
    repeat with period count(v) and its first count(v) picks are all its points."""
    coord = cloud(2500, seed, extent=(1.0, 0.8, 0.6))
    coord[:25] = coord[0]
    voxels = reference_voxels(coord, 0.1)
    voxel_of = {i: key for key, members in voxels.items() for i in members}
    fragments = list(voxel_fragments(coord, 0.1, np.random.default_rng(seed)))
    assert len(fragments) == max(len(m) for m in voxels.values())
    picks: dict = {key: [] for key in voxels}
    for fragment in fragments:
        keys = [voxel_of[int(i)] for i in fragment]
        assert len(keys) == len(set(keys)) == len(voxels)
        for i, key in zip(fragment.tolist(), keys):
            picks[key].append(i)
    for key, members in voxels.items():
        c = len(members)
        assert sorted(picks[key][:c]) == sorted(members)
        assert all(picks[key][f] == picks[key][f % c] for f in range(len(fragments)))


def test_fragments_are_seeded_shuffles():
    coord = cloud(1000, 2, extent=(0.4, 0.4, 0.4))
    a = voxel_fragments(coord, 0.1, np.random.default_rng(0))
    b = voxel_fragments(coord, 0.1, np.random.default_rng(0))
    c = voxel_fragments(coord, 0.1, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(np.sort(a[0]), np.sort(c[0]))
    with pytest.raises(IndexError):
        a[len(a)]


def test_single_point_room_is_one_fragment():
    fragments = voxel_fragments(np.zeros((1, 3), np.float32), 0.04, np.random.default_rng(0))
    assert [f.tolist() for f in fragments] == [[0]]


def test_fill_from_voxels_gives_unvoted_points_their_voxels_sum():
    coord = cloud(600, 4, extent=(0.5, 0.5, 0.5))
    groups = voxel_fragments(coord, 0.1, np.random.default_rng(0)).groups
    rng = np.random.default_rng(1)
    votes = (rng.random(600) < 0.6).astype(np.int32) * rng.integers(1, 4, 600).astype(np.int32)
    scores = rng.random((600, 13)).astype(np.float32) * votes[:, None]
    before_scores, before_votes = scores.copy(), votes.copy()
    filled = fill_from_voxels(groups, scores, votes)
    assert filled == int((before_votes == 0).sum())
    for members in reference_voxels(coord, 0.1).values():
        voted = [i for i in members if before_votes[i] > 0]
        for i in members:
            if before_votes[i] > 0:
                np.testing.assert_array_equal(scores[i], before_scores[i])
            else:
                np.testing.assert_allclose(scores[i], before_scores[voted].sum(0), rtol=1e-6)
                assert votes[i] == before_votes[voted].sum()


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


def test_published_fragments_on_the_real_office(s3dis_real):
    """On the real office of the fixtures (every 8th point of S3DIS office_resampled, whose objects repeat
    points) at the recipe's 4 cm: every fragment is the complete grid sample of the room, as the
    authors' rule makes it, and every point is predicted."""
    files = sorted((s3dis_real / "Area_2" / "office_resampled" / "Annotations").glob("*.txt"))
    coord = np.concatenate([np.loadtxt(f, usecols=(0, 1, 2), ndmin=2) for f in files]).astype(np.float32)
    fragments = voxel_fragments(coord, 0.04, np.random.default_rng(0))
    rank = np.random.default_rng(0).permutation(len(coord))
    voxels = reference_voxels(coord, 0.04)
    count = max(len(m) for m in voxels.values())
    checked = (0, 1, count // 2, count - 1)
    expected = authors_fragments(coord, 0.04, rank, checked)
    assert len(fragments) == count > 100                     # a voxel of repeated points
    voxels = len(voxels)
    seen = np.zeros(len(coord), bool)
    for f in range(len(fragments)):
        fragment = fragments[f]
        assert len(fragment) == voxels                        # never a sparse subset of the room
        seen[fragment] = True
        if f in checked:
            assert set(fragment.tolist()) == expected[f]
    assert seen.all()
