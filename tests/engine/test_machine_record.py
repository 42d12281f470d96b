"""pointgeope/engine/machine_record.py: the machine a fold trained and was tested on, as checkpoints and
metrics.json record it (report compares the folds': tests/test_report_machine.py)."""
from __future__ import annotations

import torch

from pointgeope import __version__
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.machine_record import fold_machines, machine, saved_trained_on, trained_on, training_machine
from pointgeope.engine.state import FoldCheckpoints, LoopState
from tests.engine.test_state import learner

CPU = torch.device("cpu")


def test_the_record_of_a_cpu_process_says_what_runs_there():
    """On the CPU every amp runs float32 (build.autocast_dtype); the threads are torch's now."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for amp in ("bf16", "fp16", "none"):
            assert machine(CPU, amp, 3) == {"device": "cpu", "processes": 3, "threads": 1, "precision": "float32",
                                            "torch": torch.__version__}
        torch.set_num_threads(2)
        assert machine("cpu", "none")["threads"] == 2 and machine("cpu", "none")["processes"] == 1
    finally:
        torch.set_num_threads(before)


A = {"device": "cpu", "processes": 1, "threads": 1, "precision": "float32", "torch": "2.13.0"}
B = {**A, "threads": 2}


def test_a_fold_lists_each_machine_it_trained_on_once_in_order():
    assert trained_on(None, A) == [A]
    assert trained_on({"trained_on": [A]}, A) == [A]          # resumed on the same machine
    assert trained_on({"trained_on": [A]}, B) == [A, B]       # resumed on another
    assert trained_on({"trained_on": [A, B]}, A) == [A, B, A]  # and back: three spans of its training


def test_an_older_checkpoint_gives_the_thread_count_it_recorded_and_nothing_else():
    assert saved_trained_on({"threads": 4}) == [{"threads": 4}]
    assert saved_trained_on({}) == [] and saved_trained_on({"threads": True}) == []
    assert trained_on({"threads": 4}, A) == [{"threads": 4}, A]
    assert saved_trained_on({"trained_on": "x", "threads": 2}) == [{"threads": 2}]   # damaged: as if absent


def test_checkpoints_carry_the_machines_across_a_resume(tmp_path):
    """Before: a checkpoint held the thread count alone, so a fold resumed on another machine (train.device and
    train.threads are free keys) left no trace of its first part."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=CPU)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        FoldCheckpoints(tmp_path, learner(0), env, {"train": {"amp": "bf16"}}, {}).save("last.pt", LoopState(1))
        first = torch.load(tmp_path / "last.pt", weights_only=True)["trained_on"]
        assert first == [training_machine(CPU, "none")] and first[0]["threads"] == 1
        assert first[0]["precision"] == "float32" and first[0]["pointgeope"] == __version__
        torch.set_num_threads(2)
        ckpts = FoldCheckpoints(tmp_path, learner(1), env, {"train": {"amp": "bf16"}}, {})
        ckpts.resume(lambda line: None)
        ckpts.save("last.pt", LoopState(2))
        assert torch.load(tmp_path / "last.pt", weights_only=True)["trained_on"] == [
            first[0], {**first[0], "threads": 2}]
    finally:
        torch.set_num_threads(before)


def test_metrics_json_gets_the_checkpoint_s_machines_and_the_test_s():
    env = DistEnv(rank=0, world_size=2, local_rank=0, device=CPU)
    got = fold_machines({"trained_on": [A, B]}, env, "fp16")
    assert got == {"trained_on": [A, B], "tested_on": {**machine(CPU, "none"), "processes": 2}}
    assert fold_machines({}, env, "none")["trained_on"] is None   # an older checkpoint without threads: none known


def test_a_resume_under_other_code_says_so_in_one_line(tmp_path):
    """A fold resumed by another version or commit than the one that wrote its last.pt continues as another run
    wherever their computations differ: the resume says so, naming both; the same code says nothing, and a
    checkpoint from before the code record is named as such (it was silent in each case)."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=CPU)
    config = {"train": {"amp": "none"}}

    def resumed_lines() -> list[str]:
        lines: list[str] = []
        FoldCheckpoints(tmp_path, learner(1), env, config, {}).resume(lines.append)
        return [line for line in lines if "was trained by" in line]

    FoldCheckpoints(tmp_path, learner(0), env, config, {}).save("last.pt", LoopState(1))
    assert resumed_lines() == []
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    ckpt["trained_on"][-1] |= {"pointgeope": "0.1.0", "pointgeope_commit": "a32a2b0" + "0" * 33,
                                  "pointgeope_modified": False}
    torch.save(ckpt, tmp_path / "last.pt")
    (line,) = resumed_lines()
    assert line.startswith(f"note: {tmp_path / 'last.pt'} was trained by pointgeope 0.1.0 (commit a32a2b0), "
                           f"this run is pointgeope {__version__}")
    assert "another run" in line and "\n" not in line
    del ckpt["trained_on"]
    ckpt["threads"] = torch.get_num_threads()
    torch.save(ckpt, tmp_path / "last.pt")
    (line,) = resumed_lines()
    assert "was trained by an older pointgeope, which recorded no code" in line
