"""Compile every proto_mixer Triton kernel for an NVIDIA target without a GPU.

Triton's compiler (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin with the bundled ptxas) runs on the
CPU, so the compiled (non-interpreter) code path is at least checked to build where no GPU is
present: control flow inside loops, dtypes, tl.dot shapes and precisions, shared memory. It
says nothing about the numbers on a GPU; tests/kernels on a GPU machine does.

Run as a script (tests/kernels/test_proto_mixer_kernels.py::test_kernels_compile_for_sm90 does, in a
subprocess without TRITON_INTERPRET):  python tests/kernels/compile_for_gpu.py [--all] [--ptxas]
(--ptxas adds registers and spills per kernel from ptxas -v.)
"""
from __future__ import annotations

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)   # must happen before the kernel modules are imported

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels.proto_mixer import chunk as C  # noqa: E402
from kernels.proto_mixer import fused_recurrent as R  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)   # H100 / H200
F32 = "*fp32"


def compile_kernel(fn, pointers_and_ints: dict, constexprs: dict, num_warps: int = 4) -> dict:
    sig = {**pointers_and_ints, **{name: "constexpr" for name in constexprs}}
    kernel = triton.compile(ASTSource(fn, signature=sig, constexprs=constexprs), target=TARGET,
                            options={"num_warps": num_warps})
    info = {"shared_bytes": kernel.metadata.shared, "has_cubin": "cubin" in kernel.asm}
    if PTXAS_REPORT:
        info["ptxas"] = ptxas_usage(kernel.asm["ptx"])
    return info


PTXAS_REPORT = "--ptxas" in sys.argv


def ptxas_usage(ptx: str) -> str:
    """Registers and spills per thread, from the bundled ptxas -v (the newest one in the wheel)."""
    import glob
    import subprocess
    import tempfile

    bins = sorted(glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas*")))
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    for exe in reversed(bins):   # "ptxas-blackwell" reads newer PTX versions than "ptxas"
        out = subprocess.run([exe, "-v", "-arch=sm_90a", f.name, "-o", os.devnull], capture_output=True, text=True)
        if out.returncode == 0:
            os.unlink(f.name)
            return " | ".join(line.split("info    : ")[-1] for line in out.stderr.splitlines()
                              if "registers" in line or "spill" in line)
    os.unlink(f.name)
    return "ptxas failed"


def configs(full: bool):
    """(input pointer type, dot precision, diag_3d): the GPU default for bfloat16 inputs, and with
    --all also float32 inputs with exact dots and the 3-D diagonal."""
    yield "*bf16", "tf32", False
    if full:
        yield "*fp32", "ieee", False
        yield "*bf16", "tf32", True


def main(full: bool = False) -> None:
    BT, BC, BK, BV, H, K, V = 64, 16, 32, 64, 1, 32, 256
    shape = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV)
    for dt, prec, d3 in configs(full):
        kernels = {
            "_chunk_fwd_h": (C._chunk_fwd_h, dict(k=dt, v=dt, a=F32, h0=F32, h=F32, T="i32", NT="i32"),
                             dict(**shape, USE_H0=True, PREC=prec)),
            "_chunk_intra_A": (C._chunk_intra_A, dict(q=dt, k=dt, a=F32, A=F32, T="i32"),
                               dict(H=H, K=K, BT=BT, BC=BC, BK=BK, NC=BT // BC, DIAG_3D=d3, PREC=prec)),
            "_chunk_fwd_o": (C._chunk_fwd_o, dict(q=dt, v=dt, a=F32, h=F32, A=F32, o=dt, T="i32", NT="i32"),
                             dict(**shape, PREC=prec)),
            "_chunk_bwd_dh": (C._chunk_bwd_dh, dict(q=dt, do=dt, a=F32, dht=F32, dh=F32, dh0=F32, T="i32", NT="i32"),
                              dict(**shape, USE_DHT=True, USE_DH0=True, PREC=prec)),
            "_chunk_bwd_dA": (C._chunk_bwd_dA, dict(do=dt, v=dt, dA=F32, T="i32"),
                              dict(H=H, V=V, BT=BT, BV=BV, PREC=prec)),
            "_chunk_bwd_dv": (C._chunk_bwd_dv, dict(k=dt, do=dt, a=F32, A=F32, dh=F32, dv=dt, T="i32", NT="i32"),
                              dict(**shape, PREC=prec)),
            "_chunk_bwd_dqk_intra": (C._chunk_bwd_dqk_intra, dict(q=dt, k=dt, a=F32, dA=F32, dq=F32, dk=F32, T="i32"),
                                     dict(H=H, K=K, BT=BT, BC=BC, BK=BK, NC=BT // BC, DIAG_3D=d3, PREC=prec)),
            "_chunk_bwd_dqk_inter": (C._chunk_bwd_dqk_inter,
                                     dict(q=dt, k=dt, v=dt, do=dt, a=F32, h=F32, dh=F32, dq_intra=F32,
                                          dk_intra=F32, dq=dt, dk=dt, da=F32, T="i32", NT="i32"),
                                     dict(**shape, PREC=prec)),
            "_fused_recurrent_fwd": (R._fused_recurrent_fwd,
                                     dict(q=dt, k=dt, v=dt, a=F32, h0=F32, o=dt, ht=F32, T="i32"),
                                     dict(H=H, K=K, V=V, BK=BK, BV=32, USE_H0=True, STORE_HT=True)),
        }
        in_dtype = {"*bf16": torch.bfloat16, "*fp32": torch.float32}[dt]
        for name, (fn, sig, consts) in kernels.items():
            # the warps the host launches with (chunk.num_warps; the fused recurrent kernel: 4)
            warps = C.num_warps(name, BT, in_dtype) if name.startswith("_chunk") else 4
            info = compile_kernel(fn, sig, consts, warps)
            assert info["has_cubin"], name
            print(f"compiled {name:22s} {dt:6s} {prec:4s} diag_3d={d3!s:5s} warps={warps} shared={info['shared_bytes']} B"
                  + (f" | {info['ptxas']}" if PTXAS_REPORT else ""), flush=True)


if __name__ == "__main__":
    main(full="--all" in sys.argv)
