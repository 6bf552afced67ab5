"""Probe of 2026-12-02: where a V4.1 decode layer's time goes inside one CUDA graph, kernel by kernel.

Run on the lent H200 from the repository root: ``python3 calibration/h200/probe_layer.py OUT_DIR``.

1. torch.profiler over replays of the layer graph (rubinperf.calibrate.measure.layer's eight layer copies) at a few
   row counts: every kernel's GPU duration inside the graph and the gap to the kernel before it (kernels.csv).
2. The same for each operation alone, its copies chained in a graph, with and without a 128 MB L2-flushing memset
   between the copies (the memset's own duration is left out): is a small kernel slower in the layer because its
   inputs come from HBM rather than L2?
3. Programmatic dependent launch on this GPU: a chain of small Triton kernels in a graph, launched plainly and with
   launch_pdl (each waits on gdc_wait before reading what the previous wrote): the time PDL hides per kernel.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import torch

from rubinperf.calibrate.measure.bench import KernelBench, _warm_clocks, environment
from rubinperf.calibrate.layer import EXPERTS, layer_ops
from rubinperf.calibrate.measure.layer import LAYERS, LayerBench

ROWS = (1, 4, 16, 64)
FLUSH = 128 * 2 ** 20


def capture(fns):
    for f in fns:
        f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    return g


def profile(g, replays=5):
    """Kernel (name, start_us, duration_us) of `replays` replays, from CUPTI through torch.profiler."""
    from torch.profiler import ProfilerActivity, profile as prof

    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    out = []
    for e in p.events():
        if e.device_type.name == "CUDA" and e.name not in ("Memset (Device)",) and e.time_range.elapsed_us() > 0:
            out.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    return sorted(out, key=lambda x: x[1])


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(torch, "python3 calibration/h200/probe_layer.py")
    _warm_clocks(torch)
    base = KernelBench(torch, env["l2_cache_bytes"])
    up = base.randn(EXPERTS, 2 * 2304, 5120, dtype=base.fp8)
    down = base.randn(EXPERTS, 5120, 2304, dtype=base.fp8)
    flush = torch.empty(FLUSH // 4, dtype=torch.int32, device="cuda")
    rows = []
    for r in ROWS:
        bench = LayerBench(torch, env["l2_cache_bytes"], r, up, down)
        ops = layer_ops(r)
        copies = [[bench.op(o) for o in ops] for _ in range(LAYERS)]
        # which kernels each op launches: capture one copy of each op alone and profile it
        names = {}
        for i, o in enumerate(ops):
            g = capture([copies[0][i]])
            names[o["op"]] = [k[0] for k in profile(g, 1)]
            del g
        seq = [o["op"] for o in ops for _ in names[o["op"]]]   # the op of each kernel of one layer, in order
        g = capture([f for c in copies for f in c])
        ks = profile(g)
        per_layer = len(seq)
        for j, (name, start, dur) in enumerate(ks):
            prev_end = ks[j - 1][1] + ks[j - 1][2] if j else None
            rows.append({"rows": r, "what": "layer", "op": seq[j % per_layer] if len(ks) % per_layer == 0 else "",
                         "kernel": name[:120], "duration_us": dur,
                         "gap_us": (start - prev_end) if prev_end is not None else "", "index": j})
        del g
        for i, o in enumerate(ops):
            for cold in (False, True):
                fns = []
                for c in copies:
                    if cold:
                        fns.append(lambda: flush.zero_())
                    fns.append(c[i])
                g = capture(fns)
                for j, (name, start, dur) in enumerate(profile(g, 3)):
                    if "FillFunctor" in name and cold:   # the flush itself
                        continue
                    rows.append({"rows": r, "what": "alone_cold" if cold else "alone", "op": o["op"],
                                 "kernel": name[:120], "duration_us": dur, "gap_us": "", "index": j})
                del g
        print(f"rows {r}: {len(ks)} kernels profiled in the layer graph", flush=True)
        del copies
        torch.cuda.empty_cache()
    with open(out / "layer_kernels.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["rows", "what", "op", "kernel", "duration_us", "gap_us", "index"])
        w.writeheader()
        w.writerows(rows)
    env["pdl"] = pdl_probe()
    (out / "probe_layer.env.json").write_text(json.dumps(env, indent=2) + "\n")
    print(json.dumps(env["pdl"], indent=2))
    return 0


def pdl_probe():
    """A chain of N small Triton kernels (each reads the previous one's output, one CTA per SM) in a graph,
    launched plainly and with launch_pdl; seconds per kernel both ways."""
    try:
        import triton
        import triton.language as tl
        from triton.testing import do_bench  # noqa: F401
    except ImportError as exc:
        return {"error": f"no triton ({exc})"}

    @triton.jit
    def step(x, y, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        if USE_GDC:
            tl.extra.cuda.gdc_wait()
        v = tl.load(x + offs, mask=offs < n)
        if USE_GDC:
            tl.extra.cuda.gdc_launch_dependents()
        tl.store(y + offs, v + 1.0, mask=offs < n)

    res = {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for block in (256, 4096):
        n = sms * block
        a = torch.zeros(n, device="cuda")
        b = torch.zeros(n, device="cuda")
        chain = 64
        for pdl in (False, True):
            try:
                def run():
                    for i in range(chain):
                        src, dst = (a, b) if i % 2 == 0 else (b, a)
                        if pdl:
                            step[(sms,)](src, dst, n, BLOCK=block, USE_GDC=True, launch_pdl=True)
                        else:
                            step[(sms,)](src, dst, n, BLOCK=block, USE_GDC=False)
                g = capture([run])
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                times = []
                for _ in range(20):
                    start.record()
                    g.replay()
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end) / 1e3 / chain)
                times.sort()
                res[f"block{block}_{'pdl' if pdl else 'plain'}_s_per_kernel"] = times[len(times) // 2]
                del g
            except Exception as exc:
                res[f"block{block}_{'pdl' if pdl else 'plain'}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                torch.cuda.synchronize()
        # correctness: the chain adds 1 per kernel
        res[f"block{block}_check"] = float(a[0].item())
    return res


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
