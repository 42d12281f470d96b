"""The test's copies of the ``nn.Linear`` weights in ``eval.amp``'s dtype, made once for a run of many batches.

Under autocast (``eval.amp: bf16`` or ``fp16`` on CUDA, ``build.autocast``) every ``nn.Linear``, and the attention
layers' queries, keys and values (three ``F.linear`` without gradients, ``model/qkv.py``), runs as::

    y = linear(x.to(h), W.to(h), b.to(h))      W (C_out, C_in), b (C_out,), h = bfloat16 or float16

casting ``W`` and ``b`` again at every call: autocast keeps its casts for the rest of its region only with
gradients on, and the test runs under ``torch.inference_mode`` (``evaluate.vote_room``). That is one launch per
weight and bias per batch, 317 a batch of ``PointTransformerSeg50`` (``bench/launch_count.py --what test --amp
bf16``). :func:`cast_linears` makes ``W.to(h)`` and ``b.to(h)`` once and lets the Linears read them for as long as
its ``with`` lasts; autocast finds them in its dtype and casts nothing more than ``x``. The product is the same op
on the same operands (``Tensor.to`` rounds each element alone, to nearest even, whoever calls it), so the logits are
those of autocast's own casts, bit for bit.

How a Linear reads its copy: ``module.weight`` is looked up in ``module._parameters`` only where the instance has
no attribute of that name (``nn.Module.__getattr__`` is Python's fallback); the copy is put in the instance's
``__dict__``, which Python's lookup finds first, and taken out when the ``with`` ends, also on an exception. The
parameters themselves, ``state_dict()``, ``parameters()``, the buffers and an optimiser's references are not
touched at any time, and nothing is left after the ``with``: the copies live for one run (:func:`copies`:
one ``evaluate``, validation or ``predict`` run), so weights trained between two runs are copied again. Inside
the ``with`` the model is for autocast's forward of ``dtype`` only (``VoteSink``'s): a float32 forward there
would meet half-precision weights (a dtype error, not a silent result).

What is copied: the floating weights and biases of ``nn.Linear`` (PTv1's and PTv3's Linears), float64 ones not
(autocast leaves them), a parameter not yet materialised (lazy) not, nor one already in ``dtype``. Nothing else:
autocast casts no norm's parameters, and PTv3's sparse convolution adds its bias in float32 after the products
(``ptv3/sparse_conv.py``), where a half-precision copy would round it.

Memory: the copies take 2 bytes an element while the ``with`` lasts, half the float32 parameters they copy:
``PointTransformerSeg50`` 7.73 M Linear parameters (of 7.77 M), 14.7 MiB beside the weights' 29.5 MiB.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from pointgeope.engine import build
from pointgeope.engine.config import Config

__all__ = ["cast_linears", "copies"]


def _castable(module: nn.Linear, name: str, dtype: torch.dtype) -> bool:
    """Whether autocast of ``dtype`` would cast ``module``'s parameter ``name`` (``weight`` or ``bias``) at each
    call, and no enclosing :func:`cast_linears` holds its copy already."""
    param = module._parameters.get(name)
    return (param is not None and name not in vars(module) and not nn.parameter.is_lazy(param)
            and param.is_floating_point() and param.dtype not in (torch.float64, dtype))


@contextlib.contextmanager
def cast_linears(model: nn.Module, dtype: torch.dtype | None) -> Iterator[int]:
    """Within the ``with``, every ``nn.Linear`` of ``model`` reads ``weight (C_out, C_in)`` and ``bias (C_out,)``
    as copies in ``dtype``, made on entry on the parameters' device (module docstring); yields how many tensors
    were copied. ``dtype`` None (float32: no autocast) copies nothing. Nested: an inner ``with`` of the same
    model copies nothing and leaves the outer copies in place."""
    if dtype is None:
        yield 0
        return
    made: list[tuple[nn.Module, str]] = []
    try:
        for module in model.modules():
            if isinstance(module, nn.Linear):
                for name in ("weight", "bias"):
                    if _castable(module, name, dtype):
                        vars(module)[name] = module._parameters[name].detach().to(dtype)
                        made.append((module, name))
        yield len(made)
    finally:
        for module, name in made:
            del vars(module)[name]


def copies(model: nn.Module, cfg: Config, device: torch.device):
    """:func:`cast_linears` in the test forward's autocast dtype (``eval.amp`` on ``device``,
    ``build.eval_precision``): the copies for one evaluate, validation or predict run; a ``with`` that copies
    nothing in float32 (``eval.amp: none``, and on the CPU)."""
    return cast_linears(model, build.eval_precision(cfg, device))
