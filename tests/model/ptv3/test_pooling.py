"""Serialized pooling (pointgeope/model/ptv3/pooling.py): the shuffle of the pooled orders follows the module's
own mode. Pointcept's pooling draws ``torch.randperm(K)`` in eval too (``shuffle_in_eval=True``, the default);
``shuffle_in_eval=False`` draws in training only."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.ptv3.pooling import CoarsePoolingError, SerializedPooling
from pointgeope.model.ptv3.structure import PointBatch
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
    assert "lower data.grid_size" in str(err.value)
    assert module(_cube(3)).feat.shape == (8, 8)             # 27 voxels -> the 2^3 voxels of grid >> 1
    with torch.no_grad():                                    # eval: the running statistics, one row is fine
        assert module.eval()(_cube(2)).feat.shape == (1, 8)
