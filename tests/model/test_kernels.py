"""Tests of pointgeope/model/kernels.py: the one switch (``POINTGEOPE_KERNELS``) for every Triton kernel, and
the fallback of a kernel that fails to compile or launch to its torch path, with one warning and the same
results. Failures are injected into the kernels' launches under Triton's interpreter (CPU tensors)."""
from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("triton")

from triton.runtime.errors import OutOfResources

from pointgeope.errors import UserError
from pointgeope.model import fused_attention, kernels
from pointgeope.model.kernels import KernelFallbackWarning
from pointgeope.model.ops import backends, fps, knn, triton_fps, triton_fps_rounds, triton_knn
from tests.model.test_attention import _layer


class Failing:
    """Stands in for a ``triton.jit`` kernel: launching it (``kernel[grid](...)``) raises ``error``."""

    def __init__(self, error: Exception):
        self.error, self.launches = error, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            raise self.error
        return launch


COMPILE_ERROR = OutOfResources(262_144, 232_448, "shared memory")        # what a too-large tile raises
LAUNCH_ERROR = RuntimeError("Triton Error [CUDA]: device kernel image is invalid")


# The point ops' kernels run where the tests' Triton can run them: compiled on CUDA, in the interpreter on CPU
# tensors otherwise (tests/conftest.py sets TRITON_INTERPRET before Triton is imported).
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def triton_path(monkeypatch):
    """The Triton kernels by default (on CPU tensors: the interpreter); no failure remembered between tests."""
    if DEVICE.type == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
    kernels.reset()
    yield
    kernels.reset()


def _cloud(n=300, clouds=2, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(n * clouds, 3, generator=g) * 3
    return coord.to(device), (torch.arange(1, clouds + 1) * n).to(device)


def test_a_knn_kernel_that_fails_to_compile_falls_back_once_with_the_same_neighbours(monkeypatch):
    coord, off = _cloud()
    failing = Failing(COMPILE_ERROR)
    monkeypatch.setattr(triton_knn, "_knn_kernel", failing)
    with pytest.warns(KernelFallbackWarning,
                      match=r"Triton kernel knn failed .*OutOfResources.*POINTGEOPE_KERNELS=torch"):
        idx, dist2 = knn(coord, coord, 8, off, off)
    want_idx, want_d2 = knn(coord.cpu(), coord.cpu(), 8, off.cpu(), off.cpu(), backend="pykdtree")
    want_idx, want_d2 = want_idx.to(DEVICE), want_d2.to(DEVICE)
    torch.testing.assert_close(dist2, want_d2)
    assert torch.equal(idx, want_idx)                    # random points: no ties, one answer
    assert "knn" in kernels.failures() and backends.knn_backend(coord.device) != "triton"
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # the second call: no warning, no new launch
        assert torch.equal(knn(coord, coord, 8, off, off)[0], want_idx)
    assert failing.launches == 1


def test_an_fps_kernel_that_fails_to_launch_falls_back_to_the_next_default(monkeypatch):
    coord, off = _cloud()
    for module, kernel in ((triton_fps, "_fps_kernel"), (triton_fps_rounds, "_fps_rounds_kernel")):
        monkeypatch.setattr(module, kernel, Failing(LAUNCH_ERROR))
    with pytest.warns(KernelFallbackWarning, match="Triton kernel fps failed .*RuntimeError.*kernel image is invalid"):
        idx, new_off = fps(coord, off, 4)
    want_idx, want_off = fps(coord, off, 4, backend="torch")     # every backend: the same samples (FPS_RULE)
    assert backends.fps_backend(coord.device) != "triton"
    assert torch.equal(idx, want_idx) and torch.equal(new_off, want_off)


def test_an_explicit_triton_backend_raises_instead(monkeypatch):
    coord, off = _cloud()
    monkeypatch.setattr(triton_knn, "_knn_kernel", Failing(COMPILE_ERROR))
    with pytest.raises(OutOfResources):
        knn(coord, coord, 8, off, off, backend="triton")
    assert kernels.failures() == {}


def test_out_of_memory_is_not_a_kernel_failure(monkeypatch):
    coord, off = _cloud()
    monkeypatch.setattr(triton_knn, "_knn_kernel", Failing(torch.OutOfMemoryError("CUDA out of memory")))
    with pytest.raises(torch.OutOfMemoryError):
        knn(coord, coord, 8, off, off)
    assert kernels.failures() == {}


def _layer_step(pe: str, path: str, monkeypatch, train: bool):
    """Output and gradients of one layer of preset ``pe`` on the ``path`` kernels (CPU tensors: the attention
    kernels reload in the interpreter's mode, ``fused_attention.triton_kernels``, also where CUDA exists), in
    eval mode (the relation goes through BatchNorm's fixed affine map: a per-channel scale or shift error of
    a fallback shows) or train mode (batch statistics, which would cancel such an error)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("POINTGEOPE_KERNELS", path)
    torch.manual_seed(0)
    layer = _layer(pe).train(train)
    coord, off = _cloud(n=12, clouds=2, seed=1, device=torch.device("cpu"))   # the attention: CPU, interpreted
    idx, _ = knn(coord, coord, 4, off, off, backend="pykdtree")
    feat = torch.randn(coord.shape[0], layer.channels, generator=torch.Generator().manual_seed(2), requires_grad=True)
    out = layer(coord, feat, idx)
    out.square().sum().backward()
    return out.detach(), feat.grad, [p.grad for p in layer.parameters() if p.grad is not None]


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("pe, kernel", [("rpe", "aggregate_forward"), ("rpe", "aggregate_backward"),
                                        ("rpe", "relation_forward"), ("rpe", "relation_backward"),
                                        ("geope", "frame_forward"), ("geope", "frame_backward"),
                                        ("rpe", "relation_gather"), ("geope", "frame_gather"),
                                        ("rpe", "aggregate_gather"),
                                        ("lingeope", "linear_forward"), ("lingeope", "linear_backward")])
def test_an_attention_kernel_that_fails_hands_its_op_to_torch_with_the_same_gradients(pe, kernel, train,
                                                                                      monkeypatch, torch_batch_norm):
    kernels.reset()
    want = _layer_step(pe, "torch", monkeypatch, train)
    module = "triton_gather" if kernel.endswith("_gather") else "triton_attention"   # (the backward by source)
    if kernel.endswith("_gather"):                                       # the sums by source point, asked for
        from pointgeope.model import gather_backward
        monkeypatch.setattr(gather_backward, "SCATTER", "sorted")
    monkeypatch.setattr(fused_attention.triton_kernels(module), kernel, Failing(COMPILE_ERROR))
    op = {"aggregate": "aggregate", "relation": "relation", "frame": "frame_relation", "linear": "linear_relation"}
    with pytest.warns(KernelFallbackWarning, match=f"Triton kernel {op[kernel.split('_')[0]]} failed"):
        got = _layer_step(pe, "triton", monkeypatch, train)
    assert list(kernels.failures()) == [op[kernel.split("_")[0]]]
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(got[2], want[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=3e-5)   # a sum that cancels: absolute


def test_the_switch_rejects_other_values_in_one_line(monkeypatch):
    monkeypatch.setenv("POINTGEOPE_KERNELS", "cuda")
    with pytest.raises(UserError, match=r"^POINTGEOPE_KERNELS: expected one of triton, torch .*got 'cuda'$"):
        kernels.use_triton("knn", torch.device("cuda"))
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(UserError, match="needs TRITON_INTERPRET=1"):
        kernels.check_runnable(torch.device("cpu"))
    kernels.check_runnable(torch.device("cuda"))         # fine where Triton imports


def test_torch_turns_every_kernel_off_and_unset_keeps_triton_to_cuda(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setenv("POINTGEOPE_KERNELS", "torch")
    assert not any(kernels.use_triton(k, d) for k in ("knn", "fps", "aggregate", "geope_pairs") for d in (cpu, cuda))
    monkeypatch.delenv("POINTGEOPE_KERNELS")
    assert kernels.use_triton("knn", cuda) and not kernels.use_triton("knn", cpu)
    assert backends.knn_backend(cpu) in ("numba", "pykdtree", "scipy", "torch")
    with pytest.warns(KernelFallbackWarning):
        kernels.fail("knn", COMPILE_ERROR)
    assert not kernels.use_triton("knn", cuda) and kernels.use_triton("fps", cuda)
    assert "knn fell back to torch (OutOfResources" in kernels.status()


def test_a_long_failure_is_said_cut_and_marked():
    """The first line of a kernel's error is said up to 300 characters, the cut marked with its length (it was cut
    at 300 with no mark, a part to be taken for the whole); a short one whole."""
    with pytest.warns(KernelFallbackWarning) as caught:
        kernels.fail("knn", RuntimeError("a" * 400 + "\nsecond line"))
    first = "a" * 297 + "... (400 characters)"
    assert kernels.failures() == {"knn": f"RuntimeError: {first}"}
    assert f"(RuntimeError: {first}); its torch path runs from now on" in str(caught[0].message)
    with pytest.warns(KernelFallbackWarning):
        kernels.fail("fps", RuntimeError("b" * 300))
    assert kernels.failures()["fps"] == "RuntimeError: " + "b" * 300


def test_the_check_runs_every_kernel_against_its_torch_path_and_names_a_fallback(monkeypatch):
    from pointgeope.model.kernel_check import check_kernels, format_table, passed

    # the interpreter's sizes (kernel_check's docstring): every kernel's last tile masked, 18 coarse points (> k)
    rows = check_kernels(DEVICE, points=72, pairs=17, reps=1)
    assert [r.kernel.split()[0] for r in rows] == ["aggregate", "aggregate", "apply_shifted", "apply_shifted",
                                                   *["batch_norm"] * 5, *["batch_norm_add_relu"] * 3,
                                                   *["batch_norm_add_relu_eval"] * 2,
                                                   *["batch_norm_relu"] * 5,   # eval rows too
                                                   "fps", "frame_relation", "frame_relation", "frame_relation_fold",
                                                   "knn", "knn", "knn",
                                                   "linear_relation", "relation", "relation", "rotation_tables"]
    assert [r.kernel for r in rows if r.kernel.startswith("relation")] == ["relation fwd+bwd",
                                                                           "relation fwd+bwd sorted"]  # both sums
    assert passed(rows) and all(r.path == "triton" for r in rows), format_table(rows)
    by_name = {r.kernel.split()[0]: r for r in rows}
    assert by_name["fps"].max_diff == 0
    assert max(by_name[k].max_diff for k in ("aggregate", "relation", "frame_relation", "frame_relation_fold",
                                             "linear_relation")) < 1e-4
    assert max(r.max_diff for r in rows if r.kernel.startswith("apply_shifted")) < 1e-5      # GeoPE's shift tables
    assert by_name["rotation_tables"].max_diff < 1e-4                                       # (phases' rounding)
    monkeypatch.setattr(fused_attention.triton_kernels(), "aggregate_backward", Failing(LAUNCH_ERROR))
    # the failing kernel's rows alone: the others ran above, and another pass of them (half of this test's
    # time under the interpreter) would only repeat those rows
    every = kernels.registered()
    monkeypatch.setattr(kernels, "registered", lambda: [k for k in every if k.name == "aggregate"])
    with pytest.warns(KernelFallbackWarning):
        rows = check_kernels(DEVICE, points=72, pairs=17, reps=1)
    assert rows[0].path.startswith("torch (fell back: RuntimeError: Triton Error [CUDA]") and not passed(rows)
    assert "aggregate fwd+bwd             torch (fell back" in format_table(rows)


def test_a_registered_kernel_gets_the_switch_the_fallback_and_the_check(monkeypatch):
    """A new kernel, registered once, with no other code: Triton where the switch says, its torch function
    with one warning when its Triton function fails, and a row of ``info --check`` (registered alone: the
    other kernels' rows are test_the_check_runs_every_kernel_...'s, and would take most of this test's time)."""
    from pointgeope.model.kernel_check import check_kernels

    calls, failing = [], []

    def triton_fn(x):
        calls.append("triton")
        if failing:
            raise LAUNCH_ERROR
        return x + 1

    case = kernels.CheckCase("plus one", lambda: new(DEVICE, torch.ones(2, device=DEVICE)),
                             lambda: torch.ones(2, device=DEVICE) + 1,
                             lambda got, want: (float((got - want).abs().max()), ""), 0.0)
    monkeypatch.setattr(kernels, "_REGISTRY", {})       # registered for this test only, and alone
    new = kernels.register("zz_plus_one", triton_fn, lambda x: x + 1.0, check=lambda device, points, pairs: [case])
    x = torch.zeros(3, device=DEVICE)        # where Triton runs here: CUDA, else the interpreter's CPU
    assert torch.equal(new(x.device, x), torch.ones(3, device=DEVICE)) and calls == ["triton"]
    failing.append(True)
    with pytest.warns(KernelFallbackWarning, match="Triton kernel zz_plus_one failed"):
        assert torch.equal(new(x.device, x), torch.ones(3, device=DEVICE))
    assert not new.enabled(x.device) and new(x.device, x).dtype == torch.float32 and len(calls) == 2
    kernels.reset()
    failing.clear()
    (row,) = check_kernels(DEVICE, points=60, pairs=12, reps=1)
    assert row.kernel == "zz_plus_one plus one" and row.path == "triton" and row.max_diff == 0
    monkeypatch.setenv("POINTGEOPE_KERNELS", "torch")
    assert not new.enabled(torch.device("cuda"))


def test_an_explicit_triton_backend_says_why_it_does_not_fall_back(monkeypatch):
    coord, off = _cloud()
    monkeypatch.setattr(triton_knn, "_knn_kernel", Failing(COMPILE_ERROR))
    with pytest.raises(OutOfResources) as raised:
        knn(coord, coord, 8, off, off, backend="triton")
    assert any("asked for explicitly (backend='triton'), so it does not fall back" in n for n in raised.value.__notes__)


def test_an_error_while_a_cuda_graph_records_is_the_capture_s(monkeypatch):
    """During a CUDA graph's capture (engine/graphs.py) a launch error is raised to the graph step, which
    steps eagerly; the kernel is not marked failed, so the eager steps keep its Triton path."""
    def triton_fn(x):
        raise LAUNCH_ERROR

    monkeypatch.setattr(kernels, "_REGISTRY", dict(kernels._REGISTRY))
    new = kernels.register("zz_capture", triton_fn, lambda x: x + 1.0)
    x = torch.zeros(3, device=DEVICE)        # where Triton runs here: CUDA, else the interpreter's CPU
    monkeypatch.setattr(kernels, "_capturing", lambda device: True)
    with pytest.raises(type(LAUNCH_ERROR)):
        new(x.device, x)
    assert new.enabled(x.device)
    monkeypatch.setattr(kernels, "_capturing", lambda device: False)       # the control: outside a capture
    with pytest.warns(KernelFallbackWarning):
        assert torch.equal(new(x.device, x), torch.ones(3, device=DEVICE))
    assert not new.enabled(x.device)
    kernels.reset()


def test_an_argument_error_raised_in_a_kernel_s_function_propagates_and_never_turns_it_off(monkeypatch):
    """A wrapper's own refusal (``KernelArgumentError``) is the caller's mistake, not a compile or launch
    failure: it propagates, with no warning, and the kernel keeps its Triton path."""
    def triton_fn(x):
        raise kernels.KernelArgumentError("expected x of shape (N,), got (2, 3)")

    monkeypatch.setattr(kernels, "_REGISTRY", dict(kernels._REGISTRY))
    new = kernels.register("zz_refuses", triton_fn, lambda x: x + 1.0)
    x = torch.zeros(3, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        with pytest.raises(kernels.KernelArgumentError, match="expected x of shape"):
            new(x.device, x)
    assert new.enabled(x.device) and kernels.failures() == {}


@pytest.mark.skipif(DEVICE.type == "cuda", reason="CPU tensors on a machine without CUDA")
@pytest.mark.parametrize("name", ["relation", "batch_norm_relu"])
def test_an_explicit_kernel_on_cpu_tensors_without_the_interpreter_says_what_to_do(name, monkeypatch):
    """``Kernel.explicit`` (benchmarks, tests) on CPU tensors without ``TRITON_INTERPRET=1``: one line naming the
    fix, where Triton used to answer "0 active drivers"."""
    from pointgeope.model import norm

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x, idx = torch.randn(6, 4), torch.zeros(6, 2, dtype=torch.long)
    kernel, args = ((fused_attention.KERNELS["relation"], (x, idx, x, None)) if name == "relation" else
                    (norm.KERNEL, (x, torch.ones(4), torch.zeros(4), None, None, True, 0.1, 1e-5)))
    with pytest.raises(kernels.KernelArgumentError, match=f"the Triton kernel {name} runs on CUDA tensors .*got cpu "
                                                          "tensors: move them to CUDA, set TRITON_INTERPRET=1"):
        kernel.explicit(*args)
