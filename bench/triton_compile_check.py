"""Compile the Triton kernels of ``pointgeope/model/ops`` and of the fused attention
(``pointgeope/model/triton_attention.py``) for NVIDIA GPUs without a GPU, with the real compiler (the
interpreter that runs the CPU tests accepts more than the compiler does).

For each kernel at the settings its caller launches it with and each target (sm_80, sm_90): compiled or the
error, the float32 fused multiply-adds in the PTX and the shared memory. Ops: kNN for k = 3, 8, 16, 32 and its
largest, ``backends.TRITON_KNN_MAX_K`` = 64; both FPS
kernels at 80k points per cloud; their PTX must hold no fused multiply-add (the results are defined with one
rounding per operation, ``enable_fp_fusion=False``). Attention: the ten kernels (the folded frame's,
``triton_frame_fold``, with them) as ``fused_attention``
launches them (its ``tiles`` and ``WARPS``) for the S3DIS recipe's widths 32..512,
``share_planes`` 8 and k = 8, 16 on float32 and bfloat16 tensors, and at k = 16, width 64 also on float64
(it runs on CUDA too: ``kernels.use_triton`` takes Triton there for any dtype) and without ``delta``; atomics and
GeoPE's geometry in float32 (float64); aggregate's backward both ways (its weights stored for the sum by source
point, ``gather_backward.SCATTER`` "sorted", or its values' gradient by atomics, "atomic"; the default "auto"
takes sorted under deterministic algorithms only) and the frame's storing its turned pairs too; with them
the three kernels of the backward by source point (``triton_gather``, at ``gather_backward``'s tiles), and the
frame's and aggregation's at every setting of ``bench_relation_backward.SWEEP`` (k = 8, width 32 and k = 16,
width 64, bfloat16; their spills recorded, not refused: see ``gather_sweep_cases``). They launch with Triton's
default ``enable_fp_fusion`` and promise no rounding per operation, so fused multiply-adds are counted, not
refused. Batch norm with its ReLU: the four kernels of ``norm.py`` at its tiles for widths 3, 8, 16, 32, 64
(every tile of the recipe's norms, whose widths 4..512 share them), float32 and bfloat16 rows, training (batch
statistics, running buffers updated), and at width 64 eval (the one launch forward: ``normalize`` on the running
buffers) and float64 (fused multiply-adds counted too); the
plain norm (no ReLU) at the same settings, the three kernels that take the activation's flag; the three that take
the PTv1 block's tail (``residual_norm.py``: ``normalize`` with the residual add, ``grad_sums`` and ``grad_input``
with the saved output's mask) at the same settings. GeoPE's shift
tables (``triton_rotation``): ``shifted`` (``apply_shifted``: float32, bfloat16 and float64 features, with and
without ``minus``, ``R`` and ``R^T``) and ``tables``, float32 and float64, at ``shifted_kernel``'s tiles (their
multiply-adds are fused by design, ``tl.fma``: counted, not refused).
Prints one JSON object; exit code 1 if any kernel failed or spills, or an ops kernel fused.
``TRITON_INTERPRET`` must be unset.

Usage: python bench/triton_compile_check.py [--quick]
  (--quick: sm_90 only, kNN for k = 16 only, attention at k = 16, width 64, bfloat16, with delta; the shift
  tables' kernels on float32 tables, float32 and bfloat16 features, without minus)
"""
from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pointgeope.model import (
    frame_fold,
    fused_attention,
    gather_backward,
    norm,
    shifted_kernel,
    triton_attention as att,
    triton_frame_fold as fold,
    triton_gather as gat,
    triton_norm,
    triton_rotation,
)
from pointgeope.model.ops import triton_fps, triton_fps_rounds, triton_knn
from pointgeope.model.ops.backends import TRITON_KNN_MAX_K

KNN_SIG = dict(q_ptr="*fp32", q_row_ptr="*i64", q_plane="i64", s_ptr="*fp32", s_row_ptr="*i64", s_plane="i64",
               box_ptr="*fp32", sbox_ptr="*fp32", qb_ptr="*i64", idx_ptr="*i64", d2_ptr="*fp32")
ROUNDS_SIG = dict(p_ptr="*fp32", plane="i64", row_ptr="*i64", box_ptr="*fp32", dist_ptr="*fp32", bkey_ptr="*i64",
                  ids_ptr="*i64", picks_ptr="*fp32", pts_ptr="*fp32", pts_plane="i64", meta_ptr="*i64", out_ptr="*i64")
STREAM_SIG = dict(p_ptr="*fp32", plane="i64", dist_ptr="*fp32", start_ptr="*i64", size_ptr="*i64", kept_ptr="*i64",
                  out_start_ptr="*i64", out_ptr="*i64")


FUSED = dict(enable_fp_fusion=True)    # fused_attention launches with Triton's default (on, Triton 3.6)
WIDTHS, NEIGHBOURS, SHARE = (32, 64, 128, 256, 512), (8, 16), 8     # the S3DIS recipe (configs/s3dis)


def ops_cases() -> list[tuple[str, object, dict, dict, dict]]:
    """(name, kernel, signature, constexprs, options) as the ops launch them."""
    knn = [(f"knn_k{k}", triton_knn._knn_kernel, KNN_SIG,
            dict(K=k, KP=max(2, triton.next_power_of_2(k)), BQ=triton_knn.BLOCK_Q, BS=triton_knn.BLOCK_S,
                 W=triton_knn.WINDOW, CH=triton_knn.CHUNK, SB=triton_knn.SUPER),
            dict(num_warps=triton_knn.KNN_WARPS)) for k in (3, 8, 16, 32, TRITON_KNN_MAX_K)]    # up to its largest
    r = triton_fps_rounds
    rounds = [(f"fps_rounds_nbp{n}", r._fps_rounds_kernel, ROUNDS_SIG,
               dict(BLOCK_LANES=n, BLOCK_POINTS=r.BLOCK_POINTS, CHUNK_BLOCKS=r.CHUNK_BLOCKS,
                    ROUND_SAMPLES=r.ROUND_SAMPLES, UPDATE_BLOCKS=r.UPDATE_BLOCKS, UPDATE_SAMPLES=r.UPDATE_SAMPLES,
                    LEVELS=r.LEVELS, TUPLE=True),
               dict(num_warps=r.WARPS, num_stages=1, **r.MAXNREG)) for n in (2048, 512, 128, 2)]   # 131k .. 65 points
    return knn + rounds + [("fps_stream", triton_fps._fps_kernel, STREAM_SIG, dict(BLOCK=4096),
                            dict(num_warps=16, num_stages=1))]


def attention_signatures(t: str, acc: str) -> dict:
    """Each attention kernel's pointer and integer types, as ``fused_attention`` passes them for inputs of
    type ``t``: gradients summed by atomics and GeoPE's geometry (tables, displacements) in ``acc``."""
    ints = dict(N="i32", K="i32", C="i32")
    p = {n: f"*{t}" for n in ("w_ptr", "v_ptr", "delta_ptr", "y_ptr", "gy_ptr", "gw_ptr", "gdelta_ptr", "key_ptr",
                                 "q_ptr", "out_ptr", "g_ptr", "gq_ptr", "x_ptr")}
    p.update(idx_ptr="*i64", order_ptr="*i32", starts_ptr="*i64",
             **{n: f"*{acc}" for n in ("gv_ptr", "gkey_ptr", "points_ptr", "tables_ptr", "gpoints_ptr", "disp_ptr",
                                       "scale_ptr", "gx_ptr", "p_ptr", "turned_ptr")})
    return dict(p, **ints, G="i32", NB="i32", R="i32")


def attention_cases(quick: bool) -> list[tuple[str, object, dict, dict, dict]]:
    """The ten attention kernels at ``fused_attention``'s tiles for each recipe width and k (distinct
    tiles only), float32 and bfloat16 with ``delta``; at k = 16, width 64 also float64 and without ``delta``
    (quick: k = 16, width 64, bfloat16, with ``delta``)."""
    out = {}
    for k in (16,) if quick else NEIGHBOURS:
        for c in (64,) if quick else WIDTHS:
            extra = not quick and (k, c) == (16, 64)
            dtypes = ((("bf16", "fp32"),) if quick else
                      (("fp32", "fp32"), ("bf16", "fp32")) + extra * (("fp64", "fp64"),))
            for t, acc in dtypes:
                for delta in (True, False) if extra else (True,):
                    out.update(_attention_at(k, c, t, acc, delta))
    return [(name, *case) for name, case in out.items()]


def _attention_at(k: int, c: int, t: str, acc: str, delta: bool) -> dict:
    """{name: (kernel, signature, constexprs, options)} of the ten kernels (forwards only without ``delta``,
    but aggregate's backward) at k neighbours, width c, tensors of type t, as ``fused_attention`` launches them
    (its ``tiles`` and ``WARPS``)."""
    f64 = t == "fp64"
    names = dict(aggregate=("BLOCK_G", c // SHARE), relation=("BLOCK_C", min(c, 64)), frame=("BLOCK_C", min(c, 64)),
                 linear=("BLOCK_B", min(c // 3, 32)), fold=("BLOCK_B", min(frame_fold.blocks(c), 32)))
    op_of = dict(aggregate="aggregate", relation="relation", frame="frame_relation", linear="linear_relation",
                 fold=frame_fold.NAME)
    grads = dict(aggregate=dict(GRAD_V=False, STORE_P=True, GRAD_DELTA=delta, HAS_DELTA=delta),   # SCATTER sorted
                 relation=dict(GRAD_KEY=True, GRAD_Q=True),
                 frame=dict(GRAD_POINTS=True, GRAD_Q=True, STORE_TURNED=False),
                 linear=dict(GRAD_X=True, GRAD_Q=True), fold=dict(GRAD_X=True, GRAD_Q=True))
    sig, out = attention_signatures(t, acc), {}
    options = dict(FUSED, num_warps=fused_attention.WARPS)
    for op, (block, width) in names.items():
        for backward in (False, True):
            if backward and not (delta or op == "aggregate"):
                continue
            bm, bk, bw = fused_attention.tiles(op_of[op], k, width, backward=backward, f64=f64)
            tile = dict(BLOCK_M=bm, BLOCK_K=bk, **{block: bw}, **(dict(S=SHARE) if op == "aggregate" else {}))
            tag = f"{t}{'' if delta else '_nodelta'}_tile{bm}_{bk}_{bw}"
            meta = dict(tile, F64=f64, **(grads[op] if backward else dict(HAS_DELTA=delta)))
            kernel = getattr(fold if op == "fold" else att, f"{op}_{'backward' if backward else 'forward'}")
            out[f"att_{op}_{'backward' if backward else 'forward'}_{tag}"] = (kernel, sig, meta, options)
            if backward and op == "aggregate":        # the values' gradient with atomics (SCATTER "atomic")
                atomic = dict(meta, GRAD_V=True, STORE_P=False)
                out[f"att_aggregate_backward_atomic_{tag}"] = (kernel, sig, atomic, options)
            if backward and op == "frame":            # the turned pairs stored (FRAME_TURN_FIRST)
                turned = dict(meta, GRAD_POINTS=False, STORE_TURNED=True)
                out[f"att_frame_backward_turned_{tag}"] = (kernel, sig, turned, options)
    if delta:                                  # the backward by source point (gather_backward), its settings
        out.update(_gather_at(k, min(c, 64), t, sig, f64))
    return out


def norm_cases(quick: bool) -> list[tuple[str, object, dict, dict, dict]]:
    """The four kernels of batch norm with its ReLU at ``norm.tiles`` for each width (float32 and bfloat16 rows,
    training), and at width 64 also eval (``normalize`` on the running buffers, ``grad_input``) and float64 (quick:
    width 64, bfloat16, training and eval); the three that
    take the activation's flag (``RELU``) without it, the plain norm's, at the same settings (``_plain``); and
    the three that take ``RESIDUAL`` (the block's tail: ``normalize`` with the residual add, the backward's two with
    the saved output's mask) at the same settings (``_residual``)."""
    out = []
    for width in (64,) if quick else (3, 8, 16, 32, 64):
        for t in ("bf16",) if quick else ("fp32", "bf16") + (("fp64",) if width == 64 else ()):
            for relu in (True, False):
                for batch in (True,) if width != 64 or t == "fp64" else (True, False):
                    out += [case for case in _norm_at(width, t, batch, relu=relu) if relu or "RELU" in case[3]]
                    out += _norm_at(width, t, batch, residual=True) if relu else []     # the block's tail
                out += [case for case in _norm_at(width, t, True, prefix=True, relu=relu)    # reading the count
                        if case[1].fn.__name__ in (("statistics", "grad_input") if relu else ("grad_input",))]
            out += [case for case in _norm_at(width, t, True, prefix=True, residual=True)   # the tail, padded
                    if case[1].fn.__name__ == "grad_input"]
    return out


def rotation_cases(quick: bool) -> list[tuple[str, object, dict, dict, dict]]:
    """GeoPE's shift tables (``triton_rotation``) as ``shifted_kernel`` launches them: ``shifted`` (``apply_shifted``)
    for features of each type (float32 and bfloat16 on float32 tables, float64 on float64), with and without
    ``minus``, ``R`` and ``R^T``; ``tables`` in float32 and float64 (quick: float32 and bfloat16 features, no
    ``minus``, both ways; float32 tables). Both fuse multiply-adds by design (``tl.fma``, torch's ``addcmul``)."""
    ints = {n: "i32" for n in ("M", "L1", "L2", "C", "N", "NB", "xs0", "xs1", "xs2", "xsc", "ts0", "ts1", "ts2", "tsc",
                               "tplane", "ms0", "ms1", "ms2", "msc", "os0", "os1", "os2", "osc")}
    tiles = dict(BLOCK_R=shifted_kernel.BLOCK_R, BLOCK_C=shifted_kernel.BLOCK_C)
    options, out = dict(FUSED, num_warps=shifted_kernel.WARPS), []
    for t, acc in (("fp32", "fp32"), ("bf16", "fp32")) + (() if quick else (("fp64", "fp64"),)):
        sig = dict(ints, x_ptr=f"*{t}", t_ptr=f"*{acc}", m_ptr=f"*{acc}", out_ptr=f"*{acc}")
        for minus in (False,) if quick else (False, True):
            for transpose in (False, True):
                meta = dict(tiles, HAS_MINUS=minus, TRANSPOSE=transpose, F64=acc == "fp64")
                name = f"rot_shifted_{t}{'_minus' if minus else ''}{'_transpose' if transpose else ''}"
                out.append((name, triton_rotation.shifted, sig, meta, options))
    for t in ("fp32",) if quick else ("fp32", "fp64"):
        sig = dict(ints, pos_ptr=f"*{t}", scale_ptr=f"*{t}", out_ptr=f"*{t}")
        table = dict(BLOCK_R=shifted_kernel.TABLE_R, BLOCK_C=shifted_kernel.TABLE_C, F64=t == "fp64")
        out.append((f"rot_tables_{t}", triton_rotation.tables, sig, table, options))
    return out


def _norm_at(width: int, t: str, batch: bool, prefix: bool = False, relu: bool = True,
             residual: bool = False) -> list[tuple[str, object, dict, dict, dict]]:
    """(name, kernel, signature, constexprs, options) of the four norm kernels as ``norm.py`` launches them;
    ``prefix``: a padded batch's (the statistics of the rows before ``*valid_ptr``); ``relu``: the activation
    of the three kernels that apply it (named ``_plain`` without it); ``residual``: the three kernels that take
    ``RESIDUAL`` as ``residual_norm.py`` launches them (``normalize`` adding the identity before the ReLU, the
    backward's two masking by the saved output and ``grad_input`` storing the identity's gradient; named
    ``_residual``; its statistics are the plain norm's)."""
    f64 = t == "fp64"
    acc = "fp64" if f64 else "fp32"
    block_r, block_c, block_t = norm.tiles(width, f64)
    sig = dict({n: f"*{t}" for n in ("x_ptr", "y_ptr", "id_ptr", "g_ptr", "out_ptr", "gm_ptr", "dx_ptr")},
               **{n: f"*{acc}" for n in ("mean_ptr", "m2_ptr", "stat_ptr", "sg_ptr", "sgx_ptr", "sums_ptr", "w_ptr",
                                         "b_ptr", "rm_ptr", "rv_ptr")},
               valid_ptr="*i64", count_ptr="*i64", ticket_ptr="*i32", R="i32", C="i32", ROWS="i32", T="i32",
               eps="fp32", momentum="fp32")
    rows = dict(BLOCK_R=block_r, BLOCK_C=block_c)
    kernels = [("statistics", dict(rows, BLOCK_T=block_t, PREFIX=prefix)),
               ("normalize", dict(rows, RUNNING=not batch, UPDATE=batch, COUNT=batch, RELU=relu or residual,
                                  RESIDUAL=residual)),
               ("grad_sums", dict(rows, BLOCK_T=block_t, RELU=relu and not residual, RESIDUAL=residual)),
               ("grad_input", dict(rows, BATCH=batch, PREFIX=prefix, RELU=relu and not residual, RESIDUAL=residual))]
    options = dict(FUSED, num_warps=norm.WARPS)
    mode = (("prefix" if prefix else "train") if batch else "eval") + ("_residual" if residual else
                                                                        "" if relu else "_plain")
    return [(f"norm_{name}_{t}_{mode}_tile{block_r}_{block_c}", getattr(triton_norm, name),
             sig, dict(meta, F64=f64), options) for name, meta in kernels
            if (batch or name in ("normalize", "grad_input")) and (name != "statistics" or not residual)]


def _gather_at(k: int, width: int, t: str, sig: dict, f64: bool, setting: dict | None = None,
               names: tuple[str, ...] = ("relation_gather", "frame_gather", "aggregate_gather"),
               prefix: str = "att_") -> dict:
    """{name: case} of ``triton_gather``'s kernels ``names`` at ``gather_backward``'s tiles for k and ``width``
    (each kernel's ``SETTINGS``, or ``setting``: one point of ``bench_relation_backward``'s sweep)."""
    out = {}
    for name in names:
        bp, bt, bc = gather_backward.tiles(name, k, width, f64, setting)
        warps = (setting or gather_backward.SETTINGS[name])["warps"]
        meta = dict(F64=f64, BLOCK_P=bp, BLOCK_T=bt, BLOCK_C=bc, **({} if name == "relation_gather" else dict(K=k)))
        out[f"{prefix}{name}_{t}_k{k}_tile{bp}_{bt}_{bc}_w{warps}"] = (getattr(gat, name), sig, meta,
                                                                      dict(FUSED, num_warps=warps))
    return out


def gather_sweep_cases() -> list[tuple[str, object, dict, dict, dict]]:
    """The sorted frame and aggregation kernels at every setting of ``bench_relation_backward.SWEEP`` (k = 8,
    width 32 and k = 16, width 64, bfloat16), named ``sweep_...``: whether what the GPU's sweep will launch
    compiles, and its spills (recorded; a spill of a setting that is no default fails nothing: ptxas trades a
    few spilled bytes for occupancy at some sizes, and the sweep measures what that costs)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_relation_backward import SWEEP

    sig, out = attention_signatures("bf16", "fp32"), {}
    for block_t, budget, rows, warps in SWEEP:
        setting = dict(block_t=block_t, budget=budget, rows=rows, warps=warps)
        for k, width in ((8, 32), (16, 64)):
            out.update(_gather_at(k, width, "bf16", sig, False, setting, ("frame_gather", "aggregate_gather"),
                                  "sweep_"))
    return [(name, *case) for name, case in out.items()]


def compile_one(kernel, signature: dict, constexprs: dict, options: dict, arch: int) -> dict:
    names = list(inspect.signature(kernel.fn).parameters)
    missing = [n for n in names if n not in signature and n not in constexprs]
    if missing:
        return {"ok": False, "error": f"no value for {missing}: update ops_cases() or attention_signatures()"}
    src = ASTSource(fn=kernel, signature={n: "constexpr" if n in constexprs else signature[n] for n in names},
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
    ptx = compiled.asm["ptx"]
    return {"ok": True, "fma_f32": ptx.count("fma.rn.f32") + ptx.count("fma.rn.ftz.f32"),
            "shared_bytes": compiled.metadata.shared, **resources(compiled.asm["cubin"]), **spills(ptx, arch)}


CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself assembles for ``arch`` with (3.9 takes its newer one for sm_90)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(arch).path


def spills(ptx: str, arch: int) -> dict:
    """Bytes of spill stores a thread, as ``ptxas -v`` (Triton's own) reports them for the kernel's PTX. The
    stack of ``resources`` also counts local arrays that are no spill: libdevice's ``sin``/``cos`` keep one
    (28-48 bytes) for the range reduction of huge arguments, so a kernel with them has a stack and no spill."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        out = subprocess.run([_ptxas(arch), "-v", f"--gpu-name=sm_{arch}{'a' if arch == 90 else ''}", path, "-o",
                              os.path.join(tmp, "k.o")], capture_output=True, text=True, check=False).stderr
    found = re.search(r"(\d+) bytes spill stores", out)
    return {"spill_store_bytes": int(found.group(1))} if found else {"ptxas": out[-300:]}


def resources(cubin: bytes) -> dict:
    """Registers and stack (spilled registers' local memory) a thread, from the cubin, by the ``cuobjdump``
    that ships with Triton (``--dump-resource-usage``)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True,
                             check=False).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", out)
    if not found:
        return {"resources": out[-300:]}
    return {"registers": int(found.group(1)), "stack_bytes": int(found.group(2))}


JOBS: list[tuple[str, tuple]] = []     # (name, compile_one's arguments), read by the forked workers


def _compile_job(i: int) -> dict:
    return compile_one(*JOBS[i][1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options (``--help`` prints them; an unknown option exits 2 with argparse's message)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--quick", action="store_true",
                        help="sm_90 only, kNN for k = 16 only, attention at k = 16, width 64, bfloat16, with delta; "
                        "the shift tables' kernels on float32 tables")
    return parser.parse_args(argv)


def main() -> int:
    quick = parse_args().quick
    if triton.knobs.runtime.interpret:
        print("TRITON_INTERPRET is set: unset it to compile", file=sys.stderr)
        return 2
    result = {"triton": triton.__version__, "kernels": {}}
    ops = [(n, k, s, c, dict(o, enable_fp_fusion=False)) for n, k, s, c, o in ops_cases()]
    JOBS[:] = [(f"{name}_sm{arch}", (kernel, signature, constexprs, options, arch))
               for name, kernel, signature, constexprs, options in ops + attention_cases(quick) + norm_cases(quick)
               + rotation_cases(quick) + ([] if quick else gather_sweep_cases())
               if not (quick and name.startswith("knn_") and name != "knn_k16")
               for arch in ((90,) if quick else (80, 90))]
    with multiprocessing.get_context("fork").Pool(min(2, os.cpu_count() or 1)) as pool:   # compiles: CPU-bound
        result["kernels"] = dict(zip((name for name, _ in JOBS), pool.map(_compile_job, range(len(JOBS))), strict=True))
    print(json.dumps(result, indent=2))
    bad = [k for k, v in result["kernels"].items() if not v["ok"] or (v["fma_f32"] and not k.startswith(
        ("att_", "norm_", "sweep_", "rot_"))) or (v.get("spill_store_bytes", 1) > 0 and not k.startswith("sweep_"))]
    print(f"{len(result['kernels'])} compiled; failed, fused or spilling: {bad or 'none'}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
