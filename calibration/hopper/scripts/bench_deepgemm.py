#!/usr/bin/env python3
"""Time DeepGEMM's SM90 kernels at DeepSeek-V4.1-Flash shapes on one Hopper GPU.

Modes:
  --mode warm --shard i --nshards N : build (JIT-compile) and check the cases of one shard
                                      (run several shards in parallel to compile on many cores)
  --mode time                        : time every case (JIT cache already warm), write a CSV
  --mode list                        : print the cases

Each case is timed three ways:
  flushed : CUDA events around one call, a 256 MB memset (L2 flush, as DeepGEMM's bench
            and triton's do_bench do) before each call; median over `reps` calls
  graph   : one CUDA graph holding 20 back-to-back calls (no flush in between), replayed;
            the median replay time / 20
  kineto  : torch.profiler kernel durations of 30 flushed calls (the kernels of the call only,
            the flush memset excluded): DeepGEMM's own bench_kineto method

Shapes (models/deepseek-v4.1-flash.toml of rubinperf): hidden 5120, q_lora 1280, 64 heads x 512,
o_groups 8 x o_lora 1024, indexer 32 heads x 128, 384 experts top-6, moe_intermediate 2304,
mHC 4 routes (pre-norm GEMM n = 24, k = 4 x 5120).
"""
import argparse
import csv
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import zlib

import torch

import deep_gemm
from deep_gemm.utils import per_token_cast_to_fp8, per_block_cast_to_fp8, per_custom_dims_cast_to_fp8, ceil_div

HIDDEN = 5120
Q_LORA = 1280
HEADS, HEAD_DIM = 64, 512
O_GROUPS, O_LORA = 8, 1024
IDX_HEADS, IDX_DIM = 32, 128
MOE_INTER = 2304
HC_MULT, HC_ROWS = 4, 24

# (name, n, k) of the FP8 (128x128 block-scaled weights) linears around attention and the shared expert
GEMM_SHAPES = [
    ('wq_a', Q_LORA, HIDDEN),                  # hidden -> q_lora
    ('wkv', HEAD_DIM, HIDDEN),                 # hidden -> shared 512-dim latent (K = V)
    ('wq_b', HEADS * HEAD_DIM, Q_LORA),        # q_lora -> 64 x 512
    ('wo_b', HIDDEN, O_GROUPS * O_LORA),       # 8 x 1024 -> hidden
    ('idx_wq_b', IDX_HEADS * IDX_DIM, Q_LORA), # indexer q: q_lora -> 32 x 128
    ('idx_wk', IDX_DIM, HIDDEN),               # indexer k: hidden -> 128
    ('shared_w13', 2 * MOE_INTER, HIDDEN),     # shared expert gate+up
    ('shared_w2', HIDDEN, MOE_INTER),          # shared expert down
]
GEMM_M_DECODE = [1, 8, 32, 64, 128, 256]
GEMM_M_PREFILL = [4096, 8192, 16384]


def calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    if den == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / den)


def sf_ready(pair):
    # hand the kernel its activation scales already in the TMA-aligned MN-major layout it needs, as the
    # quantisation kernel before it would; otherwise every call launches a transpose kernel first
    try:
        return (pair[0], deep_gemm.get_mn_major_tma_aligned_tensor(pair[1]))
    except Exception as e:
        print(f'sf pre-transform failed ({type(e).__name__}: {e}); passing raw scales', flush=True)
        return pair


def seed(s):
    random.seed(s)
    torch.manual_seed(s)
    torch.cuda.manual_seed(s)


# ----------------------------------------------------------------------------------------------
# Case builders: each returns (fn, check, info) where fn() runs the kernel once, check() returns
# a relative error against a higher-precision reference (or None), info holds flops / bytes.
# ----------------------------------------------------------------------------------------------

def build_fp8_gemm(c):
    m, n, k = c['shape']['m'], c['shape']['n'], c['shape']['k']
    a = torch.randn((m, k), device='cuda', dtype=torch.bfloat16)
    b = torch.randn((n, k), device='cuda', dtype=torch.bfloat16)
    d = torch.empty((m, n), device='cuda', dtype=torch.bfloat16)
    a8 = sf_ready(per_token_cast_to_fp8(a, use_ue8m0=False))
    b8 = per_block_cast_to_fp8(b, use_ue8m0=False)

    def fn():
        deep_gemm.fp8_gemm_nt(a8, b8, d, disable_ue8m0_cast=True)

    def check():
        d.fill_(float('nan'))
        fn()
        torch.cuda.synchronize()
        assert not torch.isnan(d).any(), 'unwritten output'
        return calc_diff(d, a.float() @ b.float().t())

    byts = m * k + n * k + m * n * 2 + (m * ceil_div(k, 128) + ceil_div(n, 128) * ceil_div(k, 128)) * 4
    return fn, check, dict(flops=2 * m * n * k, bytes=byts)


def build_masked(c):
    s = c['shape']
    g, n, k, em, max_m = s['groups'], s['n'], s['k'], s['expected_m'], s['max_m']
    masked = [max(1, int(round(em * random.uniform(0.7, 1.3)))) for _ in range(g)]
    masked = [min(x, max_m) for x in masked]
    masked_m = torch.tensor(masked, device='cuda', dtype=torch.int)
    a = torch.randn((g, max_m, k), device='cuda', dtype=torch.bfloat16)
    b = torch.randn((g, n, k), device='cuda', dtype=torch.bfloat16)
    d = torch.empty((g, max_m, n), device='cuda', dtype=torch.bfloat16)
    a8 = (torch.empty_like(a, dtype=torch.float8_e4m3fn), torch.empty((g, max_m, ceil_div(k, 128)), device='cuda', dtype=torch.float))
    b8 = (torch.empty_like(b, dtype=torch.float8_e4m3fn), torch.empty((g, ceil_div(n, 128), ceil_div(k, 128)), device='cuda', dtype=torch.float))
    for i in range(g):
        a8[0][i], a8[1][i] = per_token_cast_to_fp8(a[i], use_ue8m0=False)
        b8[0][i], b8[1][i] = per_block_cast_to_fp8(b[i], use_ue8m0=False)
        a8[1][i, masked[i]:] = 0
    a8 = sf_ready(a8)
    expected_m = max(1, int(round(sum(masked) / g)))
    s['masked_m_sum'] = sum(masked)
    s['masked_m_max'] = max(masked)

    def fn():
        deep_gemm.m_grouped_fp8_gemm_nt_masked(a8, b8, d, masked_m, expected_m, disable_ue8m0_cast=True)

    def check():
        d.fill_(float('nan'))
        fn()
        torch.cuda.synchronize()
        worst = 0.0
        for i in range(g):
            out = d[i, :masked[i]]
            assert not torch.isnan(out).any(), 'unwritten output'
            worst = max(worst, calc_diff(out, a[i, :masked[i]].float() @ b[i].float().t()))
        return worst

    tok = sum(masked)
    byts = g * n * k + tok * k + tok * n * 2
    return fn, check, dict(flops=2 * tok * n * k, bytes=byts)


def build_contiguous(c):
    s = c['shape']
    g, n, k, em = s['groups'], s['n'], s['k'], s['expected_m']
    align_m = deep_gemm.get_mk_alignment_for_contiguous_layout()
    ms = [int(em * random.uniform(0.7, 1.3)) for _ in range(g)]
    ams = [ceil_div(x, align_m) * align_m for x in ms]
    m = sum(ams)
    a = torch.randn((m, k), device='cuda', dtype=torch.bfloat16)
    b = torch.randn((g, n, k), device='cuda', dtype=torch.bfloat16)
    layout = torch.empty(m, device='cuda', dtype=torch.int32)
    start = 0
    for i, (x, ax) in enumerate(zip(ms, ams)):
        layout[start:start + x] = i
        layout[start + x:start + ax] = -1
        a[start + x:start + ax] = 0
        start += ax
    d = torch.empty((m, n), device='cuda', dtype=torch.bfloat16)
    a8 = sf_ready(per_token_cast_to_fp8(a, use_ue8m0=False))
    b8 = (torch.empty_like(b, dtype=torch.float8_e4m3fn), torch.empty((g, ceil_div(n, 128), ceil_div(k, 128)), device='cuda', dtype=torch.float))
    for i in range(g):
        b8[0][i], b8[1][i] = per_block_cast_to_fp8(b[i], use_ue8m0=False)
    s['m_total'] = m

    def fn():
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a8, b8, d, layout, disable_ue8m0_cast=True)

    def check():
        fn()
        torch.cuda.synchronize()
        worst, start = 0.0, 0
        for i in range(min(g, 4)):
            worst = max(worst, calc_diff(d[start:start + ms[i]], a[start:start + ms[i]].float() @ b[i].float().t()))
            start += ams[i]
        return worst

    tok = sum(ms)
    return fn, check, dict(flops=2 * tok * n * k, bytes=g * n * k + m * k + m * n * 2)


def build_mqa(c):
    s = c['shape']
    sq, skv, h, dim = s['seq_q'], s['kv_len'], s['heads'], s['head_dim']
    q = torch.randn(sq, h, dim, device='cuda', dtype=torch.bfloat16)
    kv = torch.randn(skv, dim, device='cuda', dtype=torch.bfloat16)
    w = torch.randn(sq, h, device='cuda', dtype=torch.float32)
    # the new tokens are the last sq of the context: query i sees keys [0, skv - sq + i]
    ks = torch.zeros(sq, dtype=torch.int, device='cuda')
    ke = torch.arange(sq, dtype=torch.int, device='cuda') + (skv - sq) + 1
    q8 = (q.to(torch.float8_e4m3fn), None)
    kv8 = per_custom_dims_cast_to_fp8(kv, (0,), False)
    out = {}

    def fn():
        out['l'] = deep_gemm.fp8_fp4_mqa_logits(q8, kv8, w, ks, ke, clean_logits=False)

    def check():
        fn()
        torch.cuda.synchronize()
        logits = out['l']
        rows = torch.randint(0, sq, (8,)).tolist()
        qs = q8[0].float()
        kvs = kv8[0].float() * kv8[1].unsqueeze(1)
        worst = 0.0
        for r in rows:
            e = int(ke[r])
            ref = ((qs[r] @ kvs[:e].t()).relu() * w[r][:, None]).sum(0)
            worst = max(worst, calc_diff(logits[r, :e].float(), ref))
        return worst

    pairs = int((ke - ks).sum())
    s['pairs'] = pairs
    return fn, check, dict(flops=2 * pairs * h * dim, bytes=sq * h * dim + skv * (dim + 4) + sq * h * 4 + pairs * 4)


def build_paged(c):
    s = c['shape']
    bsz, nn, h, dim, ctx, block_kv = s['batch'], s['next_n'], s['heads'], s['head_dim'], s['kv_len'], 64
    ctx_lens = [ctx] * bsz
    nblk = [ceil_div(x, block_kv) for x in ctx_lens]
    total = sum(nblk)
    max_model_len = max(nblk) * block_kv
    q = torch.randn((bsz, nn, h, dim), device='cuda', dtype=torch.bfloat16)
    w = torch.randn((bsz * nn, h), device='cuda', dtype=torch.float)
    # FP8 cache: per block [block_kv x dim FP8 | block_kv x FP32 scale], generated in chunks
    cache = torch.empty((total, block_kv * (dim + 4)), device='cuda', dtype=torch.uint8)
    step = 32768
    for b0 in range(0, total, step):
        b1 = min(total, b0 + step)
        kvb = torch.randn((b1 - b0, block_kv, dim), device='cuda', dtype=torch.bfloat16)
        sf = kvb.abs().float().amax(dim=2, keepdim=True).clamp(1e-4) / 448.0
        cache[b0:b1, :block_kv * dim] = (kvb * (1.0 / sf)).to(torch.float8_e4m3fn).view(b1 - b0, block_kv * dim).view(torch.uint8)
        cache[b0:b1, block_kv * dim:] = sf.view(b1 - b0, block_kv).view(torch.uint8)
        del kvb, sf
    cache = cache.view(total, block_kv, 1, dim + 4)
    table = torch.zeros((bsz, max(nblk)), device='cuda', dtype=torch.int)
    pool = torch.randperm(total, device='cuda', dtype=torch.int)
    off = 0
    for i, nb in enumerate(nblk):
        table[i, :nb] = pool[off:off + nb]
        off += nb
    # 2-D context lengths [batch, next_n]: token j of request i sees ctx - next_n + j + 1 keys
    cl = torch.tensor(ctx_lens, device='cuda', dtype=torch.int)[:, None] - nn + 1 + torch.arange(nn, device='cuda', dtype=torch.int)[None, :]
    cl = cl.contiguous()
    q8 = (q.to(torch.float8_e4m3fn), None)
    meta = deep_gemm.get_paged_mqa_logits_metadata(cl, block_kv, deep_gemm.get_num_sms())
    out = {}

    def fn():
        out['l'] = deep_gemm.fp8_fp4_paged_mqa_logits(q8, cache, w, cl, table, meta, max_model_len, clean_logits=False)

    def check():
        fn()
        torch.cuda.synchronize()
        logits = out['l']
        qs = q8[0].float()
        flat = cache.view(total, block_kv * (dim + 4))
        worst = 0.0
        for i in random.sample(range(bsz), min(bsz, 3)):
            blocks = flat[table[i, :nblk[i]].long()]
            vals = blocks[:, :block_kv * dim].contiguous().view(torch.float8_e4m3fn).float().view(-1, block_kv, dim)
            scl = blocks[:, block_kv * dim:].contiguous().view(torch.float32).view(-1, block_kv, 1)
            keys = (vals * scl).view(-1, dim)
            for j in range(nn):
                e = int(cl[i, j])
                ref = ((qs[i, j] @ keys[:e].t()).relu() * w[i * nn + j][:, None]).sum(0)
                lg = logits[i * nn + j, :e].float()
                assert torch.isfinite(lg).all(), 'non-finite logits in the valid range'
                worst = max(worst, calc_diff(lg, ref))
        return worst

    tok = sum(ctx_lens)
    return fn, check, dict(flops=2 * tok * nn * h * dim, bytes=tok * (dim + 4) + bsz * nn * h * (dim + 4) + tok * nn * 4)


def build_hc(c):
    s = c['shape']
    m, n, k, splits = s['m'], s['n'], s['k'], s['num_splits']
    splits = None if splits == 0 else splits
    a = torch.randn((m, k), dtype=torch.bfloat16, device='cuda')
    b = torch.randn((n, k), dtype=torch.float, device='cuda')
    d = torch.empty((m, n), dtype=torch.float, device='cuda') if splits is None else torch.empty((splits, m, n), dtype=torch.float, device='cuda')
    sq = torch.empty((m,), dtype=torch.float, device='cuda') if splits is None else torch.empty((splits, m), dtype=torch.float, device='cuda')

    def fn():
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d, sq, num_splits=splits)

    def check():
        fn()
        torch.cuda.synchronize()
        fd = d if splits is None else d.sum(0)
        fs = sq if splits is None else sq.sum(0)
        return max(calc_diff(fd, a.double() @ b.double().t()), calc_diff(fs, a.double().square().sum(-1)))

    return fn, check, dict(flops=2 * m * n * k, bytes=m * k * 2 + n * k * 4 + (splits or 1) * m * (n + 1) * 4)


BUILDERS = dict(fp8_gemm=build_fp8_gemm, grouped_gemm_masked=build_masked, grouped_gemm_contiguous=build_contiguous,
                mqa_logits=build_mqa, mqa_logits_paged=build_paged, hc_prenorm_gemm=build_hc)
PRECISION = dict(fp8_gemm='fp8 e4m3 x fp8 e4m3 (1x128 act, 128x128 weight scales), bf16 out',
                 grouped_gemm_masked='fp8 e4m3 x fp8 e4m3 (1x128 / 128x128 scales), bf16 out',
                 grouped_gemm_contiguous='fp8 e4m3 x fp8 e4m3 (1x128 / 128x128 scales), bf16 out',
                 mqa_logits='fp8 e4m3 q and k (per-token k scale), fp32 weights and logits',
                 mqa_logits_paged='fp8 e4m3 q and k (per-token k scale), fp32 weights and logits',
                 hc_prenorm_gemm='bf16 x fp32 in TF32 MMA, fp32 out + squared sum')


def cases():
    out = []

    def add(kernel, name, **shape):
        out.append(dict(id=f'{kernel}:{name}:' + ','.join(f'{k}={v}' for k, v in shape.items()), kernel=kernel, name=name, shape=shape))

    for m in GEMM_M_DECODE:
        for name, n, k in GEMM_SHAPES:
            add('fp8_gemm', name, m=m, n=n, k=k)
    # Hopper decode MoE: masked m-grouped FP8 GEMM, groups = local experts (384 / EP)
    for ep, groups in ((8, 48), (16, 24), (32, 12)):
        for em in (1, 4, 16, 32, 64):
            max_m = 128 if em <= 64 else 256
            add('grouped_gemm_masked', f'moe_l1_ep{ep}', groups=groups, expected_m=em, max_m=max_m, n=2 * MOE_INTER, k=HIDDEN)
            add('grouped_gemm_masked', f'moe_l2_ep{ep}', groups=groups, expected_m=em, max_m=max_m, n=HIDDEN, k=MOE_INTER)
    for m in (1, 8, 32, 128, 256, 1024, 4096, 8192, 16384):
        for splits in (0, 16):
            add('hc_prenorm_gemm', 'hc_pre', m=m, n=HC_ROWS, k=HC_MULT * HIDDEN, num_splits=splits)
    for nn in (1, 2):
        for bsz in (1, 16, 64, 256):
            for ctx in (8192, 32768, 131072):
                if nn == 2 and bsz in (1, 16) and ctx != 32768:
                    continue
                add('mqa_logits_paged', 'indexer_decode', batch=bsz, next_n=nn, kv_len=ctx, heads=IDX_HEADS, head_dim=IDX_DIM, block_kv=64)
    for sq, skv in ((4096, 32768), (4096, 65536), (4096, 131072), (8192, 131072), (16384, 131072)):
        add('mqa_logits', 'indexer_prefill', seq_q=sq, kv_len=skv, heads=IDX_HEADS, head_dim=IDX_DIM)
    for m in GEMM_M_PREFILL:
        for name, n, k in GEMM_SHAPES:
            add('fp8_gemm', name, m=m, n=n, k=k)
    for ep, groups in ((8, 48), (16, 24)):
        for em in (128, 512):
            add('grouped_gemm_contiguous', f'moe_l1_ep{ep}', groups=groups, expected_m=em, n=2 * MOE_INTER, k=HIDDEN)
            add('grouped_gemm_contiguous', f'moe_l2_ep{ep}', groups=groups, expected_m=em, n=HIDDEN, k=MOE_INTER)
    return out


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------
_FLUSH = None


def flush_buffer():
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(int(256e6 // 4), dtype=torch.int, device='cuda')
    return _FLUSH


def time_flushed(fn, reps):
    buf = flush_buffer()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        buf.zero_()
        st[i].record()
        fn()
        en[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(st, en))
    return statistics.median(ts), ts[len(ts) // 10], ts[(9 * len(ts)) // 10]


def time_graph(fn, calls=20, replays=10):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / calls)
    del g
    return statistics.median(ts)


def time_kineto(fn, reps=30):
    buf = flush_buffer()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            buf.zero_()
            fn()
        torch.cuda.synchronize()
    tot, names, main = 0.0, {}, 0.0
    for e in prof.key_averages():
        t = getattr(e, 'device_time_total', None)
        if t is None:
            t = getattr(e, 'cuda_time_total', 0.0)
        if not t or 'FillFunctor' in e.key or e.key.startswith(('Memset', 'Memcpy', 'cuda', 'aten::')):
            continue
        tot += t
        main = max(main, t)
        names[e.key[:60].replace(',', ' ')] = f'{e.count}x{t / max(e.count, 1):.2f}us'
    return tot / reps, main / reps, ' | '.join(f'{k}: {v}' for k, v in names.items())


FIELDS = ['case_id', 'kernel', 'name', 'shape', 'precision', 'flushed_median_us', 'flushed_p10_us', 'flushed_p90_us',
          'graph_us', 'graph_calls', 'kineto_us', 'kineto_main_us', 'kineto_kernels', 'reps', 'tflops_flushed', 'gbps_flushed', 'flops', 'bytes',
          'status']


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f'failed: {e}'


def env(out):
    p = torch.cuda.get_device_properties(0)
    e = dict(gpu_name=torch.cuda.get_device_name(0), sm_count=p.multi_processor_count,
             l2_bytes=getattr(p, 'L2_cache_size', None), total_memory_bytes=p.total_memory,
             compute_capability=f'{p.major}.{p.minor}', torch=torch.__version__, torch_cuda=torch.version.cuda,
             python=sys.version.split()[0], deep_gemm_version=getattr(deep_gemm, '__version__', None),
             deep_gemm_commit=os.environ.get('DG_COMMIT'), cutlass_commit=os.environ.get('CUTLASS_COMMIT'),
             fmt_commit=os.environ.get('FMT_COMMIT'), deep_gemm_num_sms=deep_gemm.get_num_sms(),
             deep_gemm_pdl=deep_gemm.get_pdl(), deep_gemm_tc_util=deep_gemm.get_tc_util(),
             nvcc=sh('nvcc --version | tail -2'), gcc=sh('gcc --version | head -1'),
             nvidia_smi=sh('nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,'
                           'power.limit,power.draw,temperature.gpu,pstate,persistence_mode --format=csv'),
             kernel=sh('uname -r'), hostname_cpus=os.cpu_count(), time_utc=sh('date -u'))
    # the two ceilings (METHOD.md): a large device-to-device copy and a large bf16 matrix product
    x = torch.randn(int(1 << 29), device='cuda', dtype=torch.bfloat16)  # 1 GiB
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(20):
        y.copy_(x)
    b.record()
    torch.cuda.synchronize()
    e['copy_read_plus_write_GBps'] = round(2 * x.numel() * 2 * 20 / (a.elapsed_time(b) * 1e-3) / 1e9, 1)
    del x, y
    m = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
    n = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
    for _ in range(3):
        m @ n
    torch.cuda.synchronize()
    a.record()
    for _ in range(20):
        m @ n
    b.record()
    torch.cuda.synchronize()
    e['bf16_matmul_8192_TFLOPs'] = round(2 * 8192 ** 3 * 20 / (a.elapsed_time(b) * 1e-3) / 1e12, 1)
    e['nvidia_smi_after_matmul'] = sh('nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv')
    with open(os.path.join(out, 'env.json'), 'w') as f:
        json.dump(e, f, indent=1)
    print(json.dumps(e, indent=1), flush=True)


def shape_str(s):
    return ';'.join(f'{k}={v}' for k, v in s.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', choices=['warm', 'time', 'list', 'env'], required=True)
    ap.add_argument('--shard', type=int, default=0)
    ap.add_argument('--nshards', type=int, default=1)
    ap.add_argument('--out', default='.')
    ap.add_argument('--deadline', type=float, default=0.0, help='epoch seconds: stop starting new cases after it')
    ap.add_argument('--only', default='', help='comma list of kernels to run')
    ap.add_argument('--skip-csv', default='', help='a raw CSV of an earlier run: skip its cases that ran ok')
    args = ap.parse_args()
    if args.mode == 'env':
        return env(args.out)

    cs = cases()
    if args.only:
        keep = set(args.only.split(','))
        cs = [c for c in cs if c['kernel'] in keep]
    if args.skip_csv and os.path.exists(args.skip_csv):
        with open(args.skip_csv) as f:
            done = {r['case_id'] for r in csv.DictReader(f) if r.get('status') == 'ok'}
        cs = [c for c in cs if c['id'] not in done]
        print(f'skipping {len(done)} cases done earlier, {len(cs)} left', flush=True)
    if args.mode == 'list':
        for c in cs:
            print(c['id'])
        print(len(cs), 'cases')
        return
    torch.backends.cuda.matmul.allow_tf32 = False

    if args.mode == 'warm':
        mine = [c for i, c in enumerate(cs) if i % args.nshards == args.shard]
        for c in mine:
            if args.deadline and time.time() > args.deadline:
                print(f'[warm {args.shard}] deadline, skip {c["id"]}', flush=True)
                continue
            t0 = time.time()
            seed(zlib.crc32(c['id'].encode()))
            try:
                fn, check, info = BUILDERS[c['kernel']](c)
                err = check()
                print(f'[warm {args.shard}] {c["id"]}: diff {err:.2e}, {time.time() - t0:.1f} s', flush=True)
            except Exception as e:  # keep going: one failing case must not stop the batch
                print(f'[warm {args.shard}] {c["id"]}: FAILED {type(e).__name__}: {e}', flush=True)
            fn = check = None
            torch.cuda.empty_cache()
        return

    path = os.path.join(args.out, 'deepgemm_sm90_raw.csv')
    new = not os.path.exists(path)
    f = open(path, 'a', newline='')
    w = csv.DictWriter(f, fieldnames=FIELDS)
    if new:
        w.writeheader()
    t_start = time.time()
    for idx, c in enumerate(cs):
        if args.deadline and time.time() > args.deadline:
            print(f'deadline reached, {len(cs) - idx} cases left', flush=True)
            break
        seed(zlib.crc32(c['id'].encode()))
        row = dict(case_id=c['id'], kernel=c['kernel'], name=c['name'], precision=PRECISION[c['kernel']])
        t0 = time.time()
        try:
            fn, check, info = BUILDERS[c['kernel']](c)
            fn()
            torch.cuda.synchronize()
            # choose repetitions from a first estimate
            m0, _, _ = time_flushed(fn, 5)
            reps = int(min(200, max(20, 0.4e6 / max(m0, 1.0))))
            med, p10, p90 = time_flushed(fn, reps)
            try:
                calls = 20 if m0 < 2000 else 5
                g = time_graph(fn, calls=calls, replays=max(2, min(10, int(0.5e6 / (m0 * calls)))))
                row['graph_calls'] = calls
            except Exception as e:
                g = float('nan')
                row['status'] = f'graph failed: {type(e).__name__}'
            try:
                kt, km, kn = time_kineto(fn, reps=max(5, min(30, int(0.3e6 / m0))))
            except Exception as e:
                kt, km, kn = float('nan'), float('nan'), f'kineto failed: {type(e).__name__}'
            row.update(shape=shape_str(c['shape']), flushed_median_us=f'{med:.3f}', flushed_p10_us=f'{p10:.3f}',
                       flushed_p90_us=f'{p90:.3f}', graph_us=f'{g:.3f}', kineto_us=f'{kt:.3f}', kineto_main_us=f'{km:.3f}', kineto_kernels=kn,
                       reps=reps, tflops_flushed=f'{info["flops"] / med / 1e6:.2f}',
                       gbps_flushed=f'{info["bytes"] / med / 1e3:.1f}', flops=info['flops'], bytes=info['bytes'])
            row.setdefault('status', 'ok')
            print(f'{idx:3d} {c["id"]:<90s} flushed {med:9.2f} us  graph {g:9.2f} us  kineto {kt:9.2f} us  '
                  f'{info["flops"] / med / 1e6:7.1f} TFLOP/s {info["bytes"] / med / 1e3:7.0f} GB/s  ({time.time() - t0:.1f} s)', flush=True)
        except Exception as e:
            row.update(shape=shape_str(c['shape']), status=f'FAILED {type(e).__name__}: {str(e)[:200]}')
            print(f'{idx:3d} {c["id"]}: FAILED {type(e).__name__}: {e}', flush=True)
        w.writerow(row)
        f.flush()
        fn = check = None
        torch.cuda.empty_cache()
    f.close()
    print(f'timing took {time.time() - t_start:.1f} s', flush=True)


if __name__ == '__main__':
    main()
