#!/usr/bin/env python3
"""Read the per-CTA timeline of the SM90 Mega MoE (bench_tl.py's tl_raw_inst.csv.gz, tl_kineto.csv) and print, per
case, the call's critical path (each event: median over CTAs and the slowest CTA, then the median over repeats), the
weight stream (first TMA issue, stage latencies, bytes landed under the chain and after it) and the cost of the
instrumentation (kineto time instrumented / plain).

    python3 analyze_tl.py DIR [SUFFIX]   (DIR holds tl_raw_inst<SUFFIX>.csv.gz and tl_kineto.csv; the second call's
                                         files are tl_raw_inst_v41.csv.gz and tl_raw_inst_sms66.csv.gz)

Times: globaltimer (ns, one clock for every SM) is the time axis. clock64 (per SM) is used only to check it: its
rate per CTA (cycles per ns between the CTA's first and last event) and the spread of (globaltimer - clock64 / f)
inside a CTA, which bounds the globaltimer's resolution. Stdlib + numpy.
"""
import csv
import gzip
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from patch_timeline import EVENTS, NUM_EVENTS, NUM_TRACE  # noqa: E402

SLOT = {n: s for n, s, _ in EVENTS}
ISSUE0, LAND0 = NUM_EVENTS, NUM_EVENTS + NUM_TRACE
COUNT_SLOTS = (SLOT['C_BLOCKS'], SLOT['C_KBLOCKS'], SLOT['C_PULLS'])
STAGES = 8                         # V4-Flash, swapAB off: 8 stages (heuristics/sm90_mega_moe.hpp l.123-133)
STAGE_WEIGHT_BYTES = 128 * 128     # block_n x block_k FP8 weights per stage
STAGE_TOKEN_BYTES = 64 * 128       # block_m x block_k FP8 tokens per stage (+ SFs)
CASE_ORDER = ['t0', 't1_e1', 't1_e6', 't8_e48', 't512']

# the critical-path events, in the order the code reaches them
PATH = [
    ('ENTRY', 'kernel entry'),
    ('D_COUNT', 'expert counts in smem'),
    ('D_OFFSETS', 'per-SM offsets (global atomics)'),
    ('D_SRCIDX', 'source indices written'),
    ('D_GRIDSYNC', 'grid sync 1 released'),
    ('D_COUNTS_SENT', 'counts sent (SM 0) + sync'),
    ('B_FIRST_BLOCK', 'weight warp: counts fetched, first block'),
    ('B_FIRST_ISSUE', 'first weight TMA issued'),
    ('D_NVL_PULL', 'NVLink barrier before pulls released'),
    ('M_START', 'math warps start (named barrier)'),
    ('D_PULL_START', 'pulls start'),
    ('D_PULL_FIRST_W0', 'first pull landed (warp 0)'),
    ('D_PULL_LAST_W0', 'last pull released (warp 0)'),
    ('D_PULL_LAST_W1', 'last pull released (warp 1)'),
    ('A_L1_READY', 'first L1 block: tokens arrived'),
    ('M_L1_FIRST_FULL', 'first L1 stage landed (first L1 MMA)'),
    ('M_L1_FIRST_DONE', 'first L1 block MMAs done'),
    ('M_L1_LAST_DONE', 'last L1 block MMAs done'),
    ('M_L1_EPI_DONE', 'last L1 epilogue released'),
    ('B_FIRST_L2_ISSUE', 'first L2 weight TMA issued'),
    ('A_L2_WAIT', 'first L2 block: hand-off wait starts'),
    ('A_L2_READY', 'first L2 block: L1 outputs arrived'),
    ('M_L2_FIRST_FULL', 'first L2 stage landed (first L2 MMA)'),
    ('M_L2_LAST_DONE', 'last L2 block MMAs done'),
    ('M_L2_EPI_DONE', 'last L2 epilogue (scatter) done'),
    ('B_LAST_ISSUE', 'last weight TMA issued'),
    ('B_DONE', 'weight warp done'),
    ('M_GEMM_DONE', 'math: GEMMs done'),
    ('M_NVL_COMBINE', 'NVLink barrier before combine released'),
    ('M_COMBINE_SYNC', 'combine starts'),
    ('M_COMBINE_END_MAX', 'combine done (any warp)'),
    ('D_LOOP_END_W0', 'dispatch pull loop left (warp 0)'),
    ('D_CLEAN_SYNC', 'dispatch: clean starts'),
    ('D_CLEAN_DONE', 'dispatch: clean done'),
    ('D_EXIT', 'dispatch: last NVLink barrier done'),
]
END_SLOTS = [SLOT[n] for n in ('D_EXIT', 'A_DONE', 'B_DONE', 'M_COMBINE_END_MAX', 'M_COMBINE_END_W0')]


def load(d, suffix=''):
    raw = {}
    with gzip.open(os.path.join(d, f'tl_raw_inst{suffix}.csv.gz'), 'rt') as f:
        for r in csv.DictReader(f):
            key = (r['case'], int(r['rep']))
            raw.setdefault(key, {}).setdefault(int(r['cta']), {})[int(r['slot'])] = (int(r['gt_ns']), int(r['clk']))
    kin = list(csv.DictReader(open(os.path.join(d, 'tl_kineto.csv'))))
    return raw, kin


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return '-' if x is None else f'{x:.{nd}f}'


def rep_stats(ctas):
    """One repeat: per path event, (median over CTAs, max over CTAs, number of CTAs) in us; plus stream facts."""
    out = {}
    for name, _ in PATH:
        s = SLOT[name]
        v = [c[s][0] / 1e3 for c in ctas.values() if s in c]
        out[name] = (statistics.median(v), max(v), len(v)) if v else (None, None, 0)
    end = max(c[s][0] for c in ctas.values() for s in END_SLOTS if s in c) / 1e3
    out['END'] = (end, end, len(ctas))
    # clock check: cycles per ns over each CTA's span, and the residual of globaltimer against clock64
    rates, resid = [], []
    for c in ctas.values():
        pts = sorted((g, k) for s, (g, k) in c.items() if s not in COUNT_SLOTS and s != SLOT['M_COMBINE_END_MAX'] and k)
        if len(pts) >= 3 and pts[-1][0] - pts[0][0] > 20000:
            f = (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
            rates.append(f)
            off = [g - (k - pts[0][1]) / f for g, k in pts]
            m = statistics.median(off)
            resid += [abs(o - m) for o in off]
    out['clock_ghz'] = statistics.median(rates) if rates else None
    out['gt_resid_p90_ns'] = float(np.percentile(resid, 90)) if resid else None
    # weight stream: per CTA with weight loads
    chain_end, issued, issued_before, lands_after, lat0, lat_ss, gaps = [], 0, 0, 0, [], [], []
    for c in ctas.values():
        n_issue = c.get(SLOT['C_KBLOCKS'], (0, 0))[0]
        if not n_issue:
            continue
        iss = [c[ISSUE0 + k][0] for k in range(NUM_TRACE) if ISSUE0 + k in c]
        lan = [c[LAND0 + k][0] for k in range(NUM_TRACE) if LAND0 + k in c]
        ready = [c[s][0] for s in (SLOT['M_START'], SLOT['A_L1_READY']) if s in c]
        if SLOT['A_L1_READY'] not in c and SLOT['A_L2_READY'] in c:
            ready.append(c[SLOT['A_L2_READY']][0])
        ce = max(ready) if ready else None
        chain_end.append(ce)
        issued += n_issue
        if ce is not None:
            issued_before += sum(1 for t in iss if t < ce)
            lands_after += sum(1 for t in lan if t >= ce)
        n = min(len(iss), len(lan))
        if n:
            lat0.append((lan[0] - iss[0]) / 1e3)
        for k in range(STAGES, n):
            lat_ss.append((lan[k] - iss[k]) / 1e3)
        for k in range(1, len(lan)):
            gaps.append((lan[k] - lan[k - 1]) / 1e3)
    out['stream'] = dict(ctas=len(chain_end), issued=issued, issued_before_ready=issued_before,
                         chain_end_med=med([x / 1e3 for x in chain_end if x is not None]),
                         first_land_minus_issue_med=med(lat0), steady_land_minus_issue_med=med(lat_ss),
                         land_gap_med=med(gaps))
    return out


GROUP_EVENTS = ['D_GRIDSYNC', 'D_NVL_PULL', 'B_FIRST_BLOCK', 'B_FIRST_ISSUE', 'A_L1_READY', 'M_L1_FIRST_FULL',
                'M_L1_LAST_DONE', 'M_L1_EPI_DONE', 'A_L2_WAIT', 'A_L2_READY', 'M_L2_FIRST_FULL', 'M_L2_LAST_DONE',
                'B_DONE', 'M_GEMM_DONE', 'D_LOOP_END_W0', 'M_NVL_COMBINE', 'M_COMBINE_END_MAX', 'D_EXIT']


def group_table(raw, case):
    """CTAs grouped by the blocks they ran (linear-1 / linear-2 counts): each event's median over the group's CTAs
    and repeats / its maximum; and the gap between consecutive stages' full-barrier returns (the consumer's pace)."""
    reps = sorted(r for (c, r) in raw if c == case)
    groups, gaps = {}, []
    for r in reps:
        for c in raw[(case, r)].values():
            nb = c.get(SLOT['C_BLOCKS'], (0, 0))
            groups.setdefault(f'{nb[0]} L1 / {nb[1]} L2', []).append(c)
            lan = [c[LAND0 + k][0] for k in range(NUM_TRACE) if LAND0 + k in c]
            gaps += [(lan[k] - lan[k - 1]) / 1e3 for k in range(1, len(lan))]
    print(f'CTAs by blocks run (median / max over the group\'s CTAs and {len(reps)} repeats, us):')
    print('| event | ' + ' | '.join(f'{k} ({len(v) // len(reps)} CTAs)' for k, v in sorted(groups.items())) + ' |')
    print('|---|' + '---|' * len(groups))
    for name in GROUP_EVENTS:
        s = SLOT[name]
        cells = []
        for k, cs in sorted(groups.items()):
            v = [c[s][0] / 1e3 for c in cs if s in c]
            cells.append(f'{statistics.median(v):.1f} / {max(v):.1f}' if v else '-')
        if any(x != '-' for x in cells):
            print(f'| `{name}` | ' + ' | '.join(cells) + ' |')
    if gaps:
        print(f'consecutive stages consumed (full-barrier returns): median gap {statistics.median(gaps):.3f} us, '
              f'p10 {np.percentile(gaps, 10):.3f}, p90 {np.percentile(gaps, 90):.3f} ({len(gaps)} gaps)')


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else '.'
    suffix = sys.argv[2] if len(sys.argv) > 2 else ''
    raw, kin = load(d, suffix)
    labels = {'': ('plain', 'inst', 'plain2'), '_v41': ('plain_v41', 'inst_v41', None),
              '_sms66': ('plain_sms66', 'inst_sms66', None)}[suffix]
    print(f'# Kineto time per call (us), plain vs instrumented (same card, in this order: {", ".join(filter(None, labels))})')
    print('| case | pairs | experts | plain | inst | plain2 | inst / mean(plain, plain2) - 1 | check (inst) |')
    print('|---|---|---|---|---|---|---|---|')
    by = {(r['variant'], r['case']): r for r in kin}
    for case in CASE_ORDER:
        p, i, p2 = by.get((labels[0], case)), by.get((labels[1], case)), by.get((labels[2], case))
        if not i:
            continue
        pv = [float(r['kineto_us']) for r in (p, p2) if r and r.get('kineto_us')]
        iv = float(i['kineto_us']) if i.get('kineto_us') else None
        ratio = (iv / statistics.mean(pv) - 1) * 100 if pv and iv else None
        print(f"| {case} | {i['pairs']} | {i['experts_touched']} | {p['kineto_us'] if p else '-'} | {i['kineto_us']} | "
              f"{p2['kineto_us'] if p2 else '-'} | {fmt(ratio, 1)}% | {i['status']} {i['check_diff']} |")
    print()
    for case in CASE_ORDER:
        reps = sorted(r for (c, r) in raw if c == case)
        if not reps:
            continue
        st = [rep_stats(raw[(case, r)]) for r in reps]
        print(f'## {case}: {len(reps)} repeats; times in us from the earliest CTA entry; median over repeats of '
              f'(median over CTAs, slowest CTA)')
        print(f"clock64 rate {fmt(med([s['clock_ghz'] for s in st]), 3)} GHz; globaltimer vs clock64 residual p90 "
              f"{fmt(med([s['gt_resid_p90_ns'] for s in st]), 0)} ns; span entry -> last event "
              f"{fmt(med([s['END'][0] for s in st]), 1)} us")
        print('| event | CTAs | median CTA | slowest CTA |')
        print('|---|---|---|---|')
        for name, label in PATH:
            m = med([s[name][0] for s in st])
            x = med([s[name][1] for s in st])
            n = med([s[name][2] for s in st])
            if m is None:
                continue
            print(f'| {label} (`{name}`) | {int(n)} | {fmt(m)} | {fmt(x)} |')
        print(f"| last event of the call | | | {fmt(med([s['END'][0] for s in st]))} |")
        sm = [s['stream'] for s in st]
        keys = ['ctas', 'issued', 'issued_before_ready', 'chain_end_med', 'first_land_minus_issue_med',
                'steady_land_minus_issue_med', 'land_gap_med']
        print('stream: ' + ', '.join(f'{k} {fmt(med([x[k] for x in sm]), 2)}' for k in keys))
        print()
        group_table(raw, case)
        print()


if __name__ == '__main__':
    main()
