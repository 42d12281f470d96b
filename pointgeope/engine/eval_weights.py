"""The test's copies of the weights in ``eval.amp``'s dtype, made once for a run of many batches.

Under autocast (``eval.amp: bf16`` or ``fp16`` on CUDA, ``build.autocast``) every ``nn.Linear``, and the attention
layers' queries, keys and values (three ``F.linear`` without gradients, ``model/qkv.py``), runs as::

    y = linear(x.to(h), W.to(h), b.to(h))      W (C_out, C_in), b (C_out,), h = bfloat16 or float16

casting ``W`` and ``b`` again at every call: autocast keeps its casts for the rest of its region only with
gradients on, and the test runs under ``torch.inference_mode`` (``evaluate.vote_room``). That is one launch per
weight and bias per batch, 317 a batch of ``PointTransformerSeg50`` (``bench/launch_count.py --what test --amp
bf16``); PTv3's sparse convolutions cast each kernel offset's ``W[:, i] (C_out, C_in)`` the same way (up to
``k^3`` a convolution, ``ptv3/sparse_conv.py``). :func:`cast_weights` makes the casts once and lets the modules
read them for as long as its ``with`` lasts; autocast finds them in its dtype and casts only the activations.
Each product is the same op on operands of the same values (``Tensor.to`` rounds each element alone, to nearest
even, whoever calls it, and a slice of the cast is the cast of the slice) and layout, so the logits are those of
autocast's own casts, bit for bit.

How a module reads its copy: ``module.weight`` is looked up in ``module._parameters`` only where the instance has
no attribute of that name (``nn.Module.__getattr__`` is Python's fallback); the copy is put in the instance's
``__dict__``, which Python's lookup finds first, and taken out when the ``with`` ends, also on an exception. The
parameters themselves, ``state_dict()``, ``parameters()``, the buffers and an optimiser's references are not
touched at any time, and nothing is left after the ``with``: the copies live for one run (:func:`copies`:
one ``evaluate``, validation or ``predict`` run), so weights trained between two runs are copied again. Inside
the ``with`` the model is for autocast's forward of ``dtype`` only (``VoteSink``'s): a float32 forward there
would meet half-precision weights (a dtype error, not a silent result), and a ``copy.deepcopy`` or pickle of
the model made there would keep the copies as its weights.
``torch.func.functional_call`` with a dict of the same copies launches the same kernels but swaps them into
``_parameters`` and back at every batch (317 tensors of ``PointTransformerSeg50``: about 1.3 ms of host time a
batch on a CPU core, where the test's launches already wait on the host), and ``parameters()`` and
``state_dict()`` show them in half precision meanwhile; the copies here cost nothing a batch.

What is copied: the floating weights and biases of ``nn.Linear`` (PTv1's and PTv3's Linears) and the weights of
``SubMConv3d`` (PTv3's), float64 ones not (autocast leaves them), a parameter not yet materialised (lazy) not,
nor one already in ``dtype``. Not a sparse convolution's bias, which ``subm_conv3d`` adds in float32 after the
products (a half-precision copy would round it), nor any norm's parameters (autocast casts none).

Memory: the copies take 2 bytes an element while the ``with`` lasts, half the float32 parameters they copy:
``PointTransformerSeg50`` 7.73 M Linear parameters (of 7.77 M), 14.7 MiB beside the weights' 29.6 MiB; PTv3's
recipe network 111 MiB (its Linears and sparse convolutions, 58.4 M parameters, 223 MiB in float32).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from pointgeope.engine import build
from pointgeope.engine.config import Config
from pointgeope.model.ptv3.sparse_conv import SubMConv3d

__all__ = ["ALIGN_BYTES", "cast_weights", "copies", "offset_blocks"]


ALIGN_BYTES = 256     # a sparse convolution's copied offset starts here, as a fresh allocation of autocast's would


def _castable(module: nn.Module, name: str, dtype: torch.dtype) -> bool:
    """Whether autocast of ``dtype`` would cast ``module``'s parameter ``name`` at each call, and no enclosing
    :func:`cast_weights` holds its copy already; an enclosing one of another dtype is refused (autocast of
    ``dtype`` would cast its copy again: rounded twice, a silent difference)."""
    param, held = module._parameters.get(name), vars(module).get(name)
    if held is not None and param is not None and held.dtype != dtype:
        raise RuntimeError(f"cast_weights({dtype}) inside cast_weights({held.dtype}) of the same model: "
                           f"{type(module).__name__}.{name} would be read in {held.dtype}")
    return (param is not None and held is None and not nn.parameter.is_lazy(param)
            and param.is_floating_point() and param.dtype not in (torch.float64, dtype))


def offset_blocks(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight (C_out, k, k, k, C_in)`` (``SubMConv3d``'s) in ``dtype``, stored offset by offset::

        storage: [ W[:, 0,0,0] | pad | W[:, 0,0,1] | pad | ... ]     each block (C_out, C_in) row-major,
                                                                     starting on an ALIGN_BYTES boundary

    so that ``subm_conv3d``'s ``weight.reshape(C_out, k^3, C_in)[:, i]`` is a view (no copy) and a contiguous
    ``(C_out, C_in)``, aligned as the fresh tensor of autocast's own cast of that slice: the products get
    operands of the same values and layout."""
    c_out, k, c_in = weight.shape[0], weight.shape[1], weight.shape[-1]
    align = max(1, ALIGN_BYTES // torch.empty((), dtype=dtype).element_size())
    step = -(-c_out * c_in // align) * align                               # elements from one block to the next
    flat = weight.new_empty((k ** 3 * step,), dtype=dtype)
    out = flat.as_strided((c_out, k, k, k, c_in), (c_in, k * k * step, k * step, step, 1))
    return out.copy_(weight.detach())


def _copies(module: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The copies in ``dtype`` of what autocast casts at each call of ``module``: an ``nn.Linear``'s weight and
    bias, a ``SubMConv3d``'s weight (offset by offset, :func:`offset_blocks`) but not its bias, which
    ``subm_conv3d`` adds in float32."""
    if isinstance(module, nn.Linear):
        return {name: module._parameters[name].detach().to(dtype) for name in ("weight", "bias")
                if _castable(module, name, dtype)}
    if isinstance(module, SubMConv3d) and _castable(module, "weight", dtype):
        return {"weight": offset_blocks(module._parameters["weight"], dtype)}
    return {}


@contextlib.contextmanager
def cast_weights(model: nn.Module, dtype: torch.dtype | None) -> Iterator[int]:
    """Within the ``with``, every ``nn.Linear`` of ``model`` reads ``weight (C_out, C_in)`` and ``bias (C_out,)``,
    and every ``SubMConv3d`` its ``weight (C_out, k, k, k, C_in)``, as copies in ``dtype`` made on entry on the
    parameters' device (module docstring); yields how many tensors were copied. ``dtype`` None (float32: no
    autocast) copies nothing. Nested: an inner ``with`` of the same model and dtype copies nothing and leaves the
    outer copies in place (of another dtype: a RuntimeError). A weight changed in place inside the ``with``
    (``load_state_dict``) is not seen until the next one; a Parameter assigned there is read from then on."""
    if dtype is None:
        yield 0
        return
    made: list[tuple[nn.Module, str, torch.Tensor]] = []
    try:
        for module in model.modules():
            for name, copy in _copies(module, dtype).items():
                vars(module)[name] = copy
                made.append((module, name, copy))
        yield len(made)
    finally:   # a copy already gone (a Parameter assigned to its name in the run removes it) is skipped
        for module, name, copy in made:
            if vars(module).get(name) is copy:
                del vars(module)[name]


def copies(model: nn.Module, cfg: Config, device: torch.device):
    """:func:`cast_weights` in the test forward's autocast dtype (``eval.amp`` on ``device``,
    ``build.eval_precision``): the copies for one evaluate, validation or predict run; a ``with`` that copies
    nothing in float32 (``eval.amp: none``, and on the CPU)."""
    return cast_weights(model, build.eval_precision(cfg, device))
