"""PTv3's test does not depend on how its fragments are batched: ``vote_room`` with one fragment per forward
(``eval.batch_points: 1``, Pointcept's ``SemSegTester``) and with every fragment of the 10 views in one
batch give the same probabilities, also for a room whose views straddle a power of two in grid cells (the
serialization depth, and so the Hilbert orders, would then differ between the views in one batch)."""
from __future__ import annotations

import numpy as np
import torch

from pointgeope.engine import build
from pointgeope.engine.config import load_config
from pointgeope.engine.evaluate import vote_room
from pointgeope.engine.vote_batches import packed
from tests.engine.test_ptv3_engine import PTV3_DEMO

# Two stages of four blocks (orders z, z-trans, hilbert, hilbert-trans), patches of 16: Hilbert orders decide
# patches. Grid 0.12 m (the demo's), so a 7.4 m room's views (scale 0.9 .. 1.1) reach cells 55 .. 67.
NET = ["model.ptv3.stride=[2]", "model.ptv3.enc_depths=[4, 4]", "model.ptv3.enc_channels=[18, 36]",
       "model.ptv3.enc_num_head=[1, 2]", "model.ptv3.enc_patch_size=[16, 16]", "model.ptv3.dec_depths=[4]",
       "model.ptv3.dec_channels=[18]", "model.ptv3.dec_num_head=[1]", "model.ptv3.dec_patch_size=[16]",
       "model.pe=none", "eval.max_fragments=1"]


def box_room(length: float, n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Floor, ceiling and two long walls of a ``length x 3 x 2.5`` m room, random colours, and the surfaces'
    normals facing into the room (the recipe's features are ``[rgb | normal]``)."""
    rng = np.random.default_rng(seed)
    u = rng.random((n, 3)) * [length, 3.0, 2.5]
    q = n // 4
    u[:q, 2], u[q:2 * q, 2], u[2 * q:3 * q, 1], u[3 * q:, 1] = 0.0, 2.5, 0.0, 3.0
    normal = np.repeat(np.float32([[0, 0, 1], [0, 0, -1], [0, 1, 0], [0, -1, 0]]), [q, q, q, n - 3 * q], axis=0)
    return u.astype(np.float32), rng.integers(0, 256, (n, 3), dtype=np.uint8), normal


class Recorder(torch.nn.Module):
    """The network, recording each forward's clouds' serialization depths (bits of ``max(grid) + 1``)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.depths = net, []

    def forward(self, pos, x, offset, grid_coord):
        start, depths = 0, []
        for end in offset.tolist():
            depths.append(int(grid_coord[start:end].max() + 1).bit_length())
            start = end
        self.depths.append(depths)
        return self.net(pos, x, offset, grid_coord=grid_coord)


def mean_scores(length: float) -> tuple[dict[int, np.ndarray], dict[int, list[list[int]]]]:
    coord, color, normal = box_room(length)
    out, depths = {}, {}
    for batch_points in (1, 10**7):
        cfg = load_config(PTV3_DEMO, [*NET, f"eval.batch_points={batch_points}"])
        torch.manual_seed(0)
        model = Recorder(build.model(cfg).eval())
        votes = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=0, normal=normal)
        out[batch_points], depths[batch_points] = votes.scores / votes.votes[:, None], model.depths
    return out, depths


def test_ptv3_test_probabilities_do_not_depend_on_the_batching_across_a_power_of_two():
    out, depths = mean_scores(7.4)
    one = [d for forward in depths[1] for d in forward]
    assert len(one) == 10 and set(one) == {6, 7}              # the views straddle 64 cells
    np.testing.assert_allclose(out[10**7], out[1], rtol=0, atol=1e-6)
    assert np.array_equal(out[10**7].argmax(1), out[1].argmax(1))
    assert all(len(set(forward)) == 1 for forward in depths[10**7])   # a batch: one depth
    assert len(depths[10**7]) < len(one)                        # and batched it was


def test_packed_keeps_one_key_a_group():
    sizes = [(3, 6), (2, 6), (1, 7), (1, 7), (5, 7), (2, 6)]
    groups = list(packed(sizes, lambda p: p[0], limit=6, key=lambda p: p[1]))
    assert groups == [[(3, 6), (2, 6)], [(1, 7), (1, 7)], [(5, 7)], [(2, 6)]]
