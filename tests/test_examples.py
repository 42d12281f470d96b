"""The examples in examples/ run and do what their docstrings say (a few steps, small settings)."""
from __future__ import annotations

import importlib.util
import math
import runpy
import sys

import pytest
import torch

from tests.conftest import REPO


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_thread():
    """The examples' small batches gain nothing from more threads (which spin on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_pyg_point_transformer_trains_with_rpe_and_geope(capsys, one_thread):
    losses = load("pyg_point_transformer").main(steps=6)
    assert set(losses) == {"rpe", "geope"}
    for pe, run in losses.items():
        assert len(run) == 6 and all(math.isfinite(v) for v in run)
        assert run[-1] < run[0] - 0.2, f"{pe}: {run}"                      # it learns
    assert losses["rpe"] != losses["geope"]                                  # the encodings differ
    out = capsys.readouterr().out
    assert "one synthetic office: " in out and "pe=geope  loss at steps 1, 2, 4, 6:" in out


def test_pygs_classification_example_rpe_gives_pygs_losses_bitwise_and_geope_trains(capsys, one_thread):
    """PyG's classification example with the layer swapped: `pe="rpe"` is PyG's `PointTransformerConv` step for
    step, bit for bit (same seed, weights, batches); `geope` gives other losses and learns (one batch of 12
    synthetic shapes, 8 steps)."""
    example = load("pyg_point_transformer_classification")
    losses = example.main(layers=("pyg", "rpe", "geope"), steps=8, points=64, per_class=2, dims=(16, 32), k=8,
                          lr=1e-2, batch_size=12)
    assert len(losses["pyg"]) == 8 and losses["rpe"] == losses["pyg"]
    assert losses["geope"] != losses["rpe"] and all(math.isfinite(v) for v in losses["geope"])
    assert losses["geope"][-1] < losses["geope"][0] - 0.2, losses["geope"]
    assert "12 synthetic shapes of 64 points, 6 classes" in capsys.readouterr().out


def test_pygs_segmentation_example_rpe_gives_pygs_losses_bitwise_and_geope_trains(one_thread):
    """PyG's segmentation U-Net (transitions down and up, random rotations) with the layer swapped: the same."""
    example = load("pyg_point_transformer_segmentation")
    losses = example.main(layers=("pyg", "rpe", "geope"), steps=8, points=96, count=8, dims=(16, 32), k=8,
                          lr=1e-2, batch_size=8)
    assert len(losses["pyg"]) == 8 and losses["rpe"] == losses["pyg"]
    assert losses["geope"] != losses["rpe"]
    assert losses["geope"][-1] < losses["geope"][0] - 0.05, losses["geope"]


def test_synthetic_shapes_are_normalised_and_labelled():
    shapes = load("synthetic_shapes")
    for data in shapes.classification_set(1, 50):
        torch.testing.assert_close(data.pos.abs().max(), torch.tensor(1.0))   # T.NormalizeScale: in [-1, 1]^3
        assert data.pos.shape == (50, 3) and data.y.shape == (1,)
    assert [int(d.y) for d in shapes.classification_set(1, 10)] == list(range(len(shapes.CLASSES)))
    for data in shapes.part_set(2, 80):
        torch.testing.assert_close(data.pos.abs().max(), torch.tensor(1.0))
        assert set(data.y.tolist()) == set(range(len(shapes.PARTS))) and torch.equal(data.x, data.pos)


def test_pygs_examples_build_pygs_modules():
    """PyG's examples build each block's `pos_nn` and `attn_nn` as `MLP([., 64, C], norm=None, plain_last=False)`
    (`Linear-ReLU-Linear-ReLU`: delta_ij and the attention logits are >= 0) and the head as `MLP([C, 64,
    classes], norm=None)` (`Linear-ReLU-Linear`); ours are those modules, for PyG's layer and for GeoPE's."""
    classification = load("pyg_point_transformer_classification")
    segmentation = load("pyg_point_transformer_segmentation")
    torch.manual_seed(0)
    for layer in ("pyg", "geope"):
        for net, width in ((classification.Net(6, 0, [16, 32], layer, 64, k=8), 32),
                           (segmentation.Net(3, 4, [16, 32], layer, 96, k=8), 16)):
            convs = [block.transformer for block in net.modules() if type(block).__name__ == "TransformerBlock"]
            assert len(convs) == (2 if net.__module__.endswith("classification") else 4)
            for conv in convs:
                channels = conv.out_channels
                for mlp, inputs in ((conv.pos_nn, 3), (conv.attn_nn, channels)):
                    assert [tuple(p.shape) for p in mlp.parameters()] == [(64, inputs), (64,), (channels, 64),
                                                                         (channels,)]
                    assert (mlp(10 * torch.randn(200, inputs)) >= 0).all()            # the last ReLU
            classes = net.head(torch.randn(5, width)).shape[1]
            assert [tuple(p.shape) for p in net.head.parameters()] == [(64, width), (64,), (classes, 64), (classes,)]


def test_segmentation_interpolation_is_pygs_knn_interpolate_also_for_examples_of_fewer_than_k_points():
    """PyG's `knn_interpolate`: each fine point takes the `min(k, n)` nearest of the `n` coarse points of its
    example, weighted by `1 / d^2`. Written here by brute force over each example; one example has only 2 coarse
    points for k = 3 (a coarse level of `--points 40` at the third level)."""
    example = load("pyg_point_transformer_segmentation")
    gen = torch.Generator().manual_seed(0)
    pos_x, pos_y = torch.rand(7, 3, generator=gen), torch.rand(9, 3, generator=gen)
    batch_x, batch_y = torch.tensor([0, 0, 1, 1, 1, 1, 1]), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    x = torch.randn(7, 4, generator=gen)
    expected = torch.empty(9, 4)
    for i in range(9):
        same = (batch_x == batch_y[i]).nonzero().flatten()
        d2 = ((pos_x[same] - pos_y[i]) ** 2).sum(1)
        near = d2.argsort()[:3]
        w = 1 / d2[near]
        expected[i] = (x[same[near]] * w[:, None]).sum(0) / w.sum()
    got = example.knn_interpolate(x, pos_x, pos_y, batch_x, batch_y, k=3)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,args,error", [
    ("classification", ["--layers", "pyg", "geope3"],
     "argument --layers: invalid choice: 'geope3' (choose from 'pyg', "),
    ("classification", ["--steps", "0"], "argument --steps: expected an int >= 1, got 0"),
    ("segmentation", ["--points", "9"], "argument --points: expected an int >= 10, got 9"),
    ("", ["--steps", "0"], "argument --steps: expected an int >= 1, got 0"),
    ("", ["--steps", "x"], "argument --steps: invalid int value: 'x'"),          # not "invalid positive value"
    ("segmentation", ["--steps", "x"], "argument --steps: invalid int value: 'x'")])
def test_pygs_examples_refuse_a_bad_argument_in_one_line_before_any_work(name, args, error, monkeypatch, capsys):
    """The three PyG examples: a misspelt layer, no steps or too few points for the shapes were a traceback after the
    data were made (`ValueError: unknown positional encoding`, `IndexError`, torch's `cannot sample n_sample <= 0
    samples`). The script runs as `python script ...` runs it (`__main__`, its `sys.argv`), in this process: a
    Python of its own would spend seconds importing torch and PyG to show what argparse's `SystemExit(2)` is, exit
    code 2 (test_extras.py runs `pyg_point_transformer.py` in a Python of its own)."""
    script = REPO / "examples" / f"pyg_point_transformer{'_' * bool(name)}{name}.py"
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))                # the script puts examples/ first
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(script), run_name="__main__")
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "", err                  # nothing printed: no data made, no step
    assert err.splitlines()[-1].startswith(f"{script.name}: error: {error}")


@pytest.mark.parametrize("layer", ["rope-mixed", "none", "geope"])
def test_pygs_examples_give_every_layer_pygs_other_weights_and_random_stream(layer):
    """From one seed every `--layers` entry gets PyG's weights in every module but the layer's own and leaves
    the random stream (the batches, the augmentations) where PyG's layer leaves it: RoPE-Mixed drew its
    frequencies from the stream, and `none` built no `pos_nn`, so every module after them and every batch was
    another than in PyG's run."""
    example = load("pyg_point_transformer_classification")

    def build(name):
        torch.manual_seed(0)
        net = example.Net(6, 0, [16, 32], name, 64, k=8)
        return net, torch.rand(4)
    (pyg, pyg_next), (ours, ours_next) = build("pyg"), build(layer)
    assert torch.equal(ours_next, pyg_next)
    theirs = pyg.state_dict()
    others = [key for key in ours.state_dict() if ".transformer." not in key]
    assert len(others) > 20
    for key in others:
        assert torch.equal(ours.state_dict()[key], theirs[key]), key


def test_pygs_examples_build_the_layer_without_touching_a_cuda_device(monkeypatch):
    """The layer is built on the CPU in a fork of the CPU's random stream only: on a machine of several GPUs the
    fork of every device's stream initialised each GPU and printed torch's warning about it."""
    example = load("pyg_point_transformer_classification")

    def touched(*args, **kwargs):
        raise AssertionError("a CUDA device's random state was read")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state", touched)
    torch.manual_seed(0)
    example.Net(6, 0, [16, 32], "rope-mixed", 64, k=8)
