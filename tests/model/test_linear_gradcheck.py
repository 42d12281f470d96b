"""Tests of tests/model/linear_gradcheck.py: its fast-mode ``gradcheck`` fails a linear map whose backward has one
Jacobian entry off by 0.03 (of 560 x 280: the RoPE relation of test_rope.py's gradient test), for two draws of
``u, v`` (a failure costs the full Jacobians of gradcheck's message), and passes the map itself."""
from __future__ import annotations

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from pointgeope.model.rope import pair_frame
from tests.model.linear_gradcheck import LINEAR
from tests.model.test_rope import _setup


class _OneEntryOff(torch.autograd.Function):
    """The identity, whose backward adds 0.03 of output ``(7, 2, 9)``'s gradient to that of ``(3, 1, 5)``."""

    @staticmethod
    def forward(ctx, a):
        return a.clone()

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        g[3, 1, 5] += 0.03 * g[7, 2, 9]
        return g


@pytest.mark.parametrize("wrong", [False, True])
def test_a_single_wrong_entry_fails_the_linear_gradcheck(wrong):
    x, pos, idx, freq = _setup(14, n=10, k=4)
    disp, minus = pos[idx] - pos[:, None], torch.randn(10, 14, dtype=torch.float64)
    inputs = (x.requires_grad_(), minus.requires_grad_())

    def relation(a, m):
        out = pair_frame(a, idx, disp, freq, m)
        return _OneEntryOff.apply(out) if wrong else out
    for seed in range(2):
        torch.manual_seed(seed)                    # gradcheck's random u, v
        if wrong:
            with pytest.raises(GradcheckError):
                torch.autograd.gradcheck(relation, inputs, **LINEAR)
        else:
            assert torch.autograd.gradcheck(relation, inputs, **LINEAR)
