"""PTv3 training batches too small for batch norm (pointgeope/engine/small_batch.py): ``data.voxel_max=1`` where a
batch may be one cloud is refused before training; a batch cut, cropped or voxelised to one row is one line
naming the key that made it so. Before: torch's "Expected more than 1 value per channel when training"
traceback (exit 1) from the stem, or the pooling's line blaming data.grid_size for a crop's doing."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from pointgeope.engine.small_batch import batch_norm_problem, small_batch_advice
from tests.engine.conftest import one_line
from tests.engine.test_ptv3_engine import PTV3_DEMO, TINY3


def train(two_folds, run, *extra, stages=True):
    """``stages=False``: the demo's three stages, not TINY3's two."""
    tiny = [k for k in TINY3 if stages or not k.startswith("model.")]
    return ["train", "--config", str(PTV3_DEMO), "--test-area", "1", "--data-root", str(two_folds),
            "--run-dir", str(run), *tiny, *extra]


@pytest.mark.parametrize("batch, mix, refused", [(1, 0.0, True), (1, 0.8, True), (2, 0.8, True), (2, 0.0, False),
                                                 (3, 0.8, False), (4, 1.0, False)])
def test_one_point_samples_are_refused_where_a_batch_may_be_one_cloud(batch, mix, refused):
    """Mix3D merges a batch's samples pairwise: two samples may be one cloud, three never are."""
    data = SimpleNamespace(voxel_max=1, mix_prob=mix)
    assert (batch_norm_problem(data, batch) is not None) == refused
    assert batch_norm_problem(SimpleNamespace(voxel_max=2, mix_prob=mix), batch) is None


def test_the_advice_names_the_key_that_made_the_cloud_small():
    data = SimpleNamespace(voxel_max=4, crop_rate=None, grid_size=0.1)
    assert "data.voxel_max=4 cuts each sample" in small_batch_advice(data, 4)        # one sample cut to it
    assert "data.voxel_max=4 cuts each sample" in small_batch_advice(data, 8)        # a Mix3D pair of them
    assert small_batch_advice(data, 3).startswith("the batch is one cloud of 3 points: data.grid_size=0.1 m")
    cropped = small_batch_advice(SimpleNamespace(voxel_max=None, crop_rate=0.001, grid_size=0.1), 2)
    assert "data.crop_rate=0.001 keeps that fraction of a sample's voxels of data.grid_size=0.1 m (about 2000 " \
           "before the crop); raise data.crop_rate or lower data.grid_size" in cropped
    coarse = small_batch_advice(SimpleNamespace(voxel_max=None, crop_rate=0.6, grid_size=5), 3)
    assert "(about 5 before the crop); lower data.grid_size or raise data.crop_rate" in coarse
    assert "fewer stages" not in small_batch_advice(data, 1) and "fewer stages" in coarse


def test_a_batch_of_one_point_is_refused_before_training(two_folds, tmp_path, capsys):
    line = one_line(capsys, 2, train(two_folds, tmp_path / "run", "data.voxel_max=1", "data.batch_size=1",
                                     "data.mix_prob=0"))
    assert line == ("pointgeope train: error: data.voxel_max=1 with 1 sample per process: a PTv3 training batch of "
                    "one point (or two in one voxel), and its batch norm needs two rows or more; raise "
                    "data.voxel_max (PTv3's recipe: 204800) or data.batch_size")
    assert not list(tmp_path.rglob("*.pt"))


@pytest.mark.parametrize("extra, points, cause", [
    (["data.crop_rate=0.0001"], 1, "data.crop_rate=0.0001 keeps that fraction of a sample's voxels"),
    (["data.crop_rate=0.001"], 2, "data.crop_rate=0.001 keeps that fraction of a sample's voxels"),
    (["data.voxel_max=2"], 2, "data.voxel_max=2 cuts each sample to that many points; raise data.voxel_max")])
def test_a_batch_made_too_small_names_its_key(two_folds, tmp_path, capsys, extra, points, cause):
    line = one_line(capsys, 2, train(two_folds, tmp_path / "run", "data.batch_size=1", "data.mix_prob=0", *extra,
                                     stages=False))
    assert f"needs two or more; the batch is one cloud of {points} point" in line and cause in line, line
    assert "or raise data.batch_size" in line


def test_the_steps_rewrite_keeps_the_errors_class():
    """train_step rewrites a too-small batch's advice naming the config keys; it re-raised the base
    SmallBatchError, so a caller catching the public CoarsePoolingError missed it."""
    import torch

    from pointgeope.engine.config import load_config
    from pointgeope.engine.step import train_step
    from pointgeope.model.ptv3.pooling import CoarsePoolingError

    def net(*args, **kwargs):
        raise CoarsePoolingError("PTv3's pooling merged the 2 voxels of a training batch into one", "advice")

    cfg = load_config(PTV3_DEMO, ["data.crop_rate=0.001"])
    batch = SimpleNamespace(pos=torch.zeros(2, 3), x=torch.zeros(2, 6), ptr=torch.tensor([0, 2]), grid_coord=None)
    with pytest.raises(CoarsePoolingError) as err:
        train_step(cfg, None, net, batch, torch.device("cpu"))
    assert str(err.value).startswith("PTv3's pooling merged the 2 voxels of a training batch into one; the batch is "
                                     "one cloud of 2 points: data.crop_rate=0.001 keeps")


def test_the_advice_names_the_stage_keys_of_the_backbone():
    """PTv1's one-cloud batches are said through the same advice; its fewer stages are model.planes' lists, not
    PTv3's model.ptv3.enc_depths (which a PTv1 config does not read)."""
    from pointgeope.engine.small_batch import PTV1_STAGES

    data = SimpleNamespace(voxel_max=None, crop_rate=None, grid_size=0.1)
    assert small_batch_advice(data, 300, PTV1_STAGES).endswith(
        "or use fewer stages (model.planes and the lists with it)")
    assert small_batch_advice(data, 300).endswith("or use fewer stages (model.ptv3.enc_depths and the lists with it)")


@pytest.mark.parametrize("voxel_max, batch, mix, refused", [
    (511, 1, 0.0, True), (512, 1, 0.0, False), (100, 2, 0.0, False), (255, 2, 0.5, True), (256, 2, 0.5, False),
    (1, 3, 1.0, False), (None, 1, 0.0, False)])
def test_ptv1_samples_too_small_for_the_last_stage_are_refused_where_a_batch_may_be_one_cloud(voxel_max, batch, mix,
                                                                                               refused):
    """The published strides (1, 4, 4, 4, 4): a cloud of n points keeps max(1, n // 256) at the last stage, two
    rows from n = 512; a Mix3D pair of two samples of voxel_max points is one cloud of 2 voxel_max."""
    from pointgeope.engine.small_batch import ptv1_batch_norm_problem

    problem = ptv1_batch_norm_problem(SimpleNamespace(voxel_max=voxel_max, mix_prob=mix), [1, 4, 4, 4, 4], batch)
    assert (problem is not None) == refused


def run_ptv1(two_folds, run, capsys, *extra):
    from tests.engine.conftest import TINY
    from tests.engine.test_ptv3_engine import REPO

    return one_line(capsys, 2, ["train", "--config", str(REPO / "configs" / "demo.yaml"), "--test-area", "1",
                                "--data-root", str(two_folds), "--run-dir", str(run), *TINY, *extra])


def test_ptv1_samples_cut_below_the_last_stage_are_refused_before_training(two_folds, tmp_path, capsys):
    """PTv1 (strides 1, 4) on samples cut to 5 points, one a batch: stage 2 keeps one point in every step. It ended
    at the first step (torch's "Expected more than 1 value per channel when training" traceback, later the step's
    line), after the model and the loader were built; the config says it at the start."""
    line = run_ptv1(two_folds, tmp_path / "run", capsys, "data.voxel_max=5", "data.batch_size=1", "data.mix_prob=0")
    assert line == ("pointgeope train: error: data.voxel_max=5 with 1 sample per process: a PTv1 training batch of "
                    "one cloud of at most 5 points keeps 1 at its last stage (model.strides [1, 4]: n // 4), and its "
                    "batch norm needs two rows or more; raise data.voxel_max to 8 or more, or data.batch_size")
    assert not (tmp_path / "run" / "area_1" / "last.pt").exists()


def test_a_ptv1_batch_with_a_stage_of_one_point_names_the_key_that_made_it_so(two_folds, tmp_path, capsys):
    """Data that voxelises smaller than data.voxel_max anyway (voxels of 5 m: a room of a few points) is the step's
    to say: stage 2 keeps one point, where torch's traceback ended the run (exit 1)."""
    line = run_ptv1(two_folds, tmp_path / "run", capsys, "data.grid_size=5", "data.batch_size=1", "data.mix_prob=0")
    assert re.fullmatch(r"pointgeope train: error: a training batch of 1 cloud of [1-7] points? keeps 1 at stage 2 "
                        r"\(strides \(1, 4\): a cloud of n points keeps max\(1, n // 4\) there\), and its batch norm "
                        r"needs two rows or more; the batch is one cloud of [1-7] points?: data.grid_size=5.0 m "
                        r"leaves a sample that few voxels; lower data.grid_size, .*", line)
