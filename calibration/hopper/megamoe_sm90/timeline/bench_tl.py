#!/usr/bin/env python3
"""Timeline of DeepGEMM's SM90 FP8 Mega MoE (qiushixiaoyu/DeepGEMM @ 820861bd3) on one GPU, one rank.

Runs the cases below with the plain or the instrumented kernel (the header that `patch_timeline.py` patched: which
one is set by PYTHONPATH, a deep_gemm package copy each, and DG_JIT_CACHE_DIR, a cache each), checks every case
against the torch reference of `bench_mega.py` (imported from beside this file), times it (kineto, L2 flushed, 30
calls; CUDA events, flushed, 30 calls) and, instrumented, records the per-CTA timeline of `--reps` single calls,
each after an L2 flush.

The timeline buffer rides on the stats tensor: `stats_full` holds `experts` ints (the kernel's
cumulative_local_expert_recv_stats, passed as the view stats_full[:experts]) and then the int64 timeline
[num_sms][slots][2] (globaltimer ns, clock64), 16-byte aligned (patch_timeline.py).

Output (under --out): tl_kineto.csv (one row per variant and case, appended), tl_raw_<variant>.csv.gz (variant,
case, rep, cta, slot, gt_ns relative to the rep's earliest kernel entry, clk raw clock64; non-zero slots only).
"""
import argparse
import csv
import gzip
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mega as bm  # noqa: E402

SLOTS = 176
CASES = [
    # name, tokens, route, experts
    ('t0', 0, 'random', 0),
    ('t1_e1', 1, 'touch', 1),
    ('t1_e6', 1, 'touch', 6),
    ('t8_e48', 8, 'touch', 48),
    ('t512', 512, 'random', 0),
]
KFIELDS = ['variant', 'model', 'case', 'tokens', 'route', 'experts_target', 'pairs', 'experts_touched', 'weight_bytes',
           'kineto_us', 'kineto_calls', 'events_median_us', 'events_p10_us', 'events_p90_us', 'check_diff', 'status',
           'tl_reps', 'tl_span_median_us', 'num_sms']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--variant', required=True, choices=['plain', 'inst'])
    ap.add_argument('--out', default=os.environ.get('OUT', '/tmp/out'))
    ap.add_argument('--reps', type=int, default=11)
    ap.add_argument('--only', default='')
    ap.add_argument('--label', default='', help='the variant column (default: --variant)')
    ap.add_argument('--model', default='v4flash', choices=sorted(bm.MODELS))
    ap.add_argument('--num-sms', type=int, default=0, help='deep_gemm.set_num_sms (default: all)')
    ap.add_argument('--raw-suffix', default='', help='tl_raw_<variant><suffix>.csv.gz')
    args = ap.parse_args()
    torch.manual_seed(0)
    import deep_gemm
    print(f'[{args.variant}] deep_gemm from {deep_gemm.__file__}; JIT cache {os.environ.get("DG_JIT_CACHE_DIR")}',
          flush=True)
    if args.num_sms:
        deep_gemm.set_num_sms(args.num_sms)
    num_sms = deep_gemm.get_num_sms()
    _C, dims, W, B = bm.setup(args.model, init=True)
    hidden, inter, E, topk = dims
    l1, l1sf, l2, l2sf, l1t = W
    buf, views, max_tokens = B
    per_expert = 3 * hidden * inter + 4 * (2 * inter // 128 * hidden // 128 + hidden // 128 * inter // 128)
    e_al = (E + 3) // 4 * 4
    stats_full = torch.zeros(e_al + num_sms * SLOTS * 2 * 2, dtype=torch.int32, device='cuda')
    stats = stats_full[:E]
    tl = stats_full[e_al:].view(torch.int64).view(num_sms, SLOTS, 2)
    assert stats.is_contiguous() and stats.numel() == E and tl.data_ptr() - stats.data_ptr() == 4 * e_al

    kpath = os.path.join(args.out, 'tl_kineto.csv')
    new = not os.path.exists(kpath)
    kf = open(kpath, 'a', newline='')
    kw = csv.DictWriter(kf, fieldnames=KFIELDS)
    if new:
        kw.writeheader()
    rf = gzip.open(os.path.join(args.out, f'tl_raw_{args.variant}{args.raw_suffix}.csv.gz'), 'wt', newline='') \
        if args.variant == 'inst' else None
    rw = csv.writer(rf) if rf else None
    if rw:
        rw.writerow(['variant', 'case', 'rep', 'cta', 'slot', 'gt_ns', 'clk'])
    gen = torch.Generator(device='cuda').manual_seed(7)
    only = set(filter(None, args.only.split(',')))
    for name, T, route, ne in CASES:
        if only and name not in only:
            continue
        t0 = time.time()
        c = dict(model=args.model, tokens=T, route=route, experts=ne)
        row = dict(variant=args.label or args.variant, model=args.model, case=name, tokens=T, route=route, experts_target=ne, num_sms=num_sms)
        try:
            if T > 0:
                idx, w = bm.routing(c, E, topk, gen)
            else:
                idx = torch.empty((0, topk), dtype=torch.long, device='cuda')
                w = torch.empty((0, topk), dtype=torch.float, device='cuda')
            valid = idx[idx >= 0]
            pairs, touched = int(valid.numel()), int(torch.unique(valid).numel())
            row.update(pairs=pairs, experts_touched=touched, weight_bytes=touched * per_expert)
            xq, xsf = bm.per_token_fp8(torch.randn((T, hidden), device='cuda', dtype=torch.bfloat16))
            bm.load_inputs(views, xq, xsf, idx, w)
            y = torch.empty((T, hidden), dtype=torch.bfloat16, device='cuda')

            def fn():
                _C.fp8_mega_moe(y, (l1t, l1sf), (l2, l2sf), stats, buf, [buf.data_ptr()], 0, max_tokens, E, topk,
                                (128, 128, 128), 'swiglu', bm.CLAMP, True)

            y.fill_(float('nan'))
            fn()
            torch.cuda.synchronize()
            ref = bm.reference(xq, xsf, idx, w, l1, l1sf, l2, l2sf, inter)
            ok_nan = not torch.isnan(y).any().item()
            diff = bm.calc_diff(y.float(), ref) if ok_nan else float('nan')
            row['check_diff'] = f'{diff:.2e}'
            row['status'] = 'ok' if (ok_nan and diff < 5e-3) else 'check_failed'
            k_us, k_n, other = bm.time_kineto(fn, 30)
            fm, f10, f90 = bm.time_flushed(fn, 30)
            row.update(kineto_us=round(k_us, 3), kineto_calls=k_n, events_median_us=round(fm, 3),
                       events_p10_us=round(f10, 3), events_p90_us=round(f90, 3))
            if rw:
                flush = bm.flush_buffer()
                spans = []
                for rep in range(args.reps):
                    flush.zero_()
                    tl.zero_()
                    fn()
                    torch.cuda.synchronize()
                    a = tl.cpu().numpy()
                    ent = a[:, 0, 0]
                    assert (ent > 0).all(), f'{name}: {int((ent == 0).sum())} CTAs without an entry stamp'
                    base = int(ent.min())
                    last = int(max(a[:, s, 0].max() for s in (17, 23, 28, 43, 44)))
                    spans.append((last - base) / 1e3)
                    ctas, slots = ((a[:, :, 0] != 0) | (a[:, :, 1] != 0)).nonzero()
                    g = a[ctas, slots, 0].copy()
                    timed = (slots < 45) | (slots > 47)   # 45-47 hold counts, not times
                    g[timed] -= base
                    rw.writerows(zip([args.variant] * len(ctas), [name] * len(ctas), [rep] * len(ctas),
                                     ctas.tolist(), slots.tolist(), g.tolist(), a[ctas, slots, 1].tolist()))
                row.update(tl_reps=args.reps, tl_span_median_us=round(statistics.median(spans), 3))
            torch.cuda.synchronize()
        except Exception as e:
            row['status'] = f'error {type(e).__name__}: {str(e)[:200]}'.replace(',', ';').replace('\n', ' ')
        kw.writerow(row)
        kf.flush()
        print(f"[{args.variant}] {name:7s} pairs {row.get('pairs', '-'):>5} touched {row.get('experts_touched', '-'):>4} "
              f"kineto {row.get('kineto_us', '-'):>9} events {row.get('events_median_us', '-'):>9} "
              f"tl span {row.get('tl_span_median_us', '-'):>8} diff {row.get('check_diff', '-')} {row['status']} "
              f"({time.time() - t0:.1f}s)", flush=True)
    kf.close()
    if rf:
        rf.close()


if __name__ == '__main__':
    main()
