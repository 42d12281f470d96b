"""``eval.protocol: ptv3``: Pointcept's 10 views of grid-sample fragments, each forward given its pieces'
``grid_coord``, every point's softmax summed over all of them and aligned to the point it was made for."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from pointgeope.engine import build
from pointgeope.engine.config import TTAConfig, load_config
from pointgeope.engine.evaluate import vote_room
from pointgeope.errors import UserError
from tests.engine.conftest import REPO

C = 13
PTV3 = ["model.backbone=ptv3", "model.pe=none", "data.augment=pointcept_ptv3"]   # the test of PTv3 is PTv3's


class GridColourClassifier(torch.nn.Module):
    """PTv3's call ``model(coord, feat, offset, grid_coord=...)``: logits from each point's own red channel
    (``feat[:, 0]``, 0..1), so a misplaced prediction is a wrong class; records every forward's pieces."""

    def __init__(self):
        super().__init__()
        self.pieces: list[tuple[int, int]] = []     # (points, distinct grid cells) of each piece

    def forward(self, coord, feat, offset, grid_coord):
        assert grid_coord.shape == coord.shape and grid_coord.dtype == torch.int64
        start = 0
        for end in offset.tolist():
            cells = torch.unique(grid_coord[start:end], dim=0).shape[0]
            self.pieces.append((end - start, cells))
            start = end
        cls = (torch.round(feat[:, 0] * 255).long() // 20) % C
        return torch.nn.functional.one_hot(cls, C).float() * 5.0


def room(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    coord = (rng.random((n, 3)) * [4.0, 3.0, 2.5] + [7.0, 2.0, 0.3]).astype(np.float32)
    # a clump of 12 points in one grid cell: 12 fragments a view (the forwards and their bookkeeping go with the
    # fragments: 60 made the views' test 4x dearer and checked nothing more)
    coord[:12] = coord[0]
    return coord, rng.integers(0, 256, (n, 3), dtype=np.uint8)


def test_ptv3_protocol_votes_softmax_over_ten_views_of_fragments():
    coord, color = room(n=600)                                      # most grid cells hold one point, the clump 12
    cfg = load_config(None, [*PTV3, "eval.protocol=ptv3", "eval.vote=softmax", "data.grid_size=0.2",
                             "eval.batch_points=1"])                # one piece per forward
    model = GridColourClassifier()
    result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=4)
    assert len(result.fragments) == 10 and min(result.fragments) >= 12           # the clump's 12 points
    assert len(model.pieces) == sum(result.fragments)
    assert all(points == cells for points, cells in model.pieces)                # one point per grid cell
    start = 0
    for f in result.fragments:                                                    # a view's pieces: same size
        assert len({points for points, _ in model.pieces[start:start + f]}) == 1
        start += f
    assert (result.votes >= 10).all() and result.filled == 0
    assert int(result.votes.sum()) == sum(points for points, _ in model.pieces)
    np.testing.assert_allclose(result.scores.sum(1), result.votes, rtol=1e-4)  # float32 sums
    assert (result.scores.argmax(1) == (color[:, 0].astype(np.int64) // 20) % C).all()


def test_ptv3_protocol_is_seeded_and_max_fragments_caps_each_view():
    coord, color = room(n=800, seed=1)
    base = [*PTV3, "eval.protocol=ptv3", "eval.vote=softmax", "data.grid_size=0.2"]
    a = vote_room(GridColourClassifier(), coord, color, load_config(None, base), torch.device("cpu"), seed=2)
    b = vote_room(GridColourClassifier(), coord, color, load_config(None, base), torch.device("cpu"), seed=2)
    np.testing.assert_array_equal(a.votes, b.votes)
    capped = vote_room(GridColourClassifier(), coord, color, load_config(None, base + ["eval.max_fragments=2"]),
                       torch.device("cpu"), seed=2)
    assert (capped.votes >= 1).all() and capped.votes.sum() < a.votes.sum()


def test_ptv3_protocol_refuses_ptv1_test_views():
    coord, color = room(n=100)
    with pytest.raises(UserError, match=r"eval.tta.flips=true: the PTv1 test's only"):   # when the config is read
        load_config(None, [*PTV3, "eval.protocol=ptv3", "eval.tta.flips=true"])
    cfg = load_config(None, [*PTV3, "eval.protocol=ptv3"])                            # and a config made in code
    cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, tta=TTAConfig(flips=True)))
    with pytest.raises(UserError, match="10 test views"):
        vote_room(GridColourClassifier(), coord, color, cfg, torch.device("cpu"))


class PrecisionProbe(torch.nn.Module):
    """A linear layer whose output dtype tells the precision the forward ran in."""

    def __init__(self):
        super().__init__()
        self.lin, self.dtypes = torch.nn.Linear(6, C), set()

    def forward(self, coord, feat, offset, grid_coord=None):
        out = self.lin(feat)
        self.dtypes.add(out.dtype)
        return out


@pytest.mark.parametrize("protocol", ["ptv1", "ptv3"])
@pytest.mark.parametrize("eval_amp, dtype", [("none", torch.float32), ("bf16", torch.bfloat16)])
def test_both_tests_run_in_eval_amps_precision_whatever_train_amp(protocol, eval_amp, dtype, monkeypatch):
    # Both authors' tests are float32 (PTv1's tool/test.py, Pointcept's SemSegTester), whatever the training's
    # precision: eval.amp alone decides, for either protocol. Mixed precision is CUDA's only; on the CPU,
    # autocast_dtype and training's mixed_precision are made to answer as on CUDA (the CPU rule: test_amp_note.py).
    recipe = load_config(REPO / "configs" / "s3dis" / "ptv3_none.yaml")
    assert build.mixed_precision(recipe, torch.device("cuda")) == torch.float16         # the recipe's train.amp
    assert build.eval_precision(recipe, torch.device("cuda")) is None                   # its test: float32
    cuda_rule = {"bf16": torch.bfloat16, "fp16": torch.float16}
    monkeypatch.setattr(build, "autocast_dtype", lambda amp, device: cuda_rule.get(amp), raising=False)
    monkeypatch.setattr(build, "mixed_precision", lambda cfg, device: cuda_rule.get(cfg.train.amp))
    coord, color = room(500)
    given = [*PTV3, "eval.protocol=ptv3"] if protocol == "ptv3" else []
    cfg = load_config(None, [*given, "train.amp=bf16", *([] if eval_amp == "none" else [f"eval.amp={eval_amp}"])])
    model = PrecisionProbe()
    vote_room(model, coord, color, cfg, torch.device("cpu"), seed=0)
    assert model.dtypes == {dtype}
