"""Test of bench/triton_compile_check.py: the Triton kernels of pointgeope/model/ops and of the fused attention
(triton_attention.py), of batch norm, with its ReLU and without (triton_norm.py), and of GeoPE's shift tables
(triton_rotation.py) pass the real compiler for sm_90 (no GPU needed), the ops without a fused multiply-add,
which the interpreter-run tests cannot check."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia", reason="this Triton has no NVIDIA backend")

REPO = Path(__file__).resolve().parents[2]


KINDS = {f"att_{op}_{way}_bf16" for op in ("aggregate", "relation", "frame", "linear", "fold")   # fold: frame_fold
         for way in ("forward", "backward")} \
    | {f"att_{op}_gather_bf16_k16" for op in ("relation", "frame", "aggregate")} \
    | {"att_aggregate_backward_atomic_bf16", "att_frame_backward_turned_bf16"}   # the other ways to sum
NORM_KINDS = {f"norm_{kernel}_bf16_train" for kernel in ("statistics", "normalize", "grad_sums", "grad_input")} \
    | {f"norm_{kernel}_bf16_prefix" for kernel in ("statistics", "grad_input")} \
    | {f"norm_{kernel}_bf16_train_plain" for kernel in ("normalize", "grad_sums", "grad_input")} \
    | {"norm_grad_input_bf16_prefix_plain"} \
    | {f"norm_{kernel}_bf16_eval{plain}" for kernel in ("normalize", "grad_input") for plain in ("", "_plain")} \
    | {f"norm_{kernel}_bf16_train_residual" for kernel in ("normalize", "grad_sums", "grad_input")} \
    | {f"norm_{kernel}_bf16_eval_residual" for kernel in ("normalize", "grad_input")} \
    | {"norm_grad_input_bf16_prefix_residual"}          # the block's tail, its backward's mask in both kernels
ROT_KINDS = {f"rot_shifted_{t}{way}_sm90" for t in ("fp32", "bf16") for way in ("", "_transpose")} \
    | {"rot_tables_fp32_sm90"}                   # GeoPE's shift tables: apply_shifted, the tables


@pytest.mark.slow
def test_the_kernels_compile_for_sm90_the_ops_with_one_rounding_per_operation_and_none_spills(compiled):
    """``bench/triton_compile_check.py --quick`` (its ``main``, in the interpreter of ``compiled``)."""
    assert compiled["quick_rc"] == 0, compiled["quick_out"][-3000:] + compiled["quick_err"][-3000:]
    kernels = json.loads(compiled["quick_out"])["kernels"]
    ops = ["fps_stream_sm90", "knn_k16_sm90"] + [f"fps_rounds_nbp{n}_sm90" for n in (2048, 512, 128, 2)]
    assert sorted(k for k in kernels if not k.startswith(("att_", "norm_", "rot_"))) == sorted(ops)
    assert {k for k in kernels if k.startswith("rot_")} == ROT_KINDS
    assert {k.split("_tile")[0] for k in kernels if k.startswith("norm_")} == NORM_KINDS  # with the ReLU, without
    assert {k.split("_tile")[0] for k in kernels if k.startswith("att_")} == KINDS   # k = 16, width 64, share_planes 8
    assert all(k["ok"] and k["spill_store_bytes"] == 0 for k in kernels.values())
    assert all(kernels[name]["fma_f32"] == 0 for name in ops)


@pytest.mark.parametrize("flag, rc, said", [("--help", 0, "usage: triton_compile_check.py [-h] [--quick]"),
                                            ("--quik", 2, "unrecognized arguments: --quik")])
def test_the_compile_check_says_its_usage_and_refuses_unknown_flags(flag, rc, said, monkeypatch, capsys):
    """``--help`` prints the options and a typo exits 2, before any kernel compiles (both used to start the
    full compile of every kernel for sm_80 and sm_90): the script's ``main`` in this process (a new interpreter
    would spend its time importing torch and Triton, not parsing)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import triton_compile_check as check

    monkeypatch.setattr(sys, "argv", ["triton_compile_check.py", flag])
    with pytest.raises(SystemExit) as exited:
        check.main()
    out = capsys.readouterr()
    said_here = " ".join((out.out + out.err).split())  # argparse wraps the usage to COLUMNS
    assert exited.value.code == rc and said in said_here, out.out[-2000:] + out.err[-2000:]
    assert '"kernels"' not in out.out


TABLES_NAMES = ["pos_ptr", "scale_ptr", "out_ptr", "N", "C", "NB", "F64", "BLOCK_R", "BLOCK_C"]
# One interpreter (its imports of torch and Triton took most of each test's time) runs the quick compile check's
# ``main`` (its exit code, stdout and stderr), then compiles, for sm_90, the tables kernel to TTIR and the norm's
# reductions to PTX; each test reads its part.
COMPILED = """
import sys
sys.path.insert(0, "bench")
import contextlib, inspect, io, json, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton_compile_check as check
out, err = io.StringIO(), io.StringIO()
sys.argv = ["triton_compile_check.py", "--quick"]
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = check.main()
quick = dict(quick_rc=rc, quick_out=out.getvalue(), quick_err=err.getvalue())
from pointgeope.model import shifted_kernel, triton_rotation
names = {names!r}
meta = dict(F64=False, BLOCK_R=shifted_kernel.TABLE_R, BLOCK_C=shifted_kernel.TABLE_C)
sig = {{n: "constexpr" if n in meta else "*fp32" if n.endswith("_ptr") else "i32" for n in names}}
src = ASTSource(fn=triton_rotation.tables, signature=sig, constexprs={{(names.index(k),): v for k, v in meta.items()}})
out = {{"tables_ttir": triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                    options=dict(num_warps=shifted_kernel.WARPS)).asm["ttir"], "norm_ptx": {{}},
       **quick}}
for name, kernel, sig, meta, options in check._norm_at(64, "bf16", True, prefix=True):
    if name.startswith(("norm_statistics", "norm_grad_sums")):
        names = list(inspect.signature(kernel.fn).parameters)
        src = ASTSource(fn=kernel, signature={{n: "constexpr" if n in meta else sig[n] for n in names}},
                        constexprs={{(names.index(k),): v for k, v in meta.items()}})
        out["norm_ptx"][name] = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    """``COMPILED``'s output: the quick compile check's exit code and output, the tables kernel's TTIR and the norm
    reductions' PTX, for sm_90."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", COMPILED.format(names=TABLES_NAMES)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_tables_kernel_addresses_its_planes_in_64_bits(compiled):
    """``triton_rotation.tables`` writes ``(5, N, C)``: plane ``s`` starts at ``s N C``, past 2^31 from ``N C =
    2^29`` (a 16 x 80k batch's 1.28M points at width 420 and up). The sizes ``N`` and ``C`` arrive as 32-bit
    arguments; compiled for sm_90, no 32-bit product may take either (it would wrap, and planes 2..4 be written at
    wrong addresses)."""
    import re

    ttir = compiled["tables_ttir"]
    head = re.search(r"tt\.func public @tables\((.*)", ttir).group(1)
    args = re.findall(r"(%[\w.]+): ", head)                          # the arguments' SSA names, in order
    sizes = {args[TABLES_NAMES.index("N")], args[TABLES_NAMES.index("C")]}
    products = re.findall(r"arith\.muli (%[\w.]+), (%[\w.]+) : i32\b", ttir)
    assert products and not [p for p in products if sizes & set(p)], products


def _ticket_order(ptx: str) -> list[str]:
    """The PTX lines that order a reducing kernel's partials and ticket, without operands' noise: each store
    to global memory, barrier, atomic, store to and load from shared memory, and load past L1, in order."""
    import re

    kinds = [("st.global", r"\bst\.global\b"), ("bar", r"\bbar\.sync\b"), ("atom", r"\batom\."),
             ("st.shared", r"\bst\.shared\b"), ("ld.shared", r"\bld\.shared\b"), ("ld.cg", r"\bld\.global\.cg\b")]
    return [kind for line in ptx.splitlines() for kind, pattern in kinds if re.search(pattern, line)]


def test_the_norm_reductions_order_their_partials_before_the_ticket_and_read_them_after(compiled):
    """The last program of a channel block reads partials other programs stored in the same launch, which the
    interpreter (programs one after another) cannot check: compiled for sm_90, each of ``statistics`` and
    ``grad_sums`` stores its partials, then a barrier of its threads, then one atomic on the ticket,
    acquire-release at GPU scope and predicated (one thread), its result broadcast through shared memory and a
    barrier, and only then loads of the partials, past L1 (``.cg``): the CUDA memory model's release by one
    thread after a CTA barrier and acquire before one (the last-block reduction of the CUDA samples)."""
    ptxs = compiled["norm_ptx"]
    assert {name.split("_bf16")[0] for name in ptxs} == {"norm_statistics", "norm_grad_sums"}
    for name, ptx in ptxs.items():
        atoms = [line.strip() for line in ptx.splitlines() if "atom." in line]
        assert len(atoms) == 1 and atoms[0].startswith("@%p"), (name, atoms)
        assert "atom.global.gpu.acq_rel.add" in atoms[0], (name, atoms)
        order = _ticket_order(ptx)
        at = order.index("atom")
        before, after = order[:at], order[at + 1:]
        assert "bar" in before[len(before) - before[::-1].index("st.global"):], (name, before[-8:])
        assert "ld.cg" not in before and after[0] == "st.shared", (name, after[:6])
        first_load = after.index("ld.cg")
        assert after.index("bar") < after.index("ld.shared") < first_load, (name, after[:first_load + 1])
