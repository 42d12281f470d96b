"""Tests of bench/launch_count.py, the CPU's count of a step's GPU launches: what it counts (aten ops but views and
allocations, Triton launches without the interpreter's own copies, the CUDA default's kernel choices) and exact,
explained counts of the parts whose launches were cut (GeoPE's tables, a stage's displacements)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="counts CPU tensors in Triton's interpreter")

# two stages, the second of two blocks: a stage's first layer and a later one, a transition down and up (a third
# stage repeated them; each launch is a pass of Triton's interpreter)
TINY = dict(blocks=(1, 2), planes=(16, 24), strides=(1, 4), neighbours=(8, 8), decoder_blocks=(1, 1), share_planes=8)
# two stages of one block: the test forwards (the amp test counts six), each launch a pass of Triton's interpreter
TWO_STAGES = dict(blocks=(1, 1), planes=(16, 24), strides=(1, 4), neighbours=(8, 8), decoder_blocks=(1, 1),
                  share_planes=8)


def _two_clouds() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """coord (120, 3), feat (120, 6) and offset of two clouds of 80 and 40 points: a norm's tile (128 rows of
    TINY's 16 channels) holds the first stage, so Triton's interpreter, which runs each program in Python, runs
    few (the counts do not depend on the size; 200 points took twice the programs)."""
    g = torch.Generator().manual_seed(0)
    coord = torch.rand(120, 3, generator=g) * 3
    return coord, torch.cat([torch.rand(120, 3, generator=g), coord], dim=1), torch.tensor([80, 120])


@pytest.fixture
def launch_count(kernel_failures_forgotten, monkeypatch):
    """The module, with the environment's kernel switches unset (the CUDA default is what it follows)."""
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    import launch_count

    return launch_count


def test_views_and_allocations_launch_nothing_and_each_op_once(launch_count):
    x, w, b = torch.randn(6, 4), torch.randn(4, 5), torch.randn(5)
    with launch_count.LaunchCounter() as counter:
        y = x.view(3, 8).t().unsqueeze(0).detach()[..., 1:]
        torch.empty(10)
        z = torch.addmm(b, x, w) + 1
        z.relu_()
    assert y.shape == (1, 8, 2)
    assert dict(counter.ops) == {("forward", "addmm"): 1, ("forward", "add"): 1, ("forward", "relu_"): 1}


def test_a_triton_launch_counts_once_and_its_argument_copies_not(launch_count):
    from pointgeope.model import fused_attention

    g = torch.Generator().manual_seed(0)
    key, q = torch.randn(12, 16, generator=g), torch.randn(12, 16, generator=g)
    idx = torch.randint(0, 12, (12, 4), generator=g)
    counter = launch_count.LaunchCounter()
    with launch_count.cuda_choices(), counter.triton_launches(), counter:
        out = fused_attention.relation(key, idx, q, check_index=False)      # (the check: one aminmax)
    torch.testing.assert_close(out, key[idx] - q.unsqueeze(1), rtol=0, atol=0)
    assert dict(counter.ops) == {("forward", "triton:relation_forward"): 1}     # its output: torch.empty


def test_the_opt_in_kernels_stay_off_as_on_cuda(launch_count):
    from pointgeope.model import kernels, norm, padding

    with launch_count.cuda_choices():
        assert norm.KERNEL.enabled(torch.device("cpu"))                      # the CUDA default
        assert not norm.PLAIN_KERNEL.enabled(torch.device("cpu"))            # opt-in outside a padded batch
        with padding.batch_rows({8: torch.tensor(6)}):
            assert norm.PLAIN_KERNEL.enabled(torch.device("cpu"))            # a CUDA default inside one
    assert not kernels.use_triton("relation", torch.device("cpu"))          # restored after the block


def test_geope_tables_take_20_launches(launch_count):
    """``rotation_tables``: Rodrigues' terms 7 (norm, clamp, divide, angle, cos, sin, versine), the zeroed
    tables 1, ``u_d u_e`` 1, the turned axis 1, the diagonal 1, two per other shift 8, the pass-through ones
    1; written one entry at a time it took 36 (27 for the nine entries)."""
    from pointgeope.geope import frequencies
    from pointgeope.model.rotation import rotation_tables

    pos, scale = torch.rand(50, 3), (frequencies(32) * 25.0 / 3).float()
    with launch_count.LaunchCounter() as counter:
        rotation_tables(pos, scale, 32)
    assert counter.total() == 20


@pytest.mark.parametrize("pe", ["rpe", "geope"])
def test_a_stage_computes_its_displacements_once(launch_count, pe):
    """A training step of a tiny network on the CUDA path: the launches of each attention layer's own code
    (not its Linears' and norms') are its two Triton kernels (relation, aggregation), plus the gather and
    subtraction of ``p_j - p_i`` (2) in the first layer of each stage only; ``geope`` also turns the points
    (``apply_shifted``: one Triton launch, where torch's path takes a product and 4 multiply-adds) in every layer
    and builds its stage's tables (one launch, torch's 20) in the first. The hierarchy is given, made beside the
    step as CUDA training makes it (``engine.ahead``): its FPS and kNN are no layer's launches, and in Triton's
    interpreter they cost a quarter of this test's time."""
    from pointgeope.model import PointTransformerSeg

    coord, feat, offset = _two_clouds()
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **TINY).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    hierarchy = model.hierarchy_spec(coord, offset)

    def step():
        optimizer.zero_grad()
        model(coord, feat, offset, hierarchy=hierarchy).square().mean().backward()
        optimizer.step()

    counter = launch_count.count_step(step, model, optimizer)
    layers = {name: counter.where["forward", name] for name, m in model.named_modules()
              if type(m).__name__ == "PointTransformerLayer"}
    first = {"encoder.0.0.attention", "encoder.1.0.attention"}
    assert "encoder.1.1.attention" in layers                          # a stage's second layer: none of its own
    qkv = 4             # model/qkv.py's products with gradients: q's and k's weights stacked, their biases, 2 products
    own = qkv + 2 + (1 if pe == "geope" else 0)
    assert layers == {name: own + (2 + (1 if pe == "geope" else 0) if name in first else 0) for name in layers}
    if pe == "geope":
        assert counter.ops["forward", "triton:shifted"] == len(layers) and \
            counter.ops["forward", "triton:tables"] == len(first)


def test_the_frame_fold_takes_the_turn_of_the_points_out_two_launches_a_layer(launch_count):
    """A ``geope`` layer's forward and backward on the CUDA path, counted with and without the fold
    (``POINTGEOPE_FRAME_FOLD``, :func:`frame_fold.folding` here): folded, no ``apply_shifted`` launch (the points'
    turn forward, its adjoint backward), the relation's kernel one launch each way, nothing else changed: 2 fewer."""
    from pointgeope.model import PointTransformerLayer
    from pointgeope.model.frame_fold import folding

    g = torch.Generator().manual_seed(4)
    coord, feat = torch.rand(30, 3, generator=g) * 2, torch.randn(30, 24, generator=g)
    idx = torch.cdist(coord, coord).topk(6, largest=False).indices
    torch.manual_seed(0)
    layer = PointTransformerLayer(24, share_planes=4, neighbours=6, pe="geope").train()
    counts = {}
    for fold in (False, True):
        with folding(fold), launch_count.cuda_choices():
            layer(coord, feat.clone().requires_grad_(), idx).sum().backward()      # the first: the norms' tickets
            counter = launch_count.LaunchCounter()
            with counter.triton_launches(), counter:
                layer(coord, feat.clone().requires_grad_(), idx).sum().backward()
        counts[fold] = counter
    plain, folded = counts[False].ops, counts[True].ops
    assert plain["forward", "triton:shifted"] == plain["backward", "triton:shifted"] == 1
    assert folded["forward", "triton:shifted"] == folded["backward", "triton:shifted"] == 0
    assert plain["forward", "triton:frame_forward"] == plain["backward", "triton:frame_backward"] == 1
    assert folded["forward", "triton:fold_forward"] == folded["backward", "triton:fold_backward"] == 1
    assert counts[False].total() - counts[True].total() == 2


@pytest.mark.parametrize("train", [True, False])
def test_a_norms_backward_launches_its_two_kernels_and_nothing_else(launch_count, train):
    """``BatchNormReLU`` on the CUDA path: its backward is ``grad_sums`` (the partial sums, and their reduction by
    the last program of each channel block, which stores both sums of every channel:
    ``tests/model/test_norm_buffers.py``) and ``grad_input``; no fill of the ``(2, C)`` sums (a ``zeros``: a
    launch a norm, 105 a step of PointTransformerSeg50), nor of the tickets (made zeroed once, by the warm-up
    call here, and left zeroed by each launch)."""
    from pointgeope.model.norm import BatchNormReLU

    _warm_up(launch_count, BatchNormReLU)
    g = torch.Generator().manual_seed(0)
    module = BatchNormReLU(70).train(train)
    x = torch.randn(90, 70, generator=g).requires_grad_()
    grad = torch.randn(90, 70, generator=g)
    counter = launch_count.LaunchCounter()
    with launch_count.cuda_choices(), counter.triton_launches(), counter:
        y = module(x)
        y.backward(grad)
    backward = {op: n for (phase, op), n in counter.ops.items() if phase == "backward"}
    assert backward == {"triton:grad_sums": 1, "triton:grad_input": 1}


def _warm_up(launch_count, cls) -> None:
    """One training forward and backward of a ``cls`` norm on the CUDA path, uncounted: the device's ticket buffer
    (``norm_tickets``) made, as the first step of a run makes it."""
    x = torch.randn(90, 70).requires_grad_()
    with launch_count.cuda_choices():
        cls(70).train()(x).sum().backward()


def test_a_norms_forward_counts_its_batch_in_its_last_kernel(launch_count):
    """``BatchNormReLU``'s training forward on the CUDA path: ``statistics`` (the partials and, by the last program
    of each channel block, their reduction) and ``normalize``, which also adds the batch to
    ``num_batches_tracked`` (an ``add_`` of its own was a launch a norm: 105 a step of PointTransformerSeg50); the
    count still moves, as torch's."""
    from pointgeope.model.norm import BatchNormReLU

    _warm_up(launch_count, BatchNormReLU)
    module = BatchNormReLU(70).train()
    x = torch.randn(90, 70, generator=torch.Generator().manual_seed(0))
    counter = launch_count.LaunchCounter()
    with launch_count.cuda_choices(), counter.triton_launches(), counter:
        module(x)
    assert dict(counter.ops) == {("forward", f"triton:{k}"): 1 for k in ("statistics", "normalize")}
    assert int(module.num_batches_tracked) == 1


def _tiny_eval(pe: str = "rpe", size: dict = TWO_STAGES):
    """A tiny network (``size``) in eval mode and one batch of two clouds with their hierarchy (as built beside the
    test)."""
    from pointgeope.model import PointTransformerSeg

    coord, feat, offset = _two_clouds()
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **size).eval()
    return model, coord, feat, offset, model.hierarchy_spec(coord, offset)


def test_a_test_forward_counts_one_launch_a_norm_and_a_linear_as_under_no_grad(launch_count):
    """The test forward of a tiny network, as ``VoteSink`` runs it (``torch.inference_mode``, under which
    ``linear``, ``reshape``, ``to`` and ``batch_norm`` reach the counter whole): every ``BatchNormReLU`` one launch
    (``normalize`` on the running buffers), every block's tail one (``BatchNormAddReLU``: the third norm, the
    residual add and the ReLU in that ``normalize``), every ``Linear`` one (``addmm``, or ``mm`` without a bias), no
    view or cast to the same type counted, the logits' ``float()`` nothing; the same count op by op as under
    ``torch.no_grad``, where autograd's key decomposes them."""
    from types import SimpleNamespace

    from pointgeope.engine.config import Config
    from pointgeope.engine.vote_batches import VoteSink
    from pointgeope.model.norm import BatchNormReLU
    from pointgeope.model.residual_norm import BatchNormAddReLU

    model, coord, feat, offset, hierarchy = _tiny_eval()
    sink = VoteSink(model, None, None, Config(), torch.device("cpu"))
    batch = SimpleNamespace(pos=coord, x=feat, offset=offset, hierarchy=hierarchy, grid_coord=None)
    counts = {}
    for mode in (torch.inference_mode, torch.no_grad):
        def forward(mode=mode):
            with mode():
                return sink._forward(batch)
        with launch_count.cuda_choices():
            want = forward()                                    # warm: the kernels' first call
        counter = launch_count.count_forward(forward, model)
        counts[mode.__name__] = dict(counter.ops)
        norms = [name for name, m in model.named_modules() if isinstance(m, (BatchNormReLU, BatchNormAddReLU))]
        assert sum(isinstance(m, BatchNormAddReLU) for m in model.modules()) > 0
        linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        qkv = {name for name in linears if name.rsplit(".", 1)[-1] in ("linear_q", "linear_k", "linear_v")}
        for name in qkv:            # without gradients model/qkv.py calls their three products from the layer
            linears.pop(name)
        assert [counter.where["forward", name] for name in norms] == [1] * len(norms)
        assert counter.ops["forward", "triton:normalize"] == len(norms) and ("forward", "triton:statistics") \
            not in counter.ops
        assert {name: counter.where["forward", name] for name in linears} == {name: 1 for name in linears}
        assert counter.ops["forward", "addmm"] == sum(m.bias is not None for m in linears.values()) + len(qkv)
        assert not {op for _, op in counter.ops} & {"linear", "reshape", "to", "batch_norm", "_to_copy_host"}
        assert counter.total("output") == 0
    assert counts["inference_mode"] == counts["no_grad"]
    with torch.no_grad():
        torch.testing.assert_close(want, model(coord, feat, offset, hierarchy=hierarchy), rtol=1e-5, atol=1e-5)


def test_amp_bf16_counts_each_presets_test_forward_under_autocast(launch_count, monkeypatch):
    """``count(..., what="test", amp="bf16")`` over two presets (two-stage networks in place of PointTransformerSeg50):
    both counted, each forward under bf16 autocast on the CPU as on CUDA (the context entered once a preset), the
    logits made float32 after the model. The run's bf16 copies of the weights are made before the counted forward
    (``run_copies``, as evaluate makes them before its first batch): one launch fewer for each Linear's weight and
    bias than where autocast casts them in the forward (every Linear's, also the layers' q, k and v), all of them
    casts; counted without the copies for ``geope`` alone, whose Linears are rpe's (the same names, the same
    ``run_copies``). Float32 (no cast in a Linear, nothing after the model):
    ``test_a_test_forward_counts_one_launch_a_norm_and_a_linear_as_under_no_grad``."""
    import contextlib

    from pointgeope.engine.config import Config, EvalConfig
    from pointgeope.engine.vote_batches import VoteSink

    def tiny_test(preset, points, clouds, amp):
        from types import SimpleNamespace

        model, coord, feat, offset, hierarchy = _tiny_eval(preset)
        sink = VoteSink(model, None, None, Config(eval=EvalConfig(amp=amp)), torch.device("cpu"))
        batch = SimpleNamespace(pos=coord, x=feat, offset=offset, hierarchy=hierarchy, grid_coord=None)

        def forward():
            with torch.inference_mode():
                return sink._forward(batch)
        return forward, model
    monkeypatch.setattr(launch_count, "preset_test", tiny_test)
    bf16 = launch_count.count(["rpe", "geope"], 0, 0, what="test", amp="bf16")
    monkeypatch.setattr(launch_count, "run_copies", lambda model, amp: contextlib.nullcontext())
    cast = launch_count.count(["geope"], 0, 0, what="test", amp="bf16")
    assert set(bf16) == {"rpe", "geope"}
    assert all(counts["by_phase"]["output"] == 1 for counts in bf16.values())          # the logits' float()
    assert bf16["rpe"]["triton"] < bf16["geope"]["triton"]          # each its own preset: geope's turns and tables
    tensors = sum(1 + (m.bias is not None) for m in _tiny_eval("geope")[0].modules()
                  if isinstance(m, torch.nn.Linear))
    assert cast["geope"]["launches"] - bf16["geope"]["launches"] == tensors > 0
    assert cast["geope"]["top_ops"]["_to_copy"] - bf16["geope"]["top_ops"].get("_to_copy", 0) == tensors


def test_the_before_tree_is_recorded_with_its_commit_state(launch_count, checkout, git, monkeypatch, tmp_path):
    """``--before DIR`` recorded the tree's path and the label typed beside it: not which commit it counted, where
    ``bench_loader_compare.py --before`` records the other checkout's commit state. The state is that of the
    checkout the child imported its package from (here ``checkout``), not of the folder typed (``tmp_path``)."""
    import json
    import sys

    counts = {"rpe": {"launches": 5}}
    monkeypatch.setattr(launch_count, "count", lambda *args: counts)
    monkeypatch.setattr(launch_count, "counted_elsewhere",
                        lambda tree, args: {"package": str(checkout), "presets": {"rpe": {"launches": 7}}})
    (checkout / "code.py").write_text("x = 2\n")
    out = tmp_path / "counts.json"
    monkeypatch.setattr(sys, "argv", ["launch_count.py", "--what", "test", "--presets", "rpe", "--before",
                                      str(tmp_path), "--out", str(out)])
    assert launch_count.main() == 0
    got = json.loads(out.read_text())
    before = got["before"]
    assert (before["tree"], before["commit"], before["dirty"]) == (str(tmp_path), git(checkout, "rev-parse", "HEAD"),
                                                                   True)
    assert before["package"] == str(checkout / "pointgeope") and got["saved"] == {"rpe": 2}


def test_the_counted_package_records_its_own_checkouts_commit_not_the_working_folders(launch_count, checkout, git,
                                                                                        monkeypatch, tmp_path):
    """The file's ``provenance`` was the commit of the tree the script sits in, whichever package was imported
    (``PYTHONPATH`` or an editable install elsewhere): now the checkout holding the imported package."""
    import json
    import sys

    import bench_io

    monkeypatch.setattr(launch_count, "count", lambda *args: {"rpe": {"launches": 5}})
    monkeypatch.setattr(launch_count, "PACKAGE_PARENT", checkout)      # the package imported from ``checkout``
    out = tmp_path / "counts.json"
    monkeypatch.setattr(sys, "argv", ["launch_count.py", "--what", "test", "--presets", "rpe", "--out", str(out)])
    assert launch_count.main() == 0
    got = json.loads(out.read_text())
    assert got["provenance"]["commit"] == git(checkout, "rev-parse", "HEAD") != bench_io.git_commit()
    assert (got["provenance"]["dirty"], got["package"]) == (False, str(checkout / "pointgeope"))


def test_an_opt_in_kernel_counts_as_a_cuda_default_inside_the_block_alone(launch_count):
    """``cuda_choices(("batch_norm_add_relu",))`` (``--opt-in``) turns the blocks' training tail on for CPU
    tensors as on CUDA inside the block, and leaves it opt-in after it."""
    from pointgeope.model import residual_norm

    cpu = torch.device("cpu")
    with launch_count.cuda_choices():
        assert not residual_norm.KERNEL.enabled(cpu)                         # opt-in: off by default
    with launch_count.cuda_choices(("batch_norm_add_relu",)):
        assert residual_norm.KERNEL.enabled(cpu)
    with launch_count.cuda_choices():
        assert not residual_norm.KERNEL.enabled(cpu)                         # restored


def test_an_unknown_opt_in_kernel_is_one_line_and_exit_2_before_any_count(launch_count, monkeypatch, capsys):
    """``--opt-in`` with a name no kernel is registered under: argparse's one line (what came, the registered
    names), exit 2, before a preset is built (it was a ``ValueError`` traceback after the first one)."""
    import sys

    monkeypatch.setattr(launch_count, "count", lambda *args: pytest.fail("counted"))
    monkeypatch.setattr(sys, "argv", ["launch_count.py", "--json-only", "--opt-in", "batch_norm_add_reluu"])
    with pytest.raises(SystemExit) as exit_:
        launch_count.main()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and "batch_norm_add_reluu" in err and "batch_norm_add_relu," in err
