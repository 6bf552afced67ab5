"""The model-shape suite: DeepSeek-V4.1-Flash kernels at the model's own shapes, and two probes.

Shapes in `plan.shapes_plan`, columns in `plan.SHAPES_COLUMNS`, documented in
calibration/h200/README.md ("Model-shape suite"). Every kernel row is measured twice:

- ``mode=graph``: many calls chained back to back in one captured CUDA graph; seconds per
  call = replay time / calls (the default suite's `bench.Timer`). No host gap between calls.
- ``mode=eager``: as Triton's ``do_bench`` measures a kernel: before each call a 256 MB buffer is
  zeroed (the L2 flush), then a start event, the call, an end event, with no synchronisation
  between calls (`dobench_samples`). The host issues the call while the GPU runs the flush, so
  the figure is the kernel's GPU time plus the gap between two kernels of a stream.
- ``mode=cold``: the kernel launched alone from the host: synchronize, record a start
  event, one call, record an end event, wait. This includes the host's launch gap (PyTorch
  dispatch + cudaLaunchKernel), which the GPU sees as idle time between the start event and
  the kernel.
- ``mode=stream``: STREAM_CALLS calls issued back to back from the host and timed together
  (as `torch.utils.benchmark` does): seconds per call ~ max(host dispatch, GPU time).

The eager, cold and stream rows of up to EAGER_CHUNK consecutive shapes are measured together,
interleaved in random order over EAGER_ROUNDS rounds (`eager_interleaved`), so slow drift of
the host's speed spreads over all of them; each also reads `host_s`, the host time to issue
one call while the GPU is busy.

Probes (CuPy RawKernels launched on PyTorch's current stream):

- ``pointer_chase``: one thread follows a random cyclic permutation of 128-byte lines
  (``ld.global.cg``, so L1 is bypassed and every load is a new line) over a buffer of
  `nbytes`; `measured_s` is seconds per dependent load (one launch of `steps` loads, event
  timed, median of 3; mode ``eager``: the launch gap is under 1e-3 of the time). Each launch
  continues the chain where the last stopped (after a 2000-step warm-up), so a buffer larger
  than the L2 is never revisited within the 2000 + 3 x `steps` loads.
- ``stream_ctas``: a read-only streaming kernel with `ctas` CTAs of 256 threads, each thread
  issuing U independent 16-byte loads per iteration (``ld.global.nc.v4``), grid-stride over
  `nbytes` of HBM, XOR-reduced so the loads stay; `inflight_bytes` = 256 x U x 16 per CTA.

Run: ``python3 -m rubinperf.calibrate.measure --suite shapes --out shapes.csv [--quick]``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path

from rubinperf.calibrate.measure.bench import KernelBench, Timer, _quantile, _warm_clocks, capture_graph, environment, measure_or_skip, require_torch_cuda, shape_text
from rubinperf.calibrate.plan import SHAPES_COLUMNS, STREAM_THREADS, row_cost, rows_to_csv, shapes_plan

EAGER_SAMPLES = 64   # lone launches per eager row, spread over EAGER_ROUNDS interleaved rounds
EAGER_ROUNDS = 8
EAGER_MAX_S = 0.15   # a long kernel takes fewer lone launches (at least one per round)
EAGER_CHUNK = 24     # shapes whose eager rows are interleaved together (their inputs stay allocated)
EAGER_CHUNK_BYTES = 24 * 2 ** 30  # ... or fewer, once this much GPU memory is allocated
HOST_CALLS = 8       # calls per host-dispatch reading
HOST_SLEEP_CYCLES = 2_000_000  # the busy GPU behind a host-dispatch reading (about 1 ms at 1.98 GHz)
HOST_MAX_KERNEL_S = 2e-4  # host dispatch is read only for kernels shorter than this (the sleep must outlast them)
CHECK_TOLERANCE = 0.05
FLUSH_BYTES = 256 * 2 ** 20  # Triton's do_bench zeroes this much before every timed call (its L2 flush)
STREAM_CALLS = 16   # calls per back-to-back (stream) sample  # attention output vs float32 reference: ||out - ref|| / ||ref||

CHASE_SRC = r'''
extern "C" __global__ void chase(const unsigned long long* __restrict__ next, long long steps,
                                 unsigned long long* out) {
    unsigned long long p = out[0];  // continue where the last launch stopped: no line is revisited early
    for (long long i = 0; i < steps; ++i) {
        unsigned long long v;
        asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(next + p));
        p = v;
    }
    out[0] = p;
}
'''

STREAM_SRC = r'''
extern "C" __global__ void stream_u{U}(const unsigned int* __restrict__ src, long long n16, unsigned int* out) {
    unsigned int acc = 0;
    const long long chunk = (long long)blockDim.x * {U};
    for (long long base = (long long)blockIdx.x * chunk; base < n16; base += (long long)gridDim.x * chunk) {
        unsigned int a[{U}], b[{U}], c[{U}], d[{U}];
        #pragma unroll
        for (int u = 0; u < {U}; ++u) {
            const unsigned int* q = src + 4 * (base + (long long)u * blockDim.x + threadIdx.x);
            asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                : "=r"(a[u]), "=r"(b[u]), "=r"(c[u]), "=r"(d[u]) : "l"(q));
        }
        #pragma unroll
        for (int u = 0; u < {U}; ++u) acc ^= a[u] ^ b[u] ^ c[u] ^ d[u];
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // keeps the loads
}
'''


_TRITON_MQA = None


def triton_mqa_kernels():
    """Split-KV flash-decode for MQA over one latent KV head (K = all 576 dims, V = the first 512).

    Kernel 1, grid (row blocks, KV splits, batch): each program keeps a block of query rows
    (heads x q_len of one sequence), streams its KV range in tiles of 32 entries, does QK^T
    (latent part + RoPE part), an online softmax and PV in FP32, and writes its partial
    output, max and sum. Kernel 2, grid (rows, batch), merges the splits. Two launches.
    """
    global _TRITON_MQA
    if _TRITON_MQA is not None:
        return _TRITON_MQA
    import triton
    import triton.language as tl

    @triton.jit
    def mqa_split(Q, KV, Acc, ML, R, L, split_len, stride_qb, stride_qr, stride_kb, stride_kl,
                  DV: tl.constexpr, DR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
        pid_r = tl.program_id(0)
        pid_s = tl.program_id(1)
        b = tl.program_id(2)
        nsplit = tl.num_programs(1)
        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        rmask = rows < R
        dv = tl.arange(0, DV)
        dr = tl.arange(0, DR)
        q_base = Q + b * stride_qb + rows[:, None] * stride_qr
        q_n = tl.load(q_base + dv[None, :], mask=rmask[:, None], other=0.0)
        q_r = tl.load(q_base + DV + dr[None, :], mask=rmask[:, None], other=0.0)
        m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, DV], tl.float32)
        start = pid_s * split_len
        end = tl.minimum(start + split_len, L)
        for n0 in range(start, end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            cmask = cols < end
            k_base = KV + b * stride_kb + cols[:, None] * stride_kl
            k_n = tl.load(k_base + dv[None, :], mask=cmask[:, None], other=0.0)
            k_r = tl.load(k_base + DV + dr[None, :], mask=cmask[:, None], other=0.0)
            s = tl.dot(q_n, tl.trans(k_n)) + tl.dot(q_r, tl.trans(k_r))
            s = tl.where(cmask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(k_n.dtype), k_n)
            m_i = m_new
        off = (b * nsplit + pid_s) * R + rows
        tl.store(Acc + off[:, None] * DV + dv[None, :], acc, mask=rmask[:, None])
        tl.store(ML + off * 2, m_i, mask=rmask)
        tl.store(ML + off * 2 + 1, l_i, mask=rmask)

    @triton.jit
    def mqa_combine(Acc, ML, O, R, nsplit, stride_ob, stride_or, DV: tl.constexpr, SPLITS_P2: tl.constexpr):
        r = tl.program_id(0)
        b = tl.program_id(1)
        sp = tl.arange(0, SPLITS_P2)
        smask = sp < nsplit
        off = (b * nsplit + sp) * R + r
        m = tl.load(ML + off * 2, mask=smask, other=float("-inf"))
        lsum = tl.load(ML + off * 2 + 1, mask=smask, other=0.0)
        w = tl.exp(m - tl.max(m, 0))
        w = tl.where(smask, w, 0.0)
        denom = tl.sum(w * lsum, 0)
        dv = tl.arange(0, DV)
        a = tl.load(Acc + off[:, None] * DV + dv[None, :], mask=smask[:, None], other=0.0)
        o = tl.sum(a * w[:, None], 0) / denom
        tl.store(O + b * stride_ob + r * stride_or + dv, o.to(O.dtype.element_ty))

    _TRITON_MQA = (triton, mqa_split, mqa_combine)
    return _TRITON_MQA


def triton_mqa(torch, b, r, l, dq, dv, device, sms: int = 132):
    """A callable (q [b, r, dq], kv [b, l, dq]) -> o [b, r, dv] and a description (splits, blocks)."""
    triton, split_k, combine_k = triton_mqa_kernels()
    block_r, block_n = (16 if r <= 16 else 32), 32
    rb = triton.cdiv(r, block_r)
    want = max(1, triton.cdiv(2 * sms, rb * b))
    split_len = max(512, triton.cdiv(triton.cdiv(l, want), block_n) * block_n)
    split_len = min(split_len, triton.cdiv(l, block_n) * block_n)
    splits = triton.cdiv(l, split_len)
    acc = torch.empty(b * splits * r * dv, device=device, dtype=torch.float32)
    ml = torch.empty(b * splits * r * 2, device=device, dtype=torch.float32)
    p2 = triton.next_power_of_2(splits)

    def call(q, kv):
        o = torch.empty(b, r, dv, device=device, dtype=q.dtype)
        split_k[(rb, splits, b)](q, kv, acc, ml, r, l, split_len, q.stride(0), q.stride(1), kv.stride(0),
                                 kv.stride(1), DV=dv, DR=dq - dv, BLOCK_R=block_r, BLOCK_N=block_n,
                                 num_warps=8, num_stages=2)
        combine_k[(r, b)](acc, ml, o, r, splits, o.stride(0), o.stride(1), DV=dv, SPLITS_P2=p2, num_warps=4)
        return o
    return call, f"{splits} KV splits of {split_len}, {rb} row blocks of {block_r}"


class EagerEntry:
    """One callable whose launches from the host (eager, cold, stream) are still to be measured, and the row it will fill."""

    def __init__(self, row: dict, calls, est_s: float):
        self.row, self.calls, self.est_s = row, calls, max(est_s, 1e-7)
        self.times: list[float] = []     # cold: lone launches after a synchronisation
        self.dobench: list[float] = []   # eager: do_bench's flush, event, call, event
        self.stream: list[float] = []    # back to back from the host, per call
        self.host: list[float] = []
        self.spent_s = 0.0
        self.next = 0

    def call(self):
        self.calls[self.next % len(self.calls)]()
        self.next += 1


def eager_lone_sample(torch, entry: EagerEntry, start, end) -> float:
    """One lone launch: the GPU idle (synchronized), a start event, one call from the host, an end event.

    The interval is the host's dispatch of the call (Python, the PyTorch op, cudaLaunchKernel) while the
    GPU waits, then the kernel's own time, i.e. one launch from the host plus the kernel."""
    torch.cuda.synchronize()
    start.record()
    entry.call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def dobench_samples(torch, entry: EagerEntry, flush, n: int) -> list[float]:
    """Triton do_bench's method: for each sample zero the flush buffer (L2 flush), record a start event, one call,
    an end event; synchronise once after all samples. The host issues each call while the GPU zeroes the buffer,
    so each interval is the kernel's GPU time plus the gap between two kernels of a stream."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in events:
        flush.zero_()
        s.record()
        entry.call()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in events]


def stream_sample(torch, entry: EagerEntry, start, end, calls: int = STREAM_CALLS) -> float:
    """Seconds per call of `calls` calls issued back to back from the host, timed together (torch.utils.benchmark's
    way): each call costs about the larger of its host dispatch and its GPU time."""
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        entry.call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def host_dispatch_sample(torch, entry: EagerEntry, calls: int = HOST_CALLS) -> float:
    """Host seconds to issue one call while the GPU is busy (a sleep kernel queued first), so the host never
    waits on the GPU: the dispatch part of an eager launch alone."""
    torch.cuda.synchronize()
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(HOST_SLEEP_CYCLES)
    t0 = time.perf_counter()
    for _ in range(calls):
        entry.call()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls


def eager_interleaved(torch, entries: list, rounds: int = EAGER_ROUNDS, samples: int = EAGER_SAMPLES,
                      max_s: float = EAGER_MAX_S, seed: int = 0) -> list[dict]:
    """Lone-launch times of several callables, interleaved so slow host drift spreads over all of them.

    Each entry is warmed up (two calls), then `rounds` rounds visit every entry once in a fresh random
    order; a visit takes `samples / rounds` lone launches (fewer for a long kernel, so that its samples
    stay under `max_s` in all, at least one per round) and one host-dispatch reading. The row's time
    is the median of all its lone launches; spread (p75 - p25) / median. Python's garbage collector is
    off while timing (its pauses are host noise, not launch cost). Returns each entry's finished rows (eager,
    cold and stream), in the entries' order."""
    import gc
    import random

    if not entries:
        return []
    rng = random.Random(seed)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    for e in entries:
        e.call()
        e.call()
    torch.cuda.synchronize()
    per_visit = {id(e): max(1, min(math.ceil(samples / rounds), int(max_s / (rounds * (e.est_s + 3e-5)))))
                 for e in entries}
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            order = list(entries)
            rng.shuffle(order)
            for e in order:
                t0 = time.perf_counter()
                for _ in range(per_visit[id(e)]):
                    e.times.append(eager_lone_sample(torch, e, start, end))
                e.dobench += dobench_samples(torch, e, flush, per_visit[id(e)])
                if e.est_s * STREAM_CALLS < max_s / rounds:
                    e.stream.append(stream_sample(torch, e, start, end))
                if e.est_s < HOST_MAX_KERNEL_S:
                    e.host.append(host_dispatch_sample(torch, e))
                e.spent_s += time.perf_counter() - t0
    finally:
        if was:
            gc.enable()
    out = []
    for e in entries:
        host = _quantile(sorted(e.host), 0.5) if e.host else None
        out.append([])
        for mode, samples, calls in (("eager", e.dobench, 1), ("cold", e.times, 1), ("stream", e.stream, STREAM_CALLS)):
            if not samples:
                continue
            times = sorted(samples)
            med = _quantile(times, 0.5)
            spread = (_quantile(times, 0.75) - _quantile(times, 0.25)) / med if med > 0 else 0.0
            out[-1].append(_with_cost(dict(e.row, mode=mode, measured_s=med, spread=spread, samples=len(times),
                                           calls=calls, host_s=host)))
    return out


def graph_kernel_count(torch, call):
    """Nodes (kernels, memsets, memcpys) of one call captured in a CUDA graph, or None if unknown."""
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        try:
            from cuda import cudart as rt  # older cuda-python
        except ImportError:
            return None
    try:
        g = capture_graph(torch, [call], [call], torch.cuda.CUDAGraph(keep_graph=True))
        raw = g.raw_cuda_graph()
        res = rt.cudaGraphGetNodes(raw, 0)
        if int(res[0]) != 0:
            return None
        count = int(res[-1])
        g.reset()
        return count
    except Exception as exc:
        print(f"    kernel count failed ({type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})",
              file=sys.stderr)
        torch.cuda.synchronize()
        return None


class ShapeBench(KernelBench):
    """Inputs and callables of the model-shape suite (probes, MQA attention, RMSNorm, ...)."""

    def __init__(self, torch, l2_bytes: int, seed: int = 0):
        super().__init__(torch, l2_bytes, seed)
        self._cp = None
        self._kernels = {}

    # -- CuPy kernels on torch's stream
    def cupy(self):
        if self._cp is None:
            import cupy
            self._cp = cupy
        return self._cp

    def kernel(self, name: str, src: str):
        if name not in self._kernels:
            cp = self.cupy()
            k = cp.RawKernel(src, name, options=("-arch=sm_90",) if self._sm90() else ())
            k.compile()
            self._kernels[name] = k
        return self._kernels[name]

    def _sm90(self):
        p = self.torch.cuda.get_device_properties(0)
        return (p.major, p.minor) == (9, 0)

    def launch_cupy(self, kern, grid, block, args):
        cp = self.cupy()
        with cp.cuda.ExternalStream(self.torch.cuda.current_stream().cuda_stream):
            kern(grid, block, args)

    # -- probes
    def pointer_chase(self, row):
        """Seconds per dependent load over a random cyclic permutation of `stride_bytes` lines."""
        t, cp = self.torch, self.cupy()
        import numpy as np

        stride, nbytes, steps = row["stride_bytes"], row["nbytes"], row["steps"]
        lines, per = nbytes // stride, stride // 8
        perm = t.randperm(lines, device=self.dev, generator=None) * per
        nxt = t.empty(lines * per, device=self.dev, dtype=t.int64)
        nxt[perm] = t.roll(perm, -1)
        del perm
        out = t.zeros(1, device=self.dev, dtype=t.int64)  # the chain's start: element 0 (line 0) is on the cycle
        kern = self.kernel("chase", CHASE_SRC)
        a, o = cp.asarray(nxt), cp.asarray(out)

        def run(n):
            self.launch_cupy(kern, (1,), (1,), (a, np.int64(n), o))
        run(min(steps, 2000))
        t.cuda.synchronize()
        times = []
        for _ in range(3):
            s, e = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            s.record()
            run(steps)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3 / steps)
        times.sort()
        med = times[1]
        return dict(row, mode="eager", impl="cupy chase<<<1,1>>> ld.global.cg.u64, random cyclic permutation",
                    measured_s=med, spread=(times[2] - times[0]) / med, samples=3, calls=1,
                    regs=int(kern.num_regs), launches_source="nominal")

    def stream_ctas(self, row):
        t, cp = self.torch, self.cupy()
        import numpy as np

        u = row["inflight_bytes"] // (STREAM_THREADS * 16)
        kern = self.kernel(f"stream_u{u}", STREAM_SRC.replace("{U}", str(u)))
        nbytes = row["nbytes"]
        src = t.randint(-2 ** 31, 2 ** 31 - 1, (nbytes // 4,), device=self.dev, dtype=t.int32)
        out = t.empty(row["ctas"] * STREAM_THREADS, device=self.dev, dtype=t.int32)
        a, o = cp.asarray(src), cp.asarray(out)
        n16, g = np.int64(nbytes // 16), int(row["ctas"])
        call = lambda: self.launch_cupy(kern, (g,), (STREAM_THREADS,), (a, n16, o))  # noqa: E731
        impl = f"cupy stream_u{u}<<<{g},{STREAM_THREADS}>>> {u} x ld.global.nc.v4.u32 per thread per iteration"
        return [call], impl, {"regs": int(kern.num_regs), "launches_source": "nominal"}

    # -- kernels
    def elementwise(self, row):
        """RMSNorm over the FP32 mHC residual [tokens, 4 x 5120]: y = x / rms(x) * w."""
        t = self.torch
        import torch.nn.functional as F

        m, n = row["m"], row["n"]
        count = self.sets(2 * m * n * 4)
        w = t.randn(n, device=self.dev, dtype=t.float32)
        sets = [t.randn(m, n, device=self.dev, dtype=t.float32) for _ in range(count)]
        if hasattr(F, "rms_norm"):
            return [(lambda x=x: F.rms_norm(x, (n,), w, 1e-6)) for x in sets], "torch.nn.functional.rms_norm fp32", {}
        return ([(lambda x=x: x * t.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w) for x in sets],
                "x * rsqrt(mean(x^2) + eps) * w (torch ops)", {})

    def attention_mqa(self, row):
        """MQA decode: one KV head (a 576-wide latent; V = its first 512 dims) for all heads x q_len queries.

        The queries of all heads and draft positions are the rows of one query matrix against the
        single KV head. Options: SDPA backends that accept it, and bmm -> softmax -> bmm.
        Returns [(name, calls, check)] where check() gives ||out - ref|| / ||ref|| for batch 0.
        """
        t = self.torch
        import torch.nn.functional as F

        b, h, lq, lkv, dq, dv = row["batch"], row["heads"], row["q_len"], row["kv_len"], row["head_dim"], row["v_head_dim"]
        rq = h * lq
        count = self.sets(b * rq * dq * 2 + b * lkv * dq * 2 + b * rq * dv * 2)
        scale = 1.0 / math.sqrt(dq)
        sets = [(self.randn(b, rq, dq) * scale, self.randn(b, lkv, dq)) for _ in range(count)]
        options = []

        def check_of(fn):
            def check():
                q, kv = sets[0]
                out = fn(q, kv).reshape(b, rq, dv)[0].float()
                q0, k0 = q[0].float(), kv[0].float()
                ref = t.softmax(q0 @ k0.t(), dim=-1) @ k0[:, :dv]
                return float((out - ref).norm() / ref.norm())
            return check

        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
            backends = [(nm, be) for nm, be in backends if be is not None]
        except ImportError:
            backends = []
        for nm, be in backends:
            def sdpa(q, kv, be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q.unsqueeze(1), kv.unsqueeze(1), kv[..., :dv].unsqueeze(1),
                                                          scale=1.0)
            try:
                sdpa(*sets[0])
                t.cuda.synchronize()
            except Exception:
                t.cuda.synchronize()
                continue
            options.append((f"sdpa-{nm} (heads x q_len as query rows of one KV head; V = K[..., :512] view)",
                            [(lambda q=q, kv=kv, f=sdpa: f(q, kv)) for q, kv in sets], check_of(sdpa)))

        try:
            tri, desc = triton_mqa(t, b, rq, lkv, dq, dv, self.dev, t.cuda.get_device_properties(0).multi_processor_count)
            tri(*sets[0])
            t.cuda.synchronize()
            options.append((f"triton split-KV flash-decode ({desc}; fp32 online softmax; 2 kernels)",
                            [(lambda q=q, kv=kv: tri(q, kv)) for q, kv in sets], check_of(tri)))
        except Exception as exc:
            print(f"    triton MQA failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})",
                  file=sys.stderr)
            t.cuda.synchronize()

        def bmm(q, kv):
            s = t.bmm(q, kv.transpose(1, 2))
            return t.bmm(t.softmax(s, dim=-1), kv[..., :dv])
        options.append(("bmm -> softmax -> bmm (bf16; V = K[..., :512] view)",
                        [(lambda q=q, kv=kv: bmm(q, kv)) for q, kv in sets], check_of(bmm)))
        return options

    # -- one row in every mode
    def run_shape_row(self, row: dict, timer: Timer, log) -> tuple[list[dict], list]:
        """The graph rows of one plan row, measured now, and its eager entries, measured later interleaved
        with other shapes' (`eager_interleaved`). Probes (pointer_chase) are finished rows at once."""
        fam = row["family"]
        if fam == "pointer_chase":
            return [_with_cost(self.pointer_chase(row))], []
        if fam == "attention_decode":  # every implementation that ran is a row (impl tells them apart)
            rows, entries = [], []
            for name, calls, check in self.attention_mqa(row):
                err = check()
                if not math.isfinite(err) or err > CHECK_TOLERANCE:
                    print(f"    CHECK FAILED: rel err {err:.3g} for {name}: not recorded", file=log, flush=True)
                    continue
                res = timer.measure(calls)
                g, e = self._rows(row, {"check_rel_err": err}, name, calls, res, log)
                rows += g
                entries += e
            if not entries:
                raise RuntimeError("no attention implementation ran correctly")
            return rows, entries
        calls, impl, updates = getattr(self, fam)(row)
        res = timer.measure(calls)
        return self._rows(row, dict(updates), impl, calls, res, log)

    def _rows(self, row, extra, impl, calls, res, log) -> tuple[list[dict], list]:
        """The graph row (from the Timer's result) and the eager entry of one callable."""
        t = self.torch
        if "launches_source" not in extra:
            n = graph_kernel_count(t, calls[0])
            if n:
                extra["launches"], extra["launches_source"] = n, "graph nodes"
            else:
                extra["launches_source"] = "nominal"
        out = []
        med, spread, samples, per, mode = res
        if mode == "graph":
            out.append(_with_cost(dict(row, **extra, mode="graph", impl=impl, measured_s=med, spread=spread,
                                       samples=samples, calls=per)))
        else:
            print("    graph capture failed: graph row left out", file=log, flush=True)
        return out, [EagerEntry(dict(row, **extra, impl=impl), calls, med)]


def _with_cost(r: dict) -> dict:
    c = row_cost(r)
    r["flops"], r["bytes"] = float(c.flops), float(c.bytes)
    return r


def clocks() -> str:
    """`nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader` (or why not)."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:
        return f"unavailable ({type(exc).__name__})"


def run(quick: bool = False, log=sys.stderr, budget_s: float = 300.0, command: str = "",
        partial_csv: Path | None = None) -> tuple[list[dict], dict]:
    """Measure the model-shape suite on GPU 0: (rows, environment). A failed row is logged and skipped."""
    torch = require_torch_cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment(torch, command)
    env["suite"] = "shapes"
    env["clocks_before"] = clocks()
    bench = ShapeBench(torch, env["l2_cache_bytes"])
    timer = Timer(torch, samples=7 if quick else 15, target_s=1e-3 if quick else 2e-3)
    plan = shapes_plan(quick=quick)
    print(f"calibrate --suite shapes: {env['gpu']}, {env['sm_count']} SMs, L2 {env['l2_cache_bytes'] / 2**20:.0f} MiB, "
          f"torch {env['torch']} (CUDA {env['cuda']}); {len(plan)} shapes; clocks (sm, mem) {env['clocks_before']}",
          file=log, flush=True)
    _warm_clocks(torch)
    env["clocks_after_warmup"] = clocks()
    out, t0, skipped, pending = [], time.perf_counter(), 0, []
    env["eager_method"] = (f"interleaved: {EAGER_ROUNDS} rounds over up to {EAGER_CHUNK} shapes in a random order; "
                           f"per row {EAGER_SAMPLES} do_bench samples (eager: {FLUSH_BYTES >> 20} MB flush, event, call, "
                           f"event), as many lone launches after a synchronisation (cold), and back-to-back samples of "
                           f"{STREAM_CALLS} calls (stream; fewer past {EAGER_MAX_S} s); medians; gc off")

    def flush():
        """Measure the pending shapes' eager rows interleaved, then write every pending row out."""
        entries = [e for _, _, _, es in pending for e in es]
        try:
            eager = eager_interleaved(torch, entries, seed=len(out))
        except Exception as exc:
            print(f"    eager rows of {len(pending)} shapes SKIPPED ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:160] if str(exc) else ''})", file=log, flush=True)
            torch.cuda.synchronize()
            eager = []
        by_entry = dict(zip(map(id, entries), eager))
        for i, label, graph_rows, es in pending:
            res = graph_rows + [r for e in es for r in by_entry.get(id(e), ())]
            out.extend(res)
            _log_shape(res, label, log)
        pending.clear()
        entries.clear()
        torch.cuda.empty_cache()
        if partial_csv is not None:
            from rubinperf.files import write_atomic

            write_atomic(partial_csv, rows_to_csv(out, SHAPES_COLUMNS))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, row in enumerate(plan, 1):
            if time.perf_counter() - t0 > budget_s:
                print(f"calibrate: time budget of {budget_s:.0f} s spent; {len(plan) - i + 1} shapes not measured",
                      file=log, flush=True)
                env["not_measured"] = len(plan) - i + 1
                break
            label = f"[{i}/{len(plan)}] {row['family']} {row['dtype']} {shape_text(row)}"
            res = measure_or_skip(torch, lambda: bench.run_shape_row(row, timer, log), label, log, empty=False)
            if res is None:
                skipped += 1
                continue
            pending.append((i, label, *res))
            if len(pending) >= EAGER_CHUNK or torch.cuda.memory_allocated() > EAGER_CHUNK_BYTES:
                flush()
        flush()
    env["clocks_after"] = clocks()
    env["measurements"] = len(out)
    env["planned_shapes"] = len(plan)
    env["skipped_shapes"] = skipped
    env["seconds"] = round(time.perf_counter() - t0, 1)
    return out, env


def _log_shape(res: list[dict], label: str, log) -> None:
    for impl in dict.fromkeys(r["impl"] for r in res):
        parts, first = [], None
        for r in res:
            if r["impl"] != impl:
                continue
            first = first or r
            rate = f"{r['flops'] / r['measured_s'] / 1e12:.0f} TF/s " if r["flops"] else ""
            bw = f"{r['bytes'] / r['measured_s'] / 1e12:.2f} TB/s" if r["bytes"] else ""
            host = f" host {r['host_s'] * 1e6:.1f} us" if r.get("host_s") else ""
            parts.append(f"{r['mode']} {r['measured_s'] * 1e6:.2f} us {rate}{bw}{host}".strip())
        print(f"{label}: {'; '.join(parts)} ({impl}; launches {first.get('launches')} {first.get('launches_source')}"
              + (f"; err {first['check_rel_err']:.2g}" if first.get("check_rel_err") is not None else "")
              + ")", file=log, flush=True)


def write_outputs(rows: list[dict], csv_path: Path, env: dict) -> None:
    from rubinperf.files import write_atomic

    csv_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(csv_path, rows_to_csv(rows, SHAPES_COLUMNS))
    write_atomic(csv_path.with_name(csv_path.stem + ".env.json"), json.dumps(env, indent=2) + "\n")


# ---------------------------------------------------------------- summary (no torch)


def _pick(table, **want):
    for r in table:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def summary(rows: list[dict]) -> list[tuple[str, str]]:
    """Headline numbers of a shapes CSV: (what, value) pairs; shapes not measured are left out."""
    out: list[tuple[str, str]] = []

    def us(r):
        return f"{r['measured_s'] * 1e6:.2f} us"

    for r in sorted((r for r in rows if r["family"] == "pointer_chase"), key=lambda r: r["nbytes"]):
        out.append((f"pointer_chase {r['nbytes'] / 2**20:.0f} MiB", f"{r['measured_s'] * 1e9:.0f} ns/load"))
    for mode in ("graph", "eager"):
        r = _pick(rows, family="launch", mode=mode)
        if r:
            out.append((f"launch {mode}", us(r)))
    for u in sorted({r["inflight_bytes"] for r in rows if r["family"] == "stream_ctas"}):
        cells = []
        for g in (1, 8, 33, 132, 1056):
            r = _pick(rows, family="stream_ctas", inflight_bytes=u, ctas=g, mode="graph") or \
                _pick(rows, family="stream_ctas", inflight_bytes=u, ctas=g)
            if r:
                cells.append(f"{g}:{r['bytes'] / r['measured_s'] / 1e12:.3f}")
        if cells:
            out.append((f"stream TB/s by CTAs, {u // 1024} KiB/CTA", " ".join(cells)))
    for name, n, k in (("q_up", 32768, 1280), ("shared_gate_up", 4608, 5120), ("lm_head", 129280, 5120)):
        for dtype in ("fp8", "bf16"):
            cells = []
            for m in (1, 64, 1024):
                g = _pick(rows, family="gemm", dtype=dtype, n=n, k=k, m=m, mode="graph")
                e = _pick(rows, family="gemm", dtype=dtype, n=n, k=k, m=m, mode="eager")
                if g or e:
                    cells.append(f"M={m}: {g['measured_s'] * 1e6 if g else float('nan'):.1f}/"
                                 f"{e['measured_s'] * 1e6 if e else float('nan'):.1f}")
            if cells:
                out.append((f"gemm {dtype} {name} us graph/eager", "  ".join(cells)))
    for groups in (12, 96):
        for n, k in ((4608, 5120), (5120, 2304)):
            cells = []
            for rpe in (1, 16, 200):
                g = _pick(rows, family="grouped_gemm", dtype="fp8", groups=groups, n=n, k=k, rows=groups * rpe,
                          routing="balanced", mode="graph")
                if g:
                    cells.append(f"{rpe}/exp: {g['measured_s'] * 1e6:.1f}")
            if cells:
                out.append((f"grouped fp8 {groups}x{n}x{k} us (graph)", "  ".join(cells)))
    for r in rows:
        if r["family"] == "attention_decode" and r["mode"] == "graph" and r["kv_len"] in (8192, 131072) \
                and r["batch"] in (1, 8) and r["q_len"] == 6:
            out.append((f"attn h{r['heads']} q{r['q_len']} b{r['batch']} kv{r['kv_len']} {r['impl'].split(' ')[0]}",
                        f"{us(r)} {r['bytes'] / r['measured_s'] / 1e12:.2f} TB/s"))
    return out


def print_summary(rows: list[dict], file=None) -> None:
    file = file or sys.stdout
    items = summary(rows)
    width = max((len(a) for a, _ in items), default=10)
    print("summary (model-shape suite)", file=file)
    for a, b in items:
        print(f"  {a:<{width}}  {b}", file=file)
    modes = {}
    for r in rows:
        modes[(r["family"], r.get("mode") or "graph")] = modes.get((r["family"], r.get("mode") or "graph"), 0) + 1
    print("  rows: " + ", ".join(f"{f}/{m} {n}" for (f, m), n in sorted(modes.items())), file=file, flush=True)
