"""PointTransformerSeg's inputs (pointgeope/model/network.py ``_inputs``): a PyG ``Data`` with a ``batch`` vector
and no ``ptr``, offsets as a host list, and the constructor's positive finite scales."""
from __future__ import annotations

import re

import pytest
import torch
from torch_geometric.data import Batch, Data

from pointgeope.model.network import PointTransformerSeg

TWO_STAGES = dict(pe="geope", in_channels=6, num_classes=5, planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                  strides=(1, 4), neighbours=(4, 4), share_planes=4)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return PointTransformerSeg(**TWO_STAGES).eval()


def _examples(sizes=(5, 12, 9), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Data(pos=torch.rand(n, 3, generator=g), x=torch.rand(n, 6, generator=g)) for n in sizes]


def test_a_batch_vector_without_ptr_gives_the_batchs_clouds(model):
    """PyG's batch vector (sorted) describes the clouds as ``ptr`` does: the same logits, exactly; without it the
    whole is one cloud, so kNN, FPS and the cloud means crossed examples (the logits differed by 0.008)."""
    b = Batch.from_data_list(_examples())
    with torch.no_grad():
        expected = model(b)
        got = model(Data(pos=b.pos, x=b.x, batch=b.batch))
        one_cloud = model(Data(pos=b.pos, x=b.x))
    assert torch.equal(got, expected)
    assert not torch.allclose(one_cloud, expected, atol=1e-4)
    with torch.no_grad():             # example indices need not start at 0 nor be consecutive: runs are examples
        assert torch.equal(model(Data(pos=b.pos, x=b.x, batch=3 * b.batch + 2)), expected)


def test_an_unsorted_or_misshapen_batch_vector_is_one_line(model):
    b = Batch.from_data_list(_examples())
    swapped = b.batch.clone()
    swapped[[4, 5]] = swapped[[5, 4]]
    with pytest.raises(ValueError, match=r"expected data.batch sorted .*got batch\[5\] = 0 after 1"):
        model(Data(pos=b.pos, x=b.x, batch=swapped))
    with pytest.raises(ValueError, match=r"expected data.batch an integer tensor of shape \(26,\), got"):
        model(Data(pos=b.pos, x=b.x, batch=b.batch[:-1]))
    with pytest.raises(ValueError, match=re.escape("expected data.batch an integer tensor")):
        model(Data(pos=b.pos, x=b.x, batch=b.batch.float()))


def test_a_host_list_offset_is_the_tensor_offset(model):
    g = torch.Generator().manual_seed(3)
    coord, feat = torch.rand(30, 3, generator=g), torch.rand(30, 6, generator=g)
    with torch.no_grad():
        expected = model(coord, feat, torch.tensor([2, 10, 30]))
        assert torch.equal(model(coord, feat, [2, 10, 30]), expected)
        assert torch.equal(model(coord, feat, (2, 10, 30)), expected)
    with pytest.raises(ValueError, match=r"expected integer offset .*got dtype torch.float32"):
        model(coord, feat, [2.5, 10, 30])                        # not truncated to 2
    with pytest.raises(ValueError, match=r"offset\[-1\] == number of points 30"):
        model(coord, feat, [2, 10, 29])
    with pytest.raises(ValueError, match=r"expected offset a .*integer tensor or list of ints, got"):
        model(coord, feat, ["2", 30])


@pytest.mark.parametrize("bad", [0.0, -100.0, float("nan"), float("inf")])
def test_geope_base_and_grid_size_not_finite_and_positive_are_named(bad):
    """A base <= 0 made every GeoPE block after the first NaN, silently; a NaN grid size NaN phases."""
    for name in ("geope_base", "grid_size"):
        with pytest.raises(ValueError, match=rf"expected {name} a finite number > 0, got {bad}"):
            PointTransformerSeg(**{**TWO_STAGES, name: bad})


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("model_dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_input_dtypes_the_network_cannot_take_are_one_type_error_naming_them(model, model_dtype, autocast):
    """A float64 cloud (``torch.from_numpy``) into a float32 network died inside a ``Linear`` ("expected m1 and m2
    to have the same dtype"). Every pair of input dtypes either runs, or is a ``TypeError`` naming ``coord`` or
    ``feat`` and the model's dtype, and then the unchecked network (``body``) fails on it: nothing that ran is
    refused. Coordinates narrower than the model (float16 into float32) run, as before."""
    net = PointTransformerSeg(**TWO_STAGES).eval().to(model_dtype)
    g = torch.Generator().manual_seed(0)
    coord64, feat64 = torch.rand(24, 3, generator=g, dtype=torch.float64), torch.rand(24, 6, generator=g)
    refused = 0
    for coord_dtype in DTYPES:
        for feat_dtype in DTYPES:
            coord, feat = coord64.to(coord_dtype), feat64.to(feat_dtype)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                try:
                    net(coord, feat, [24])
                    continue
                except TypeError as e:
                    refused += 1
                    assert re.fullmatch(rf"expected (coord|feat) in the model's dtype {model_dtype}( or narrower)?, "
                                        r"got torch\.\w+: cast it .*", str(e)), str(e)
                with pytest.raises(RuntimeError):
                    net.body(coord, feat, net.hierarchy_spec(coord, [24]))
    assert refused >= 9                              # every feature dtype but the model's, at least
    with pytest.raises(TypeError, match=r"expected coord in the model's dtype torch.float32 or narrower, got "
                                        r"torch.float64: cast it \(coord.to\(torch.float32\)\) or the model"):
        model(coord64, feat64, [24])


def test_a_config_of_another_backbone_is_refused_in_one_line_naming_the_key():
    """``ModelConfig(backbone="ptv3")`` built a Point Transformer v1 whose ``config`` said ptv3, without a word."""
    from pointgeope.model import ModelConfig

    for backbone in ("ptv3", "ptv4"):
        with pytest.raises(ValueError, match=rf"^expected backbone 'ptv1' for PointTransformerSeg, got '{backbone}'; "
                                             r"Point Transformer V3 \(backbone 'ptv3'\) is "
                                             r"pointgeope.model.ptv3.seg.PTv3Seg"):
            PointTransformerSeg(ModelConfig(backbone=backbone))
        with pytest.raises(ValueError, match="expected backbone 'ptv1'"):
            PointTransformerSeg(**TWO_STAGES, backbone=backbone)


@pytest.mark.parametrize("bad, error, message", [
    (dict(share_planes=0), ValueError, r"expected share_planes >= 1, got 0"),
    (dict(planes=(-8, 16)), ValueError, r"expected planes\[0\] >= 1, got -8"),
    (dict(planes="8,16"), TypeError, r"expected planes a list of ints, one per stage, got '8,16'"),
    (dict(planes=(8.0, 16)), TypeError, r"expected planes\[0\] an int >= 1, got 8.0 \(float\)"),
    (dict(num_classes=0), ValueError, r"expected num_classes >= 1, got 0"),
    (dict(in_channels=-1), ValueError, r"expected in_channels >= 1, got -1"),
    (dict(blocks=(1, -1)), ValueError, r"expected blocks\[1\] >= 0, got -1"),
    (dict(decoder_blocks=2), TypeError, r"expected decoder_blocks a list of ints, one per stage, got 2"),
])
def test_sizes_are_checked_by_name_before_a_layer_is_built(bad, error, message):
    """Each was a raw torch error ("integer modulo by zero", "negative dimension"), a stage per character of a
    string, or (0 classes) accepted."""
    with pytest.raises(error, match=f"^{message}$"):
        PointTransformerSeg(**{**TWO_STAGES, **bad})


def test_sizes_that_are_allowed_still_build():
    """0 attention blocks at a stage (the transition alone) and NumPy ints are sizes, as in the YAML config."""
    import numpy as np

    net = PointTransformerSeg(**{**TWO_STAGES, "blocks": (0, np.int64(1)), "decoder_blocks": [1, 0]}).eval()
    with torch.no_grad():
        assert net(torch.rand(20, 3), torch.rand(20, 6), [20]).shape == (20, 5)


def test_the_attention_layer_names_share_planes_before_dividing_by_it():
    from pointgeope.model import PointTransformerLayer

    with pytest.raises(ValueError, match=r"^expected share_planes >= 1, got 0$"):        # ZeroDivisionError before
        PointTransformerLayer(8, share_planes=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_check_finite_refuses_non_finite_features_naming_the_row(model, bad):
    """A NaN or an infinity in ``feat`` made every logit of its cloud NaN without a word; with ``check_finite``
    it is a ValueError naming ``feat`` and the first bad row. Off (the default, as torch's modules) nothing is
    read and the NaN comes through, so the option is what decides."""
    coord, feat = torch.rand(12, 3), torch.rand(12, 6)
    feat[7, 2] = bad
    assert model(coord, feat, [12]).isnan().any()                    # the default: torch's convention
    checked = PointTransformerSeg(**TWO_STAGES, check_finite=True).eval()
    with pytest.raises(ValueError, match=r"expected finite feat, got 1 NaN or infinite entries \(the first in row 7"):
        checked(coord, feat, [12])
    assert torch.isfinite(checked(coord, torch.rand(12, 6), [12])).all()


def test_a_training_batch_with_a_stage_of_one_point_is_one_line_saying_what_to_do():
    """Strides (1, 4): a cloud of n points keeps max(1, n // 4) at stage 2, so one cloud of 5 points reaches a batch
    norm with one row, where torch raised "Expected more than 1 value per channel when training" from inside the
    forward, naming neither the stage nor a way out. One cloud of 8 points, two clouds of any size, and eval mode
    all run."""
    from pointgeope.model.small_batch import SmallBatchError

    torch.manual_seed(0)
    net = PointTransformerSeg(**TWO_STAGES).train()
    with pytest.raises(SmallBatchError) as err:
        net(torch.rand(5, 3), torch.rand(5, 6), [5])
    assert str(err.value) == ("a training batch of 1 cloud of 5 points keeps 1 at stage 2 (strides (1, 4): a cloud "
                              "of n points keeps max(1, n // 4) there), and its batch norm needs two rows or more; "
                              "give one cloud of 8 points or more, or two clouds or more, or call model.eval() to "
                              "predict")
    with pytest.raises(SmallBatchError, match="batch of 1 cloud of 1 point keeps 1 at stage 1 "):
        net(torch.rand(1, 3), torch.rand(1, 6), [1])
    assert net(torch.rand(8, 3), torch.rand(8, 6), [8]).shape == (8, 5)
    assert net(torch.rand(3, 3), torch.rand(3, 6), [1, 3]).shape == (3, 5)    # clouds of 1 and 2 points
    assert net.eval()(torch.rand(1, 3), torch.rand(1, 6), [1]).shape == (1, 5)


@pytest.mark.parametrize("flag", ["no", "false", [False], None, 0, torch.tensor(True)])
def test_check_finite_takes_a_bool_only(flag):
    """``check_finite="no"`` (or ``[False]``) is truthy: before, it turned the checks on against the ask (and
    ``None``, ``0`` turned them off); now anything but ``True`` or ``False`` is one ``TypeError`` naming it."""
    kinds = "str|list|NoneType|int|Tensor"
    with pytest.raises(TypeError, match=rf"^expected check_finite True or False, got .* \(({kinds})\)$"):
        PointTransformerSeg(**TWO_STAGES, check_finite=flag)
