"""PointTransformerV3 against Pointcept's own PT-v3m1: same weights, inputs and torch seed, same features.

The fixture ``tests/fixtures/ptv3_pointcept.pt`` was made by ``tests/fixtures/make_ptv3_fixture.py``, which ran
Pointcept's code (commit in ``meta``) with spconv 2.3.8 on the CPU; this test needs neither. Two variants
of a reduced-width network with all four orders, two poolings and unpoolings, and clouds shorter and longer
than a patch: the flash path's partition, and the non-flash fallback with RPE and upcasts; and three networks off
that path (``configs``). Target: max difference <= 1e-5 of the largest output, in float32.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pointgeope.model.ptv3 import ORDERS, PointTransformerV3, PTv3Segmentor, encode, pointcept_state_dict

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "ptv3_pointcept.pt"


@pytest.fixture(scope="module")
def fixture():
    return torch.load(FIXTURE, weights_only=True)


def _state(fixture, name):
    """The variant's state_dict: its own tensors over those of the first variant (which it shares)."""
    first = next(iter(fixture["variants"].values()))["state_dict"]
    return {**first, **fixture["variants"][name]["state_dict"]}


def _features(fixture, kwargs: dict, state: dict, train: bool, seed: int) -> torch.Tensor:
    """The features of ``PointTransformerV3(**kwargs)`` with the weights ``state``, in train mode or eval, on the
    fixture's inputs after ``torch.manual_seed(seed)`` (the orders' shuffle and DropPath draw from it)."""
    model = PointTransformerV3(**kwargs)
    model.load_state_dict(state, strict=True)
    model.train(train)
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(**fixture["inputs"])


def _assert_pointcepts(out: torch.Tensor, ref: torch.Tensor) -> None:
    """``out`` is Pointcept's ``ref``: the same shape, every value within 1e-5 of ``ref``'s largest."""
    assert out.shape == ref.shape
    assert (out - ref).abs().max() <= 1e-5 * ref.abs().max()


@pytest.mark.parametrize("name", ["flash", "fallback", "train"])
def test_features_equal_pointcepts(fixture, name):
    """``train``: batch norms on batch statistics and DropPath's draws between the order shuffles."""
    variant = fixture["variants"][name]
    _assert_pointcepts(_features(fixture, variant["kwargs"], _state(fixture, name), name == "train", variant["seed"]),
                       variant["out"])


@pytest.mark.parametrize("name", ["odd", "fallback_train", "encoder"])
def test_features_equal_pointcepts_off_the_base_path(fixture, name):
    """Networks with their own weights (``configs``, make_ptv3_fixture.py's CONFIGS): an order given as a string,
    strides 4 and 8, a stage of no block, patches of 1 and more than a cloud, no qkv bias, qk_scale, post-norm;
    the fallback with RPE and upcast_softmax in train mode with DropPath and dropout; the encoder only (enc_mode,
    ``flash``'s weights), whose rows are the coarsest stage's in its pooled order, as Pointcept's."""
    config = fixture["configs"][name]
    state = config["state_dict"] or {k: v for k, v in _state(fixture, "flash").items() if not k.startswith("dec.")}
    _assert_pointcepts(_features(fixture, config["kwargs"], state, config["train"], config["seed"]), config["out"])


def test_other_seed_shuffles_other_orders(fixture):
    """The seed matters (the orders are shuffled by torch.randperm, in eval too): the check above would
    catch a network that ignored the shuffle."""
    variant = fixture["variants"]["flash"]
    model = PointTransformerV3(**variant["kwargs"])
    model.load_state_dict(_state(fixture, "flash"), strict=True)
    model.eval()
    diffs = []
    for seed in range(3):
        torch.manual_seed(variant["seed"] + 1 + seed)
        with torch.no_grad():
            diffs.append(float((model(**fixture["inputs"]) - variant["out"]).abs().max()))
    assert max(diffs) > 1e-3


def test_pooling_shuffle_switch(fixture):
    """``pooling_shuffle_orders=False`` draws no randperm at poolings: the same seed then gives the same
    output as a run where the generator is reseeded before each pooling."""
    variant = fixture["variants"]["flash"]
    model = PointTransformerV3(**dict(variant["kwargs"], pooling_shuffle_orders=False)).eval()
    model.load_state_dict(_state(fixture, "flash"), strict=True)
    torch.manual_seed(0)
    with torch.no_grad():
        a = model(**fixture["inputs"])
    def reseed(*_):
        torch.manual_seed(1234)

    for module in model.modules():
        if type(module).__name__ == "SerializedPooling":
            module.register_forward_pre_hook(reseed)
    torch.manual_seed(0)
    with torch.no_grad():
        b = model(**fixture["inputs"])
    assert torch.equal(a, b)


@pytest.mark.parametrize("depth", [3, 9, 16])
def test_codes_equal_pointcepts_bitwise(fixture, depth):
    codes = fixture["codes"][depth]
    for order in ORDERS:
        assert torch.equal(encode(codes["grid_coord"], codes["batch"], depth, order), codes[order]), order


def test_a_pointcept_segmentor_checkpoint_loads(fixture):
    """A checkpoint as Pointcept's trainer saves it (DDP's ``module.`` prefix, ``backbone.`` and ``seg_head.``)
    loads strictly into PTv3Segmentor and gives the head applied to Pointcept's features."""
    variant = fixture["variants"]["flash"]
    head = torch.nn.Linear(8, 13)
    state = {f"module.backbone.{k}": v for k, v in _state(fixture, "flash").items()}
    state.update({f"module.seg_head.{k}": v for k, v in head.state_dict().items()})
    net = PTv3Segmentor(13, 8, PointTransformerV3(**variant["kwargs"]))
    net.load_state_dict(pointcept_state_dict({"epoch": 3, "state_dict": state}), strict=True)
    net.eval()
    torch.manual_seed(variant["seed"])
    with torch.no_grad():
        logits = net(**fixture["inputs"])
        ref = head(variant["out"])
    assert (logits - ref).abs().max() <= 1e-5 * ref.abs().max()
    with pytest.raises(ValueError, match="state_dict"):
        pointcept_state_dict({"state_dict": {}})


def test_a_pointcept_checkpoint_file_loads_from_its_path(fixture, tmp_path):
    """Pointcept's trainer saves the best mean IoU as a numpy float, which torch.load's weights_only default
    refuses; pointcept_state_dict(path) reads the file as it is, to the same weights as from the dict."""
    import numpy as np

    state = {f"module.backbone.{k}": v for k, v in _state(fixture, "flash").items()}
    state.update({"module.seg_head.weight": torch.randn(13, 8), "module.seg_head.bias": torch.randn(13)})
    path = tmp_path / "model_best.pth"
    torch.save({"epoch": 3, "state_dict": state, "best_metric_value": np.float64(0.61)}, path)
    with pytest.raises(Exception, match=r"[Ww]eights[ _]only"):
        torch.load(path, weights_only=True)
    loaded = pointcept_state_dict(path)
    assert loaded.keys() == pointcept_state_dict({"state_dict": state}).keys()
    assert all(torch.equal(loaded[k[len("module."):]], v) for k, v in state.items())
    net = PTv3Segmentor(13, 8, PointTransformerV3(**fixture["variants"]["flash"]["kwargs"]))
    net.load_state_dict(pointcept_state_dict(str(path)), strict=True)


class _Annealer:
    def anneal(self):
        return 0.0


def test_a_pointcept_file_with_more_than_weights_is_one_line_with_the_trusted_load(tmp_path):
    """A Pointcept checkpoint saved under torch < 2.4 holds its OneCycleLR state with a bound method (here one of
    a class of this module), which the safe load does not run: torch's error was many lines; now one, naming
    the object and the call for a file one trusts, which gives the weights."""
    path = tmp_path / "model_last.pth"
    torch.save({"state_dict": {"module.seg_head.bias": torch.ones(13)},
                "scheduler": {"anneal_func": _Annealer().anneal}}, path)
    with pytest.raises(ValueError) as err:
        pointcept_state_dict(path)
    line = str(err.value)
    assert line.startswith(f"{path}: holds more than tensors and numbers (the global ") and "\n" not in line
    assert line.endswith("pass torch.load(path, weights_only=False) to pointcept_state_dict instead of its path")
    assert list(pointcept_state_dict(torch.load(path, weights_only=False))) == ["seg_head.bias"]


def test_a_pointcept_file_whose_bytes_changed_is_refused(tmp_path):
    """torch.load does not check the CRC-32 torch.save stores with each part: a flipped bit in a tensor's bytes
    loaded as another weight. pointcept_state_dict(path) checks them, as the engine's checkpoints are checked."""
    from tests.zip_bits import flip_bit

    path, weights = tmp_path / "model_best.pth", torch.arange(1000, dtype=torch.float32)
    torch.save({"epoch": 3, "state_dict": {"module.seg_head.weight": weights}}, path)
    part = flip_bit(path, 4000, 401)        # the tensor's bytes: a low bit of weights[100]
    assert not torch.load(path, weights_only=True)["state_dict"]["module.seg_head.weight"].equal(weights)
    with pytest.raises(ValueError) as err:
        pointcept_state_dict(path)
    assert str(err.value) == (f"{path}: its part {part} does not match the CRC-32 saved with it: its bytes "
                              "changed after it was written; copy the file again from where it was written")
