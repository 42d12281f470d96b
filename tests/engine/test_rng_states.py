"""Tests of pointgeope/engine/rng_states.py: the generators' states a checkpoint holds come back where another
number of GPUs is visible (a resume's other number of processes: tests/engine/test_state.py)."""
from __future__ import annotations

import pytest
import torch

from pointgeope.engine.rng_states import rng_state, set_rng_state


@pytest.fixture
def fake_gpus(monkeypatch):
    """``set(n)``: torch.cuda as on a machine with ``n`` visible GPUs, each device's default generator a CPU
    ``torch.Generator``: torch's own ``get_rng_state_all`` / ``set_rng_state_all`` then run on that table
    (one state per device; device ``i`` is ``torch.cuda.default_generators[i]``). Returns the table."""
    import torch.cuda.random as cuda_random

    def set_gpus(n: int) -> tuple[torch.Generator, ...]:
        table = tuple(torch.Generator().manual_seed(100 + i) for i in range(n))
        monkeypatch.setattr(torch.cuda, "default_generators", table)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(cuda_random, "device_count", lambda: n)
        return table
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda_random, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda_random, "_lazy_init", lambda: None)
    return set_gpus


@pytest.mark.parametrize("saved_on, resumed_on", [(2, 1), (8, 1), (1, 2), (1, 3), (2, 2)])
def test_cuda_generators_resume_where_another_number_of_gpus_is_visible(fake_gpus, saved_on, resumed_on):
    """A fold saved where ``saved_on`` GPUs were visible (torchrun on 2, a shared node) resumes where
    ``resumed_on`` are (``CUDA_VISIBLE_DEVICES=0``): each visible device takes its saved generator state, the
    saved states of devices not there are dropped, a device the checkpoint did not have keeps its own.
    torch's ``set_rng_state_all`` indexed device 1 of a one-GPU machine: IndexError, a traceback at the resume."""
    saved_table = fake_gpus(saved_on)
    for i, g in enumerate(saved_table):
        g.manual_seed(7 + i)
    state = rng_state()
    assert len(state["cuda"]) == saved_on
    want = [torch.rand(3, generator=torch.Generator().set_state(s)) for s in state["cuda"]]
    table = fake_gpus(resumed_on)
    untouched = [torch.rand(3, generator=torch.Generator().set_state(g.get_state())) for g in table]
    set_rng_state(state)
    for i, g in enumerate(table):
        assert torch.equal(torch.rand(3, generator=g), want[i] if i < saved_on else untouched[i]), i


def test_a_rank_beyond_the_saved_ones_seeds_every_visible_device_from_the_saved_state_and_its_rank(fake_gpus):
    """The CUDA branch of a new rank (more processes than the checkpoint had), on 2 fake GPUs: every visible device
    is seeded with the 4th word of ``SeedSequence([*w, rank])``, ``w`` the first 4 draws of ``randint(2**62)`` from
    rank ``rank % len(saved)``'s torch state (rank_rng_state's docstring), computed here from that definition."""
    import numpy as np

    from pointgeope.engine.rng_states import restore_rank_rng

    fake_gpus(1)
    torch.manual_seed(3)
    saved = [rng_state()]
    table = fake_gpus(2)
    for rank in (1, 2):
        words = torch.randint(2**62, (4,), generator=torch.Generator().set_state(saved[0]["torch"])).tolist()
        seed = int(np.random.SeedSequence([*words, rank]).generate_state(4, np.uint64)[3]) >> 1
        want = torch.rand(3, generator=torch.Generator().manual_seed(seed))
        restore_rank_rng(saved, rank)
        for device, g in enumerate(table):
            assert torch.equal(torch.rand(3, generator=g), want), (rank, device)
