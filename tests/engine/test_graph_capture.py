"""The CUDA-graph recorder's streams (engine/graphs.py ``CudaRecorder``) on the CPU: fakes of ``torch.cuda``'s
streams and graph that choose their device as torch documents record where the warm-up and each capture run."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from pointgeope.engine import graphs


def _fake_cuda_capture(monkeypatch) -> list:
    """Fakes of ``torch.cuda``'s streams and graph that choose their device as documented (no device: the
    current one, ``cuda:0``). Returns the list of ``(kind, stream)`` the recording used: ``"stream"`` a stream
    made current (the warm-up's), ``"capture"`` the stream a graph was captured on."""
    used = []

    class Stream:
        def __init__(self, device=None):
            self.device = torch.device("cuda", 0) if device is None else torch.device(device)

        def wait_stream(self, other):
            pass

    class Graph:
        default_capture_stream = None         # torch's: made once, on the device current then

        def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
            if stream is None and Graph.default_capture_stream is None:
                Graph.default_capture_stream = Stream()
            self.capture_stream = stream if stream is not None else Graph.default_capture_stream

        def __enter__(self):
            used.append(("capture", self.capture_stream))

        def __exit__(self, *exc):
            return False

    class Switch:
        def __init__(self, stream):
            used.append(("stream", stream))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cuda = torch.cuda
    for name, fake in (("Stream", Stream), ("current_stream", Stream), ("stream", Switch), ("graph", Graph),
                       ("CUDAGraph", lambda: SimpleNamespace(replay=lambda: None)), ("graph_pool_handle", tuple)):
        monkeypatch.setattr(cuda, name, fake)
    return used


def _linear_step():
    model = torch.nn.Linear(2, 2)

    def step():
        out = model(torch.ones(1, 2))
        return out, out.sum()
    return model, step


def test_the_capture_runs_on_the_models_gpu_when_another_is_current(monkeypatch):
    """``train.device=cuda:1`` with ``cuda:0`` current: the warm-up and the capture run on streams of
    ``cuda:1``. ``torch.cuda.graph`` without a stream captures on one stream it makes once on the current
    device: a ``cuda:0`` stream, which none of the step's kernels (queued on ``cuda:1``) reach, so the graph
    was empty and each replay gave back the recorded batch's loss and gradients."""
    used = _fake_cuda_capture(monkeypatch)
    model, step = _linear_step()
    graphs.CudaRecorder(torch.device("cuda", 1)).record(step, model, before=lambda: None)
    assert [kind for kind, _ in used] == ["stream", "capture"]
    assert {stream.device for _, stream in used} == {torch.device("cuda", 1)}, used


def test_every_graph_of_a_run_is_captured_on_one_stream(monkeypatch):
    """The graphs of a run (one per batch shape) are captured into one memory pool so that each reuses what the
    captures before it freed; CUDA's caching allocator gives a freed block back only on the stream it was
    freed on, so they must all be captured on one stream (torch's own default is one stream for every
    capture). A stream made for each capture shared nothing: each graph held its own intermediates."""
    used = _fake_cuda_capture(monkeypatch)
    model, step = _linear_step()
    recorder = graphs.CudaRecorder(torch.device("cuda", 1))
    for _ in range(3):
        recorder.record(step, model, before=lambda: None)
    captures = [stream for kind, stream in used if kind == "capture"]
    assert len(captures) == 3 and all(stream is captures[0] for stream in captures), captures
    assert captures[0].device == torch.device("cuda", 1)
