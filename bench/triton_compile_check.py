"""Compile the Triton kernels of ``pointgeope/model/ops`` for NVIDIA GPUs without a GPU, with the real
compiler (the interpreter that runs the CPU tests accepts more than the compiler does).

For each kernel at the settings the ops launch it with (kNN for k = 3, 8, 16; both FPS kernels at 80k
points per cloud) and each target (sm_80, sm_90): compiled or the error, and whether the PTX holds a
fused multiply-add on float32 (it must not: the results are defined with one rounding per operation).
Prints one JSON object; exit code 1 if any kernel failed or fused. ``TRITON_INTERPRET`` must be unset.

Usage: python bench/triton_compile_check.py [--quick]   (--quick: sm_90 only, kNN for k = 16 only)
"""
from __future__ import annotations

import inspect
import json
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pointgeope.model.ops import triton_fps, triton_knn

KNN_SIG = dict(q_ptr="*fp32", q_row_ptr="*i64", q_plane="i64", s_ptr="*fp32", s_row_ptr="*i64", s_plane="i64",
               box_ptr="*fp32", qb_ptr="*i64", idx_ptr="*i64", d2_ptr="*fp32")
STREAM_SIG = dict(p_ptr="*fp32", plane="i64", dist_ptr="*fp32", start_ptr="*i64", size_ptr="*i64", kept_ptr="*i64",
                  out_start_ptr="*i64", out_ptr="*i64")
PRUNED_SIG = dict(p_ptr="*fp32", plane="i64", row_ptr="*i64", box_ptr="*fp32", dist_ptr="*fp32", bmax_ptr="*fp32",
                  barg_ptr="*i64", scratch_ptr="*i64", pts_ptr="*fp32", pts_plane="i64", meta_ptr="*i64",
                  out_ptr="*i64")


def cases() -> list[tuple[str, object, dict, dict, dict]]:
    """(name, kernel, signature, constexprs, options) as the ops launch them."""
    knn = [(f"knn_k{k}", triton_knn._knn_kernel, KNN_SIG,
            dict(K=k, KP=max(2, triton.next_power_of_2(k)), BQ=triton_knn.BLOCK_Q, BS=triton_knn.BLOCK_S,
                 W=triton_knn.WINDOW, CH=triton_knn.CHUNK),
            dict(num_warps=triton_knn.KNN_WARPS)) for k in (3, 8, 16)]
    nbp = triton.next_power_of_2(-(-80_000 // triton_fps.BLOCK_P))
    return knn + [("fps_stream", triton_fps._fps_kernel, STREAM_SIG, dict(BLOCK=4096), dict(num_warps=16, num_stages=1)),
                  ("fps_pruned", triton_fps._fps_pruned_kernel, PRUNED_SIG,
                   dict(NBP=nbp, BP=triton_fps.BLOCK_P, G=triton_fps.GROUP),
                   dict(num_warps=triton_fps.PRUNED_WARPS, num_stages=1))]


def compile_one(kernel, signature: dict, constexprs: dict, options: dict, arch: int) -> dict:
    names = list(inspect.signature(kernel.fn).parameters)
    missing = [n for n in names if n not in signature and n not in constexprs]
    if missing:
        return {"ok": False, "error": f"no value for the parameters {missing}: update cases()"}
    src = ASTSource(fn=kernel, signature={n: signature.get(n, "constexpr") for n in names},
                    constexprs={(names.index(k),): v for k, v in constexprs.items()})
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(options, enable_fp_fusion=False))
    except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
    ptx = compiled.asm["ptx"]
    return {"ok": True, "fma_f32": ptx.count("fma.rn.f32") + ptx.count("fma.rn.ftz.f32"),
            "shared_bytes": compiled.metadata.shared}


def main() -> int:
    if triton.knobs.runtime.interpret:
        print("TRITON_INTERPRET is set: unset it to compile", file=sys.stderr)
        return 2
    quick = "--quick" in sys.argv[1:]
    result = {"triton": triton.__version__, "kernels": {}}
    for name, kernel, signature, constexprs, options in cases():
        if quick and name in ("knn_k3", "knn_k8"):
            continue
        for arch in (90,) if quick else (80, 90):
            result["kernels"][f"{name}_sm{arch}"] = compile_one(kernel, signature, constexprs, options, arch)
    print(json.dumps(result, indent=2))
    bad = [k for k, v in result["kernels"].items() if not v["ok"] or v["fma_f32"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
