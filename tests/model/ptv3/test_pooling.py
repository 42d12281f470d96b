"""Serialized pooling (pointgeope/model/ptv3/pooling.py): the shuffle of the pooled orders follows the module's
own mode. Pointcept's pooling draws ``torch.randperm(K)`` in eval too (``shuffle_in_eval=True``, the default);
``shuffle_in_eval=False`` draws in training only."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pointgeope.model.ptv3.pooling import CoarsePoolingError, SerializedPooling, segment_reduce
from pointgeope.model.ptv3.structure import PointBatch
from pointgeope.model.ptv3_rules import stride_problem
from tests.model.ptv3.test_patches import make_point

ORDERS = 4


def pooled_codes(module: SerializedPooling, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The pooled codes (K, M) of a fixed cloud under ``torch.manual_seed(seed)``, and the generator's state
    after the forward."""
    point = make_point((40, 23), 4, 3)
    point.serialize(("z", "z-trans", "hilbert", "hilbert-trans"))
    torch.manual_seed(seed)
    with torch.no_grad():
        code = module(point).serialized_code
    return code, torch.get_rng_state()


def after_draws(seed: int, draws: int) -> tuple[list[list[int]], torch.Tensor]:
    """``draws`` permutations of the K rows drawn as Pointcept draws them, and the state they leave."""
    torch.manual_seed(seed)
    perms = [torch.randperm(ORDERS).tolist() for _ in range(draws)]
    return perms, torch.get_rng_state()


@pytest.mark.parametrize("shuffle_in_eval, training, draws", [(True, False, 1), (True, True, 1),
                                                              (False, False, 0), (False, True, 1)])
def test_the_pooled_orders_are_shuffled_as_the_module_mode_says(shuffle_in_eval, training, draws):
    torch.manual_seed(0)
    module = SerializedPooling(4, 8, shuffle_in_eval=shuffle_in_eval).train(training)
    plain = SerializedPooling(4, 8, shuffle_orders=False).train(training)
    plain.load_state_dict(module.state_dict())
    unshuffled, state_plain = pooled_codes(plain, 7)
    assert torch.equal(state_plain, after_draws(7, 0)[1])                     # shuffle_orders=False: no draw
    code, state = pooled_codes(module, 7)
    perms, expected_state = after_draws(7, draws)
    assert torch.equal(state, expected_state)                                 # exactly `draws` randperm(4)
    rows = perms[0] if draws else list(range(ORDERS))
    assert torch.equal(code, unshuffled[rows])
    assert draws == 0 or rows != sorted(rows)                                  # seed 7 moves the rows


def _cube(side: int) -> PointBatch:
    """One cloud of the side^3 voxels of a cube at the origin, serialized."""
    axis = torch.arange(side)
    grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    point = PointBatch.from_inputs(grid.float() * 0.1, grid, torch.randn(len(grid), 4), torch.tensor([len(grid)]))
    point.serialize(("z", "hilbert"))
    return point


def test_a_training_batch_pooled_to_one_voxel_is_a_user_error():
    """The 8 voxels of a 2-cube pool to one at stride 2: batch norm cannot normalise one row in training
    (torch's ValueError from deep inside the forward, a traceback for data.grid_size=2 on small rooms)."""
    torch.manual_seed(0)
    module = SerializedPooling(4, 8, norm_layer=torch.nn.BatchNorm1d).train()
    with pytest.raises(CoarsePoolingError) as err:
        module(_cube(2))
    assert str(err.value).startswith("PTv3's pooling (stride 2) merged the 8 voxels of a training batch into "
                                     "one, and its batch norm needs two or more")
    assert err.value.fact == ("PTv3's pooling (stride 2) merged the 8 voxels of a training batch into one, and its "
                              "batch norm needs two or more")
    assert "batch two clouds or more" in str(err.value) and "\n" not in str(err.value)
    assert module(_cube(3)).feat.shape == (8, 8)             # 27 voxels -> the 2^3 voxels of grid >> 1
    with torch.no_grad():                                    # eval: the running statistics, one row is fine
        assert module.eval()(_cube(2)).feat.shape == (1, 8)


@pytest.mark.parametrize("reduce, expected", [
    ("sum", [[4.0, -6.0], [9.0, 3.0], [-5.0, 7.0]]),
    ("mean", [[2.0, -3.0], [3.0, 1.0], [-5.0, 7.0]]),
    ("max", [[3.0, -2.0], [4.0, 6.0], [-5.0, 7.0]]),
    ("min", [[1.0, -4.0], [2.0, -3.0], [-5.0, 7.0]])])
def test_segment_reduce_on_literal_segments(reduce, expected):
    """Segments {0, 2}, {1, 4, 5}, {3} of six rows, worked out by hand: e.g. segment 1 sums (4 + 2 + 3,
    6 + 0 - 3) = (9, 3) and averages (3, 1)."""
    src = torch.tensor([[1.0, -2.0], [4.0, 6.0], [3.0, -4.0], [-5.0, 7.0], [2.0, 0.0], [3.0, -3.0]])
    index = torch.tensor([0, 1, 0, 2, 1, 1])
    assert torch.equal(segment_reduce(src, index, 3, reduce), torch.tensor(expected))


# Two clouds on the grid, pooled at stride 2 (voxels of grid >> 1, never across clouds); each voxel's
# expected coordinate is the mean of its points' coordinates, worked out by hand:
#   cloud 0: (0,0,0) (1,0,0) (1,1,1) -> voxel (0,0,0): (0+.15+.12, 0+.03+.18, 0+.06+.12)/3 = (.09, .07, .06)
#            (2,0,0) (3,1,0)         -> voxel (1,0,0): (.25+.35, .02+.12, .04+.08)/2       = (.30, .07, .06)
#            (0,0,2)                 -> voxel (0,0,1): (.02, .04, .21)
#   cloud 1: (0,1,0) (1,1,0)         -> voxel (0,0,0): (.05+.13, .11+.17, .01+.03)/2       = (.09, .14, .02)
#            (2,2,2)                 -> voxel (1,1,1): (.21, .22, .23)
POOL_GRID = [[0, 0, 0], [1, 0, 0], [1, 1, 1], [2, 0, 0], [3, 1, 0], [0, 0, 2], [0, 1, 0], [1, 1, 0], [2, 2, 2]]
POOL_COORD = [[0.0, 0.0, 0.0], [0.15, 0.03, 0.06], [0.12, 0.18, 0.12], [0.25, 0.02, 0.04], [0.35, 0.12, 0.08],
              [0.02, 0.04, 0.21], [0.05, 0.11, 0.01], [0.13, 0.17, 0.03], [0.21, 0.22, 0.23]]
POOLED_MEANS = {(0, 0, 0, 0): (0.09, 0.07, 0.06), (0, 1, 0, 0): (0.30, 0.07, 0.06), (0, 0, 0, 1): (0.02, 0.04, 0.21),
                (1, 0, 0, 0): (0.09, 0.14, 0.02), (1, 1, 1, 1): (0.21, 0.22, 0.23)}   # (cloud, voxel) -> coord'


def pooled_by_voxel(coord: torch.Tensor, grid: torch.Tensor, batch: torch.Tensor) -> dict:
    """``{(cloud, gx, gy, gz): (x, y, z)}`` of a pooled structure's rows."""
    return {(b, *g): tuple(c) for b, g, c in zip(batch.tolist(), grid.tolist(), coord.tolist(), strict=True)}


def test_pooled_coordinates_are_the_mean_of_each_voxel():
    """Pointcept's pooling gives each merged voxel the mean of its points' coords (``segment_csr(...,
    reduce="mean")``), the coordinates PTv3's encodings read at the next stage."""
    point = PointBatch.from_inputs(torch.tensor(POOL_COORD, dtype=torch.float64), torch.tensor(POOL_GRID),
                                   torch.randn(9, 4, dtype=torch.float64), torch.tensor([6, 9]))
    point.serialize(("z", "hilbert"))
    torch.manual_seed(0)
    module = SerializedPooling(4, 8, shuffle_orders=False).double().eval()
    with torch.no_grad():
        pooled = module(point)
    got = pooled_by_voxel(pooled.coord, pooled.grid_coord, pooled.batch)
    assert sorted(got) == sorted(POOLED_MEANS)
    for voxel, mean in POOLED_MEANS.items():
        torch.testing.assert_close(torch.tensor(got[voxel], dtype=torch.float64),
                                   torch.tensor(mean, dtype=torch.float64), atol=1e-15, rtol=0)
    inverse = pooled.pooling_inverse                                  # each input point's pooled point
    assert [(b, *g)
            for b, g in zip(pooled.batch[inverse].tolist(), pooled.grid_coord[inverse].tolist(), strict=True)] == \
        [(b, *(g >> 1 for g in grid)) for b, grid in zip([0] * 6 + [1] * 3, POOL_GRID, strict=True)]


def test_geope_after_the_pooling_reads_the_pooled_means(monkeypatch):
    """PTv3 with GeoPE on the two clouds above: the attention of stage 1 (after the stride-2 pooling) hands
    its encoding the voxel means as the points' coordinates."""
    from tests.model.ptv3.test_seg import net
    model = net("geope", 64)
    pe = model.backbone.enc.enc1.block0.attn.pe
    seen, attention = [], pe.attention
    monkeypatch.setattr(pe, "attention", lambda q, k, v, coord, grid, **kw: seen.append(coord) or
                        attention(q, k, v, coord, grid, **kw))
    with torch.no_grad():
        model(torch.tensor(POOL_COORD), torch.rand(9, 6), torch.tensor([6, 9]), grid_coord=torch.tensor(POOL_GRID))
    assert len(seen) == 3                                    # enc0, enc1 (pooled), dec0 share the encoding
    stage1 = {tuple(round(c, 6) for c in row) for row in seen[1].reshape(-1, 3).tolist()}   # float32 to 1e-6
    assert stage1 == set(POOLED_MEANS.values())              # every slot holds a point (padding repeats one)


def test_a_training_batch_of_one_point_is_a_user_error_at_the_stem():
    """The stem's batch norm saw one row: torch's "Expected more than 1 value per channel when training" from
    inside BatchNorm1d, a traceback for a training batch cropped to one point."""
    from pointgeope.model.ptv3 import PointTransformerV3
    from pointgeope.model.ptv3.pooling import SmallBatchError

    net = PointTransformerV3(in_channels=4, stride=(2,), enc_depths=(1, 1), enc_channels=(8, 16),
                             enc_num_head=(1, 2), enc_patch_size=(16, 16), dec_depths=(1,), dec_channels=(8,),
                             dec_num_head=(1,), dec_patch_size=(16,))
    one = dict(coord=torch.zeros(1, 3), grid_coord=torch.zeros(1, 3, dtype=torch.long), feat=torch.randn(1, 4),
               offset=torch.tensor([1]))
    with pytest.raises(SmallBatchError) as err:
        net.train()(**one)
    assert str(err.value) == ("a training batch of 1 point reaches the batch norm of PTv3's stem, which needs two or "
                              "more; train on batches of two points or more")
    with torch.no_grad():                                    # eval: the running statistics, one row is fine
        assert net.eval()(**one).shape == (1, 8)


def test_stride_one_keeps_the_grid_and_merges_only_shared_voxels():
    """Stride 1 = 2^0 (Pointcept's assertion ``stride == 2 ** (ceil(stride) - 1).bit_length()`` lets it through;
    it was refused here): the grid is kept, each voxel is one pooled point, and the points sharing a voxel are
    merged: max of their projected features, mean of their coordinates. Reference from the definition, by
    grouping the rows on (cloud, voxel)."""
    grid = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 0, 0], [2, 1, 3], [1, 0, 0], [0, 0, 0], [0, 0, 0], [5, 5, 5]])
    coord = grid * 0.1 + torch.arange(8, dtype=torch.float64)[:, None] * 0.01
    feat = torch.randn(8, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    offset = torch.tensor([5, 8])                                  # cloud 1 holds (0,0,0) twice and (5,5,5)
    point = PointBatch.from_inputs(coord, grid, feat, offset)
    point.serialize(("z", "hilbert"))
    torch.manual_seed(0)
    module = SerializedPooling(4, 3, stride=1, shuffle_orders=False).double().eval()
    with torch.no_grad():
        pooled = module(point)
        projected = feat @ module.proj.weight.T + module.proj.bias
    batch = [0] * 5 + [1] * 3
    groups: dict = {}
    for i, (b, g) in enumerate(zip(batch, grid.tolist(), strict=True)):
        groups.setdefault((b, *g), []).append(i)
    got = {(b, *g): row for row, (b, g) in enumerate(zip(pooled.batch.tolist(), pooled.grid_coord.tolist(),
                                                          strict=True))}
    assert sorted(got) == sorted(groups) and len(got) == 5
    assert pooled.serialized_depth == point.serialized_depth
    for voxel, members in groups.items():
        torch.testing.assert_close(pooled.feat[got[voxel]], projected[members].amax(0), atol=1e-15, rtol=0)
        torch.testing.assert_close(pooled.coord[got[voxel]], coord[members].mean(0), atol=1e-15, rtol=0)
    assert [got[(b, *g)] for b, g in zip(batch, grid.tolist(), strict=True)] == pooled.pooling_inverse.tolist()


def _pointcept_accepts(stride) -> bool:
    """Pointcept's assertion in ``SerializedPooling.__init__``, as written there (its own failure counts as no)."""
    try:
        return stride == 2 ** (math.ceil(stride) - 1).bit_length()
    except (TypeError, ValueError, OverflowError):
        return False


@pytest.mark.parametrize("stride", [1, 2, 4, 8, np.int64(4), np.int32(2), np.uint8(8), 2.0, 4.0, np.float32(8.0),
                                    3, 6, 0, -2, 2.5, 0.5, np.int64(3), np.float64(2.5), float("inf"), float("nan")])
def test_stride_accepted_exactly_where_pointcept_accepts_it(stride):
    """Whole numbers in any type (numpy integers, ``2.0``) that are powers of two pass, as Pointcept's assertion
    lets them (``np.int64(4)`` and ``2.0`` were refused here); the others are refused in one line naming the value.
    The pooling then works on the ``int``: the same pooled points as for ``int(stride)``."""
    problem = stride_problem(stride)
    assert (problem is None) == _pointcept_accepts(stride)
    if problem is not None:
        assert problem == f"expected a power of two (1, 2, 4, 8, ...), got {stride!r}"
        with pytest.raises(ValueError, match=r"^stride: expected a power of two"):
            SerializedPooling(4, 3, stride=stride)
        return
    point = make_point((40, 23), 4, 3)
    torch.manual_seed(0)
    given = SerializedPooling(4, 3, stride=stride, shuffle_orders=False).eval()
    torch.manual_seed(0)
    plain = SerializedPooling(4, 3, stride=int(stride), shuffle_orders=False).eval()
    assert given.stride == int(stride) and type(given.stride) is int
    with torch.no_grad():
        a, b = given(point), plain(point)
    torch.testing.assert_close(a.feat, b.feat, atol=0, rtol=0)
    assert torch.equal(a.grid_coord, b.grid_coord) and torch.equal(a.pooling_inverse, b.pooling_inverse)


def test_a_bool_stride_is_refused():
    """``True`` is an ``int`` to Python (and 1 to Pointcept's assertion) but no stride a caller means: refused."""
    assert stride_problem(True) == "expected a power of two (1, 2, 4, 8, ...), got True"
