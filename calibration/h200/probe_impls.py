"""What PyTorch 2.11 launches for the RMSNorm and the grouped GEMMs of the shapes suite (H200).

Run on the GPU (no rubinperf import): python3 probe_impls.py [--ncu-target rms|none]
Prints, per call: each CUDA kernel's name, grid, block, registers and shared memory (torch.profiler's
trace), and a graph-replay time per call. With --ncu-target rms it only runs the RMSNorm calls (for
`ncu`, which then reports launch geometry, DRAM bytes and the L2 hit rate of that kernel).
"""
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

dev = torch.device("cuda")
fp8 = torch.float8_e4m3fn


def rms(m, n=20480):
    x = torch.randn(m, n, device=dev)
    w = torch.randn(n, device=dev)
    return lambda: F.rms_norm(x, (n,), w, 1e-6)


def grouped(dtype, groups, rpe, n, k):
    rows = groups * rpe
    offs = torch.cumsum(torch.full((groups,), rpe, dtype=torch.int32, device=dev), 0).to(torch.int32)
    if dtype == "fp8":
        a = torch.randn(rows, k, device=dev).to(fp8)
        w = torch.randn(groups, n, k, device=dev).to(fp8)
        sa = torch.ones(rows, device=dev)
        sb = torch.ones(groups, n, device=dev)
        return lambda: torch._scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                                use_fast_accum=True)
    a = torch.randn(rows, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16)
    return lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)


def kernels(fn):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    out = []
    for e in ev:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            out.append((e["name"][:400], a.get("grid"), a.get("block"), a.get("registers per thread"),
                        a.get("shared memory"), a.get("cluster") if "cluster" in a else None, e.get("dur")))
    return out


def graph_time(fn, calls=20, reps=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / calls)
    return sorted(ts)[reps // 2]


def main():
    target = sys.argv[sys.argv.index("--ncu-target") + 1] if "--ncu-target" in sys.argv else "all"
    cases = [(f"rms_norm fp32 [{m}, 20480]", rms(m)) for m in (8, 4096)]
    if target == "rms":
        for _, fn in cases:
            fn()
            torch.cuda.synchronize()
        return
    for rpe in (16, 64, 128, 129, 200, 256, 384, 512, 513, 1024):
        cases.append((f"_scaled_grouped_mm fp8 12 x {rpe} rows, 4608x5120", grouped("fp8", 12, rpe, 4608, 5120)))
    for rpe in (16, 128, 129, 200, 256):
        cases.append((f"_grouped_mm bf16 12 x {rpe} rows, 4608x5120", grouped("bf16", 12, rpe, 4608, 5120)))
    for label, fn in cases:
        try:
            ks = kernels(fn)
            t = graph_time(fn)
        except Exception as exc:
            print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        print(f"{label}: graph {t * 1e6:.1f} us per call", flush=True)
        for name, grid, block, regs, smem, cluster, dur in ks:
            print(f"    grid {grid} block {block} regs {regs} smem {smem} cluster {cluster} dur {dur} us: {name}",
                  flush=True)


if __name__ == "__main__":
    main()
