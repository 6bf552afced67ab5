#!/usr/bin/env python3
"""Time DeepGEMM's SM90 FP8 Mega MoE (PR #323 fork, qiushixiaoyu/DeepGEMM @ 820861bd3) on ONE Hopper GPU.

One rank holds every expert (num_ranks = 1: the symmetric buffer is a plain torch allocation and the
buffer-pointer list has one entry, exactly what the fork's deep_gemm/mega/__init__.py SymmBuffer does for a
group of size 1; no NVLink peer, so the kernel's cross-rank barriers run against this GPU alone).

Modes:
  --mode warm --model M --tokens T : JIT-compile the kernel for (model, T) with uninitialised weights (no check)
  --mode time --model M            : random FP8 weights; every case checked against a torch reference, then timed
  --mode ncu  --model M --tokens T : one call (for ncu)
  --mode env                       : env.json
Timing of a case (as calibration/hopper/scripts/bench_deepgemm.py):
  kineto  : torch.profiler duration of the kernel `sm90_fp8_mega_moe_impl`, a 256 MB memset (L2 flush) before each
            of 30 calls; mean (DeepGEMM's bench_kineto method). Primary.
  flushed : CUDA events around one call after the flush; median of 30 (holds the eager launch)
  graph   : one CUDA graph of 20 back-to-back calls (no flush), median of 10 replays / 20
Inputs (x, x_sf, topk_idx, topk_weights) are written into the buffer once per case: the kernel only reads them.
"""
import argparse
import csv
import json

import os
import statistics
import subprocess
import sys
import time

import torch

MODELS = {
    # name: hidden, intermediate, experts, topk (shared/reference/models.md)
    'v4flash': (4096, 2048, 256, 6),
    'v41flash': (5120, 2304, 384, 6),
}
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 512, 2048, 8192]
ROUTE_TOKENS = [1, 2, 4, 8]
ROUTE_EXPERTS = [1, 2, 3, 6, 12, 24, 48]
MAX_TOKENS = 8192          # one buffer (one kNumMaxTokensPerRank template value) per model
CLAMP = 10.0
KERNEL = 'sm90_fp8_mega_moe_impl'


def cases(model):
    out = [dict(model=model, tokens=t, route='random', experts=0) for t in TOKENS]
    for t in ROUTE_TOKENS:
        for e in ROUTE_EXPERTS:
            if e <= 6 * t:
                out.append(dict(model=model, tokens=t, route='touch', experts=e))
    return out


def case_id(c):
    return f"{c['model']}:t{c['tokens']}:{c['route']}" + (f":e{c['experts']}" if c['route'] == 'touch' else '')


# ----------------------------------------------------------------------------------------------
def import_dg():
    import deep_gemm
    from deep_gemm import _C
    return deep_gemm, _C


def make_buffer(_C, num_experts, topk, hidden, inter, max_tokens=MAX_TOKENS):
    align = _C.get_token_alignment_for_mega_moe()
    max_tokens = (max_tokens + align - 1) // align * align
    num_bytes, slice_fn = _C.get_symm_buffer_size_for_sm90_mega_moe(1, num_experts, max_tokens, topk, hidden, inter,
                                                                    True, 'swiglu')
    buf = torch.empty(num_bytes, dtype=torch.int8, device='cuda')
    buf.zero_()
    views = slice_fn(buf)
    return buf, views, max_tokens


def quant_block(w):
    """(G, N, K) bf16 -> fp8 + fp32 (G, N/128, K/128) block scales (the fork's test, section 2)."""
    g, n, k = w.shape
    v = w.view(g, n // 128, 128, k // 128, 128).float()
    sf = v.abs().amax(dim=(-1, -3)).clamp(1e-4) / 448.0
    q = (v / sf.unsqueeze(-1).unsqueeze(-3)).to(torch.float8_e4m3fn)
    return q.view(g, n, k).contiguous(), sf.contiguous()


def dequant_block(q, sf):
    n, k = q.shape
    return (q.float().view(n // 128, 128, k // 128, 128) * sf.view(n // 128, 1, k // 128, 1)).view(n, k)


def interleave(t, gran=8):
    g, n, *rest = t.shape
    half = n // 2
    gate = t[:, :half].reshape(g, half // gran, gran, *rest)
    up = t[:, half:].reshape(g, half // gran, gran, *rest)
    return torch.empty_like(t).copy_(torch.stack([gate, up], dim=2).reshape(g, n, *rest))


def make_weights(E, hidden, inter, init=True, chunk=16):
    l1 = torch.empty((E, 2 * inter, hidden), dtype=torch.float8_e4m3fn, device='cuda')
    l2 = torch.empty((E, hidden, inter), dtype=torch.float8_e4m3fn, device='cuda')
    l1sf = torch.empty((E, 2 * inter // 128, hidden // 128), dtype=torch.float, device='cuda')
    l2sf = torch.empty((E, hidden // 128, inter // 128), dtype=torch.float, device='cuda')
    if init:
        for s in range(0, E, chunk):
            e = min(E, s + chunk)
            q, f = quant_block(torch.randn((e - s, 2 * inter, hidden), dtype=torch.bfloat16, device='cuda') * 0.05)
            l1[s:e], l1sf[s:e] = q, f
            q, f = quant_block(torch.randn((e - s, hidden, inter), dtype=torch.bfloat16, device='cuda') * 0.05)
            l2[s:e], l2sf[s:e] = q, f
    else:
        l1sf.fill_(1e-3)
        l2sf.fill_(1e-3)
    return l1, l1sf, l2, l2sf


def routing(c, num_experts, topk, gen):
    T = c['tokens']
    if c['route'] == 'random':
        scores = torch.rand((T, num_experts), generator=gen, device='cuda')
        _, idx = torch.topk(scores, topk, dim=-1)
        w = torch.rand((T, topk), generator=gen, device='cuda') + 0.1
        return idx.long().contiguous(), (w / w.sum(-1, keepdim=True)).float().contiguous()
    E = c['experts']
    k = min(topk, E)
    chosen = torch.randperm(num_experts, generator=torch.Generator().manual_seed(1000 * T + E))[:E].tolist()
    idx = torch.full((T, topk), -1, dtype=torch.long)
    for t in range(T):
        for j in range(k):
            idx[t, j] = chosen[(t * k + j) % E]
    w = torch.rand((T, topk), generator=gen, device='cuda') + 0.1
    w = w * (idx.cuda() >= 0)
    return idx.cuda().contiguous(), (w / w.sum(-1, keepdim=True)).float().contiguous()


def per_token_fp8(x):
    T, H = x.shape
    v = x.float().view(T, H // 128, 128)
    sf = v.abs().amax(-1).clamp(1e-4) / 448.0
    return (v / sf.unsqueeze(-1)).to(torch.float8_e4m3fn).view(T, H), sf.contiguous()


def reference(xq, xsf, idx, w, l1, l1sf, l2, l2sf, inter):
    """Routed SwiGLU MLP on dequantised FP8 weights (the fork's _reference_fused, grouped by expert)."""
    T, H = xq.shape
    xf = (xq.float().view(T, H // 128, 128) * xsf.unsqueeze(-1)).view(T, H)
    out = torch.zeros((T, H), dtype=torch.float, device='cuda')
    for e in torch.unique(idx[idx >= 0]).tolist():
        tok, slot = (idx == e).nonzero(as_tuple=True)
        h = xf[tok] @ dequant_block(l1[e], l1sf[e]).t()
        gate, up = h[:, :inter].clamp(max=CLAMP), h[:, inter:].clamp(-CLAMP, CLAMP)
        a = torch.nn.functional.silu(gate) * up * w[tok, slot].unsqueeze(-1)
        av = a.view(-1, inter // 64, 64)
        s2 = av.abs().amax(-1).clamp(1e-4) / 448.0
        a = ((av / s2.unsqueeze(-1)).to(torch.float8_e4m3fn).float() * s2.unsqueeze(-1)).view(-1, inter)
        y = (a @ dequant_block(l2[e], l2sf[e]).t()).to(torch.bfloat16).float()
        out.index_add_(0, tok, y)
    return out


def calc_diff(x, y):
    x, y = x.double(), y.double()
    den = (x * x + y * y).sum()
    return 0.0 if den == 0 else float(1 - 2 * (x * y).sum() / den)


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
    main, n, other = 0.0, 0, []
    for e in prof.key_averages():
        t = getattr(e, 'device_time_total', None)
        if t is None:
            t = getattr(e, 'cuda_time_total', 0.0)
        if not t:
            continue
        if KERNEL in e.key:
            main += t
            n += e.count
        elif not ('FillFunctor' in e.key or e.key.startswith(('Memset', 'Memcpy', 'cuda', 'aten::'))):
            other.append(f'{e.key[:40]}:{e.count}x{t / max(e.count, 1):.2f}')
    return main / max(n, 1), n, ' | '.join(other)


FIELDS = ['case_id', 'model', 'num_sms', 'hidden', 'intermediate', 'num_experts', 'topk', 'tokens', 'route', 'experts_target',
          'pairs', 'experts_touched', 'weight_bytes', 'flops', 'kineto_us', 'kineto_calls', 'flushed_median_us',
          'flushed_p10_us', 'flushed_p90_us', 'graph_us', 'graph_calls', 'check_diff', 'recheck_diff', 'other_kernels',
          'status']


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f'failed: {e}'


def env(out):
    import deep_gemm
    p = torch.cuda.get_device_properties(0)
    e = dict(gpu_name=torch.cuda.get_device_name(0), sm_count=p.multi_processor_count,
             l2_bytes=getattr(p, 'L2_cache_size', None), total_memory_bytes=p.total_memory,
             compute_capability=f'{p.major}.{p.minor}', torch=torch.__version__, torch_cuda=torch.version.cuda,
             python=sys.version.split()[0], deep_gemm_commit=os.environ.get('DG_COMMIT'),
             deep_gemm_repo=os.environ.get('DG_REPO'), cutlass_commit=os.environ.get('CUTLASS_COMMIT'),
             fmt_commit=os.environ.get('FMT_COMMIT'), deep_gemm_num_sms=deep_gemm.get_num_sms(),
             nvcc=sh('nvcc --version | tail -2'), gcc=sh('gcc --version | head -1'), ncu=sh('which ncu; ncu --version | tail -1'),
             nvidia_smi=sh('nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,'
                           'power.limit,power.draw,temperature.gpu,pstate --format=csv'),
             kernel=sh('uname -r'), hostname_cpus=os.cpu_count(), time_utc=sh('date -u'))
    x = torch.randn(int(1 << 29), device='cuda', dtype=torch.bfloat16)
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
    with open(os.path.join(out, 'env.json'), 'w') as f:
        json.dump(e, f, indent=1)
    print(json.dumps(e, indent=1))


# ----------------------------------------------------------------------------------------------
def setup(model, init):
    deep_gemm, _C = import_dg()
    hidden, inter, E, topk = MODELS[model]
    t = time.time()
    l1, l1sf, l2, l2sf = make_weights(E, hidden, inter, init=init)
    l1t = interleave(l1) if init else l1
    torch.cuda.synchronize()
    buf, views, max_tokens = make_buffer(_C, E, topk, hidden, inter)
    print(f'[{model}] weights + buffer in {time.time() - t:.1f}s; buffer {buf.numel() / 1e9:.2f} GB, '
          f'max tokens {max_tokens}; GPU mem {torch.cuda.memory_allocated() / 1e9:.1f} GB', flush=True)
    return _C, (hidden, inter, E, topk), (l1, l1sf, l2, l2sf, l1t), (buf, views, max_tokens)


def make_call(_C, dims, W, B, T):
    hidden, inter, E, topk = dims
    l1, l1sf, l2, l2sf, l1t = W
    buf, views, max_tokens = B
    y = torch.empty((T, hidden), dtype=torch.bfloat16, device='cuda')
    stats = torch.zeros((E,), dtype=torch.int, device='cuda')

    def fn():
        _C.fp8_mega_moe(y, (l1t, l1sf), (l2, l2sf), stats, buf, [buf.data_ptr()], 0, max_tokens, E, topk,
                        (128, 128, 128), 'swiglu', CLAMP, True)
    return fn, y


def load_inputs(views, xq, xsf, idx, w):
    T = xq.shape[0]
    views[0][:T].copy_(xq)
    views[1][:T].copy_(xsf)
    views[2][:T].copy_(idx)
    views[3][:T].copy_(w)


def time_case(c, _C, dims, W, B, gen, per_expert, num_sms=None):
    hidden, inter, E, topk = dims
    l1, l1sf, l2, l2sf, l1t = W
    cid = case_id(c)
    T = c['tokens']
    row = dict(case_id=cid, model=c['model'], hidden=hidden, intermediate=inter, num_experts=E, topk=topk,
               tokens=T, route=c['route'], experts_target=c['experts'], num_sms=num_sms or 132)
    t0 = time.time()
    try:
        idx, w = routing(c, E, topk, gen)
        valid = idx[idx >= 0]
        pairs, touched = int(valid.numel()), int(torch.unique(valid).numel())
        row.update(pairs=pairs, experts_touched=touched, weight_bytes=touched * per_expert,
                   flops=2 * pairs * 3 * hidden * inter)
        xq, xsf = per_token_fp8(torch.randn((T, hidden), device='cuda', dtype=torch.bfloat16))
        load_inputs(B[1], xq, xsf, idx, w)
        fn, y = make_call(_C, dims, W, B, T)
        y.fill_(float('nan'))
        fn()
        torch.cuda.synchronize()
        ref = reference(xq, xsf, idx, w, l1, l1sf, l2, l2sf, inter)
        ok_nan = not torch.isnan(y).any().item()
        row['check_diff'] = f'{calc_diff(y.float(), ref):.2e}' if ok_nan else 'nan'
        y0 = y.clone()
        reps = 30
        k_us, k_n, other = time_kineto(fn, reps)
        fm, f10, f90 = time_flushed(fn, reps)
        gcalls = 20
        try:
            g_us = time_graph(fn, gcalls)
        except Exception as e:
            g_us, gcalls = float('nan'), 0
            print(f'{cid}: graph failed {type(e).__name__}: {e}', flush=True)
        row['recheck_diff'] = f'{calc_diff(y.float(), y0.float()):.2e}'
        row.update(kineto_us=round(k_us, 3), kineto_calls=k_n, flushed_median_us=round(fm, 3),
                   flushed_p10_us=round(f10, 3), flushed_p90_us=round(f90, 3), graph_us=round(g_us, 3),
                   graph_calls=gcalls, other_kernels=other)
        good = ok_nan and calc_diff(y0.float(), ref) < 5e-3
        row['status'] = 'ok' if good else 'check_failed'
    except Exception as e:
        row['status'] = f'error {type(e).__name__}: {str(e)[:200]}'.replace(',', ';').replace('\n', ' ')
        torch.cuda.synchronize()
    print(f"{cid:28s} sms {row['num_sms']} pairs {row.get('pairs', '-'):>6} touched {row.get('experts_touched', '-'):>4} "
          f"kineto {row.get('kineto_us', '-'):>9} flushed {row.get('flushed_median_us', '-'):>9} "
          f"graph {row.get('graph_us', '-'):>9} diff {row.get('check_diff', '-')} {row['status']} "
          f"({time.time() - t0:.1f}s)", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', required=True)
    ap.add_argument('--model', default='v4flash')
    ap.add_argument('--tokens', type=int, default=1)
    ap.add_argument('--out', default=os.environ.get('OUT', '/tmp/out'))
    ap.add_argument('--deadline', type=float, default=0)
    ap.add_argument('--only', default='')
    ap.add_argument('--max-tokens', type=int, default=0, help='time only the cases of at most this many tokens')
    ap.add_argument('--skip-csv', default='', help='comma-separated CSVs: skip case ids already ok there')
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.mode == 'env':
        return env(args.out)
    if args.mode == 'list':
        for m in MODELS:
            for c in cases(m):
                print(case_id(c))
        return
    if args.mode in ('warm', 'ncu'):
        _C, dims, W, B = setup(args.model, init=(args.mode == 'ncu'))
        hidden, inter, E, topk = dims
        gen = torch.Generator(device='cuda').manual_seed(1)
        c = dict(model=args.model, tokens=args.tokens, route='random', experts=0)
        idx, w = routing(c, E, topk, gen)
        xq, xsf = per_token_fp8(torch.randn((args.tokens, hidden), device='cuda', dtype=torch.bfloat16))
        load_inputs(B[1], xq, xsf, idx, w)
        fn, y = make_call(_C, dims, W, B, args.tokens)
        t = time.time()
        fn()
        torch.cuda.synchronize()
        print(f'[{args.mode} {args.model} t{args.tokens}] first call (compile + run) {time.time() - t:.1f}s', flush=True)
        if args.mode == 'ncu':
            fn()
            torch.cuda.synchronize()
        return

    if args.mode == 'probe':
        # the fixed part alone (0 tokens) and one / six / 48 experts, on all 132 SMs and on fewer
        import deep_gemm
        _C, dims, W, B = setup(args.model, init=True)
        hidden, inter, E, topk = dims
        per_expert = 3 * hidden * inter + 4 * (2 * inter // 128 * hidden // 128 + hidden // 128 * inter // 128)
        path = os.path.join(args.out, 'megamoe_sm90_probe.csv')
        new = not os.path.exists(path)
        f = open(path, 'a', newline='')
        wr = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            wr.writeheader()
        gen = torch.Generator(device='cuda').manual_seed(11)
        probe = [dict(model=args.model, tokens=0, route='random', experts=0),
                 dict(model=args.model, tokens=1, route='touch', experts=1),
                 dict(model=args.model, tokens=1, route='touch', experts=6),
                 dict(model=args.model, tokens=8, route='touch', experts=48)]
        for sms in (132, 66, 32):
            deep_gemm.set_num_sms(sms)
            for c in probe:
                if args.deadline and time.time() > args.deadline:
                    break
                wr.writerow(time_case(c, _C, dims, W, B, gen, per_expert, sms))
                f.flush()
        deep_gemm.set_num_sms(132)
        f.close()
        return

    # time
    _C, dims, W, B = setup(args.model, init=True)
    hidden, inter, E, topk = dims
    l1, l1sf, l2, l2sf, l1t = W
    per_expert = 3 * hidden * inter + 4 * (2 * inter // 128 * hidden // 128 + hidden // 128 * inter // 128)
    path = os.path.join(args.out, f"megamoe_sm90_raw_{args.model}{os.environ.get('OUT_SUFFIX', '')}.csv")
    f = open(path, 'w', newline='')
    wr = csv.DictWriter(f, fieldnames=FIELDS)
    wr.writeheader()
    gen = torch.Generator(device='cuda').manual_seed(7)
    only = set(args.only.split(',')) if args.only else None
    skip = set()
    for p in filter(None, args.skip_csv.split(',')):
        if os.path.exists(p):
            skip |= {r['case_id'] for r in csv.DictReader(open(p)) if r.get('status') == 'ok'}
    for c in cases(args.model):
        cid = case_id(c)
        if (only and cid not in only) or cid in skip or (args.max_tokens and c['tokens'] > args.max_tokens):
            continue
        if args.deadline and time.time() > args.deadline:
            print(f'{cid}: deadline, skipped', flush=True)
            continue
        wr.writerow(time_case(c, _C, dims, W, B, gen, per_expert))
        f.flush()
    f.close()


if __name__ == '__main__':
    main()
