"""Time FlashMLA's SM90 sparse FP8 decode (github deepseek-ai/FlashMLA @ 9241ae3) at DeepSeek-V4.1-Flash shapes.

V4.1-Flash's attention (models/deepseek-v4.1-flash.toml): MQA over a 512-dim latent (K = V, RoPE 64), 64 heads, the
indexer's top-k 512 compressed entries plus a 128-token sliding window. FlashMLA runs it as its MODEL1 format
(d_qk = d_v = 512; a cached entry is 448 FP8 values + 64 BF16 RoPE values + 7 UE8M0 scales, one per 64 values, + 1
pad byte = 584 B; csrc/api/sparse_decode.h, tests/quant.py), with the window as one KV cache (`k_cache`, 128
indices) and the top-k as the extra cache (`extra_k_cache`, 512 indices): FlashMLA's own production case "MODEL1
CONFIG1" in tests/test_flash_mla_sparse_decoding.py (h_q 64, topk 128 at page block 256 + extra topk 512 at page
block 64). The kernel takes h_q 64 or 128 only (sparse_decode.h); a TP8 rank's 8 heads run padded to 64.

Cases: batch 1-128 sequences x next_n 1, 2, 6 (query tokens per sequence: decode, MTP 1, the 6-token verify) x
context 8K, 32K, 128K (the top-k picks distinct random entries within the context, through a random block table:
the context sets the cache's size and the spread of the gather). Timings per case, as bench_deepgemm.py:
  kineto : torch.profiler kernel durations (splitkv + combine) per call, a 256 MB memset flushing L2 before each call
  flushed: CUDA events around one call after the flush (holds the launch)
  graph  : a CUDA graph of 20 back-to-back calls, replayed (no flush)
The scheduler-metadata kernel runs once per shape (the first call; engines reuse it across layers): not timed.

Correctness (--mode check): the kernel's output and LSE against a float32 torch reference that dequantises the
gathered entries (own code below, from the layout above) and runs softmax attention with the sink.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
import zlib

import torch

D_NOPE, D_ROPE, TILE, NTILES = 448, 64, 64, 7
D_QK = D_V = 512
ENTRY_BYTES = D_NOPE + 2 * D_ROPE + 8      # 584
HEADS = 64
TOPK = 512
WINDOW = 128
WIN_BLOCK = 256     # page block of the window cache (FlashMLA MODEL1 CONFIG1: block_size 256)
CMP_BLOCK = 64      # page block of the compressed cache (MODEL1 CONFIG1: extra_block_size 64)

_FLUSH = None


def flush_buffer():
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(int(256e6 // 4), dtype=torch.int, device='cuda')
    return _FLUSH


def make_cache(num_blocks, block, gen):
    """A MODEL1 FP8 cache of random entries: (num_blocks, block, 1, 584) uint8 view as FlashMLA's tests/quant.py lays
    it out (per page block: block x [448 FP8 | 64 BF16] then block x [7 UE8M0 scales | pad], padded to 576 B).
    FP8 values have random sign and magnitudes 2^-9..1.875 (no NaN); scales 2^-7..2^0; RoPE values N(0, 0.1)."""
    per_block = block * ENTRY_BYTES
    padded = (per_block + 575) // 576 * 576
    buf = torch.empty((num_blocks, padded), dtype=torch.uint8, device='cuda')
    step = max(1, (1 << 28) // padded)
    for s in range(0, num_blocks, step):
        e = min(num_blocks, s + step)
        n = e - s
        main = buf[s:e, :block * 576].view(n, block, 576)
        r = torch.randint(0, 128, (n, block, D_NOPE), dtype=torch.uint8, device='cuda', generator=gen)
        main[:, :, :D_NOPE] = (r & 0x3F) | ((r & 0x40) << 1)
        main[:, :, D_NOPE:].view(torch.bfloat16).copy_(
            torch.randn((n, block, D_ROPE), device='cuda', generator=gen, dtype=torch.float32).mul_(0.1))
        sc = buf[s:e, block * 576:per_block].view(n, block, 8)
        sc.copy_(torch.randint(120, 128, (n, block, 8), dtype=torch.uint8, device='cuda', generator=gen))
    return buf[:, :per_block].view(num_blocks, block, 1, ENTRY_BYTES)


def dequant_entries(kv, idx):
    """float32 [..., 512] of the entries `idx` (flat index = block * page_block + row) of a MODEL1 cache view."""
    kv = kv.view(torch.uint8)   # (FlashMLA's tests/quant.py returns the cache as float8_e4m3fn: read its bytes)
    nb, block = kv.shape[0], kv.shape[1]
    flat = idx.reshape(-1).long()
    blk, row = flat // block, flat % block
    base = kv.view(nb, block * ENTRY_BYTES)   # the view's storage: block rows of 576 B, then the scales
    # gather 576 data bytes and 8 scale bytes per entry
    raw = base.as_strided((nb, block, 576), (kv.stride(0), 576, 1))[blk, row]          # [n, 576]
    scl = base.as_strided((nb, block, 8), (kv.stride(0), 8, 1), block * 576)[blk, row]  # [n, 8]
    nope = raw[:, :D_NOPE].contiguous().view(torch.float8_e4m3fn).float()
    rope = raw[:, D_NOPE:].contiguous().view(torch.bfloat16).float()
    scale = torch.pow(2.0, scl[:, :NTILES].float() - 127.0)
    nope = (nope.view(-1, NTILES, TILE) * scale.unsqueeze(-1)).view(-1, D_NOPE)
    # FlashMLA dequantises to BF16 before its BF16 MMAs: round the same way
    nope = nope.bfloat16().float()
    return torch.cat([nope, rope], dim=-1).view(*idx.shape, D_QK)


def reference(q, kvs, sink, scale):
    """q [b, s, h, 512] bf16; kvs: list of (cache, indices [b, s, k]); returns out [b,s,h,512] fp32, lse [b,s,h]."""
    b, s, h, _ = q.shape
    ks = torch.cat([dequant_entries(kv, ix) for kv, ix in kvs], dim=2)       # [b, s, K, 512]
    logits = torch.einsum('bshd,bskd->bshk', q.float(), ks) * scale
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.exp(logits - lse.unsqueeze(-1))
    out = torch.einsum('bshk,bskd->bshd', p, ks[..., :D_V])
    if sink is not None:
        out = out * (1.0 / (1.0 + torch.exp(sink.view(1, 1, h) - lse))).unsqueeze(-1)
    return out, lse


def build(c, gen, check=False):
    """Inputs of one case: q, the window cache + indices, the compressed cache + indices, the sink."""
    b, sq, ctx = c['batch'], c['next_n'], c['context']
    q = torch.randn((b, sq, c['heads'], D_QK), device='cuda', generator=gen, dtype=torch.float32).clamp_(-1, 1).bfloat16()
    # compressed cache: ctx entries a sequence, page blocks of 64 spread by a random block table
    nblk = b * ctx // CMP_BLOCK
    cmp_kv = make_cache(nblk, CMP_BLOCK, gen)
    table = torch.randperm(nblk, device='cuda', generator=gen).view(b, ctx // CMP_BLOCK).int()
    rows, topk = b * sq, c.get('topk', TOPK)
    pos = torch.empty((rows, topk), dtype=torch.int64, device='cuda')
    chunk = max(1, (1 << 27) // ctx)
    for s in range(0, rows, chunk):
        e = min(rows, s + chunk)
        pos[s:e] = torch.rand((e - s, ctx), device='cuda', generator=gen).topk(topk, dim=-1).indices
    pos = pos.view(b, sq, topk)
    seq = torch.arange(b, device='cuda').view(b, 1, 1)
    cmp_idx = (table.long()[seq, pos // CMP_BLOCK] * CMP_BLOCK + pos % CMP_BLOCK).int().contiguous()
    kvs = [(cmp_kv, cmp_idx)]
    if c['window']:
        # window cache: one page block of 256 a sequence used as a ring; token j of the next_n attends the 128
        # positions ending at its own
        win_kv = make_cache(b, WIN_BLOCK, gen)
        start = torch.randint(0, WIN_BLOCK, (b, 1, 1), device='cuda', generator=gen)
        j = torch.arange(sq, device='cuda').view(1, sq, 1)
        w = torch.arange(WINDOW, device='cuda').view(1, 1, WINDOW)
        win_idx = (seq * WIN_BLOCK + (start + j + w) % WIN_BLOCK).int().contiguous()
        kvs = [(win_kv, win_idx), (cmp_kv, cmp_idx)]
    sink = torch.randn((c['heads'],), device='cuda', generator=gen, dtype=torch.float32) if c['sink'] else None
    return q, kvs, sink


def call_fn(q, kvs, sink, scale):
    import flash_mla
    meta, _ = flash_mla.get_mla_metadata()
    main_kv, main_idx = kvs[0]
    extra = kvs[1] if len(kvs) > 1 else (None, None)

    def fn():
        return flash_mla.flash_mla_with_kvcache(q, main_kv, None, None, D_V, meta, None, scale, False, True,
                                                main_idx, sink, extra[0], extra[1], None, None)
    return fn


def cases(full=True):
    out = []
    for ctx in (8192, 32768, 131072):
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            for sq in (1, 2, 6):
                out.append(dict(batch=b, next_n=sq, context=ctx, heads=HEADS, topk=TOPK, window=WINDOW, sink=1))
    # the top-k alone (no window cache): what the window adds
    for b in (1, 8, 32, 128):
        for sq in (1, 2):
            out.append(dict(batch=b, next_n=sq, context=32768, heads=HEADS, topk=TOPK, window=0, sink=1))
    # the top-k's length alone (no window): the time of one more 64-entry block of a CTA's chain
    for b in (1, 16, 64, 128):
        for topk in (256, 1024, 2048):
            out.append(dict(batch=b, next_n=1, context=32768, heads=HEADS, topk=topk, window=0, sink=1))
    for c in out:
        c['id'] = f"b{c['batch']}_n{c['next_n']}_ctx{c['context']}_h{c['heads']}_topk{c['topk']}_win{c['window']}"
    return out


SMALL = {'b1_n1_ctx32768_h64_topk512_win128', 'b8_n2_ctx32768_h64_topk512_win128', 'b32_n1_ctx131072_h64_topk512_win128',
         'b128_n6_ctx8192_h64_topk512_win128', 'b64_n2_ctx131072_h64_topk512_win128', 'b2_n6_ctx8192_h64_topk512_win128'}


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
    """Per-call kernel time (sum over the call's kernels, L2 flushed before each call) and each kernel's mean."""
    buf = flush_buffer()
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            buf.zero_()
            fn()
        torch.cuda.synchronize()
    tot, split, comb, names = 0.0, 0.0, 0.0, {}
    for e in prof.key_averages():
        t = getattr(e, 'device_time_total', None)
        if t is None:
            t = getattr(e, 'cuda_time_total', 0.0)
        if not t or 'FillFunctor' in e.key or e.key.startswith(('Memset', 'Memcpy', 'cuda', 'aten::')):
            continue
        tot += t
        if 'splitkv_mla_fp8_sparse' in e.key:
            split += t
        elif 'combine' in e.key:
            comb += t
        names[e.key[:50].replace(',', ' ')] = f'{e.count}x{t / max(e.count, 1):.2f}us'
    return tot / reps, split / reps, comb / reps, ' | '.join(f'{k}: {v}' for k, v in names.items())


FIELDS = ['case_id', 'batch', 'next_n', 'context', 'heads', 'topk', 'window', 'sink', 'kineto_us', 'kineto_splitkv_us',
          'kineto_combine_us', 'kineto_kernels', 'flushed_median_us', 'flushed_p10_us', 'flushed_p90_us', 'graph_us',
          'graph_calls', 'reps', 'num_sm_parts', 'kv_gathered_bytes', 'flops', 'gbps_kineto', 'tflops_kineto',
          'setup_s', 'status']


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
             python=sys.version.split()[0], flashmla_commit=os.environ.get('FLASHMLA_COMMIT'),
             cutlass_commit=os.environ.get('CUTLASS_COMMIT'),
             flashmla_build='own setup_sm90.py: SM90 sparse decode MODEL1 h64 + sched-meta + combine, sm_90a only',
             nvcc=sh('nvcc --version | tail -2'), gcc=sh('/usr/bin/g++ --version | head -1'),
             nvidia_smi=sh('nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,'
                           'power.limit,power.draw,temperature.gpu,pstate,persistence_mode --format=csv'),
             kernel=sh('uname -r'), hostname_cpus=os.cpu_count(), time_utc=sh('date -u'))
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


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


def check(out_dir):
    """The kernel against the torch reference on a few cases (fresh random inputs each); a format check of the
    random cache layout against FlashMLA's own quantiser (tests/quant.py), where importable."""
    import flash_mla
    gen = torch.Generator(device='cuda')
    lines, ok = [], True
    scale = D_QK ** -0.5
    for i, (b, sq, ctx, win, sink) in enumerate([(2, 1, 8192, WINDOW, 1), (3, 2, 8192, WINDOW, 1),
                                                 (4, 6, 32768, WINDOW, 1), (5, 1, 8192, 0, 1),
                                                 (2, 2, 8192, WINDOW, 0), (16, 6, 131072, WINDOW, 1)]):
        gen.manual_seed(1000 + i)
        c = dict(batch=b, next_n=sq, context=ctx, heads=HEADS, window=win, sink=sink)
        q, kvs, s = build(c, gen)
        fn = call_fn(q, kvs, s, scale)
        out, lse = fn()
        torch.cuda.synchronize()
        ref_o, ref_lse = reference(q, kvs, s, scale)
        eo = rel(out.float(), ref_o)
        el = rel(lse.transpose(1, 2).float() if lse.shape != ref_lse.shape else lse.float(), ref_lse)
        nan = bool(torch.isnan(out).any().item())
        good = eo < 1e-2 and el < 1e-4 and not nan
        ok &= good
        lines.append(f'check b={b} next_n={sq} ctx={ctx} window={win} sink={sink}: out rel err {eo:.2e}, '
                     f'lse rel err {el:.2e}, nan={nan} -> {"ok" if good else "FAILED"}')
        print(lines[-1], flush=True)
    # the cache layout: FlashMLA's own quantiser vs this script's dequantiser
    try:
        sys.path.insert(0, os.path.join(os.environ.get('FLASHMLA_SRC', '.'), 'tests'))
        import quant
        gen.manual_seed(7)
        x = (torch.randn((3, 64, 1, D_QK), device='cuda', generator=gen) / 10).clamp(-1, 1).bfloat16()
        qk = quant.quantize_k_cache(x, quant.FP8KVCacheLayout.MODEL1_FP8Sparse)
        theirs = quant.dequantize_k_cache(qk, quant.FP8KVCacheLayout.MODEL1_FP8Sparse).view(3 * 64, D_QK).float()
        mine = dequant_entries(qk, torch.arange(3 * 64, device='cuda')).view(3 * 64, D_QK)
        e = rel(mine, theirs)
        lines.append(f'layout check vs FlashMLA tests/quant.py dequantize_k_cache: rel diff {e:.2e} -> '
                     f'{"ok" if e < 1e-2 else "FAILED"}')
        ok &= e < 1e-2
    except Exception as ex:  # noqa: BLE001
        lines.append(f'layout check skipped: {ex!r}')
    print(lines[-1], flush=True)
    # a TP8 rank's 8 heads: FlashMLA takes 64 or 128 only
    try:
        gen.manual_seed(9)
        q, kvs, s = build(dict(batch=2, next_n=1, context=8192, heads=8, window=WINDOW, sink=1), gen)
        call_fn(q, kvs, s, scale)()
        torch.cuda.synchronize()
        lines.append('h_q=8: ran (unexpected)')
    except Exception as ex:  # noqa: BLE001
        lines.append(f'h_q=8 rejected as expected: {str(ex).splitlines()[0][:160]}')
    print(lines[-1], flush=True)
    with open(os.path.join(out_dir, 'check.log'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--mode', choices=['check', 'time', 'list', 'env'], required=True)
    ap.add_argument('--out', default='.')
    ap.add_argument('--deadline', type=float, default=0.0, help='epoch seconds: start no new case after it')
    ap.add_argument('--set', choices=['small', 'full'], default='full')
    ap.add_argument('--skip-csv', default='')
    args = ap.parse_args()
    if args.mode == 'env':
        return env(args.out)
    cs = cases()
    if args.mode == 'list':
        for c in cs:
            print(c['id'])
        print(len(cs), 'cases')
        return
    if args.mode == 'check':
        sys.exit(0 if check(args.out) else 1)
    if args.set == 'small':
        cs = [c for c in cs if c['id'] in SMALL]
    done = set()
    path = os.path.join(args.out, 'flashmla_sm90_raw.csv')
    for p in (args.skip_csv, path):
        if p and os.path.exists(p):
            with open(p) as f:
                done |= {r['case_id'] for r in csv.DictReader(f) if r.get('status') == 'ok'}
    cs = [c for c in cs if c['id'] not in done]
    new = not os.path.exists(path)
    f = open(path, 'a', newline='')
    w = csv.DictWriter(f, fieldnames=FIELDS)
    if new:
        w.writeheader()
    gen = torch.Generator(device='cuda')
    scale = D_QK ** -0.5
    for i, c in enumerate(cs):
        if args.deadline and time.time() > args.deadline:
            print(f'deadline: {len(cs) - i} cases left', flush=True)
            break
        t0 = time.time()
        row = {k: c[k] for k in ('batch', 'next_n', 'context', 'heads', 'topk', 'window', 'sink')}
        row['case_id'] = c['id']
        try:
            gen.manual_seed(zlib.crc32(c['id'].encode()))
            q, kvs, s = build(c, gen)
            fn = call_fn(q, kvs, s, scale)
            fn()   # first call: the scheduler metadata
            torch.cuda.synchronize()
            setup = time.time() - t0
            k_tot, k_split, k_comb, names = time_kineto(fn, 30)
            fm, f10, f90 = time_flushed(fn, 30)
            g = time_graph(fn, 20, 10)
            b, sq = c['batch'], c['next_n']
            attended = c['topk'] + (WINDOW if c['window'] else 0)
            gathered = b * sq * attended * ENTRY_BYTES
            flops = 2 * b * sq * c['heads'] * attended * (D_QK + D_V)
            row.update(kineto_us=f'{k_tot:.3f}', kineto_splitkv_us=f'{k_split:.3f}', kineto_combine_us=f'{k_comb:.3f}',
                       kineto_kernels=names, flushed_median_us=f'{fm:.3f}', flushed_p10_us=f'{f10:.3f}',
                       flushed_p90_us=f'{f90:.3f}', graph_us=f'{g:.3f}', graph_calls=20, reps=30,
                       num_sm_parts=max(torch.cuda.get_device_properties(0).multi_processor_count // sq // (c['heads'] // 64), 1),
                       kv_gathered_bytes=gathered, flops=flops, gbps_kineto=f'{gathered / (k_tot * 1e-6) / 1e9:.1f}',
                       tflops_kineto=f'{flops / (k_tot * 1e-6) / 1e12:.1f}', setup_s=f'{setup:.2f}', status='ok')
            print(f'[{i + 1}/{len(cs)}] {c["id"]}: kineto {k_tot:.2f} us (splitkv {k_split:.2f} + combine {k_comb:.2f}), '
                  f'flushed {fm:.2f}, graph {g:.2f}; {time.time() - t0:.1f}s', flush=True)
            del q, kvs, s, fn
        except Exception as ex:  # noqa: BLE001
            row['status'] = f'error: {str(ex).splitlines()[0][:200]}'
            print(f'[{i + 1}/{len(cs)}] {c["id"]}: {row["status"]}', flush=True)
        w.writerow(row)
        f.flush()
        torch.cuda.empty_cache()
    f.close()


if __name__ == '__main__':
    main()
