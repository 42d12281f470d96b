"""PTv3 on CUDA (skipped without a GPU; the GPU check's ``tests`` step runs them): the network gives the CPU's
logits and gradients, bf16 autocast trains as float32 does, and the rotary encodings make no host copy once
their frequencies are on the device."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.qk_encodings import ROTARY_HEAD_DIM, qk_encoding
from tests.conftest import cuda_devices
from tests.model.ptv3.test_seg import cloud, net

CUDA = [d for d in cuda_devices() if d == "cuda"]


def run(model, inputs, device: str, amp: bool = False):
    """Logits and parameter gradients of ``model`` on ``device`` for the loss ``sum(logits^2)``."""
    pos, x, offset, grid = (t.to(device) for t in inputs)
    model = model.to(device)
    model.zero_grad()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        logits = model(pos, x, offset, grid_coord=grid)
    logits.float().square().sum().backward()
    grads = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach().float().cpu(), grads


@pytest.mark.parametrize("device", CUDA)
@pytest.mark.parametrize("pe", ["none", "geope", "point3drope"])
def test_the_network_on_the_gpu_is_the_network_on_the_cpu(pe, device):
    """Head width 18 (padded to 24 for SDPA on CUDA), two clouds longer than a patch and one shorter (a key
    mask), in eval mode (no draws): the same logits and gradients as on the CPU, in float32."""
    model = net(pe, 32)
    pos, x, _, grid = cloud(150, seed=5)
    offset = torch.tensor([70, 130, 150])                     # clouds of 70, 60 and 20 points
    cpu_logits, cpu_grads = run(model, (pos, x, offset, grid), "cpu")
    gpu_logits, gpu_grads = run(model, (pos, x, offset, grid), device)
    assert float((gpu_logits - cpu_logits).abs().max()) <= 1e-4 * float(cpu_logits.abs().max())
    assert gpu_grads.keys() == cpu_grads.keys()
    for name, grad in gpu_grads.items():
        assert float((grad - cpu_grads[name]).abs().max()) <= 1e-3 * float(cpu_grads[name].abs().max()) + 1e-6, name


@pytest.mark.parametrize("device", CUDA)
@pytest.mark.parametrize("pe", ["none", "geope", "point3drope"])
def test_bfloat16_autocast_on_the_gpu_trains_as_float32_does(pe, device):
    """CUDA's bf16 autocast (SDPA's fused kernels on the padded heads, no mask: every cloud longer than a
    patch): logits within 3 % of float32's largest, the whole gradient's cosine > 0.999."""
    model = net(pe, 32)
    inputs = cloud(120, seed=3)
    full, full_grads = run(model, inputs, device)
    half, half_grads = run(model, inputs, device, amp=True)
    assert float((half - full).abs().max()) <= 0.03 * float(full.abs().max())
    flat_half = torch.cat([g.flatten() for g in half_grads.values()])
    flat_full = torch.cat([full_grads[n].flatten() for n in half_grads])
    assert bool(torch.isfinite(flat_half).all())
    assert float(torch.nn.functional.cosine_similarity(flat_half, flat_full, 0)) > 0.999


@pytest.mark.parametrize("device", CUDA)
@pytest.mark.parametrize("name", ["geope", "rope3d", "point3drope", "pointrope"])
def test_the_encodings_wait_for_nothing_once_their_frequencies_are_on_the_gpu(name, device):
    """After the first call (which copies the frequencies once), a call makes no host-device synchronisation
    (``set_sync_debug_mode("error")`` raises on one), with the finiteness check off (it is one by design)."""
    enc = qk_encoding(name, ROTARY_HEAD_DIM, check_finite=False).eval().to(device)
    q, k = torch.randn(2, 4, 2, 16, ROTARY_HEAD_DIM, device=device).unbind(0)
    coord = torch.rand(4, 16, 3, device=device) * 3
    grid = (coord / 0.02).long()
    first = enc(q, k, coord, grid)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = enc(q, k, coord, grid)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
