#!/usr/bin/env python3
"""Turn bench_deepgemm.py's raw CSV(s) + env.json into rows of the public kernel-evidence schema.

usage: python3 to_evidence.py ENV_JSON RAW_CSV [RAW_CSV ...] > deepgemm_sm90_evidence.csv

One evidence row per case and timing method (flushed CUDA events, CUDA graph, kineto) that gave a number.
Standard library only.
"""
import csv
import json
import math
import sys

HEADER = ['id', 'source_url', 'source_detail', 'gpu', 'kernel', 'precision', 'shape', 'measured_us',
          'reported_rate', 'reported_rate_unit', 'timing_method', 'notes']


SHORT = dict(fp8_gemm='fp8', grouped_gemm_masked='fp8', grouped_gemm_contiguous='fp8', mqa_logits='fp8',
             mqa_logits_paged='fp8', hc_prenorm_gemm='tf32')


def gpu_tag(name):
    n = name.lower()
    if 'h200' in n:
        return 'h200'
    if 'h100' in n:
        return 'h100'
    return n.replace(' ', '_')


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def main(argv):
    env = json.load(open(argv[1]))
    gpu = gpu_tag(env['gpu_name'])
    detail = (f"DeepGEMM {env.get('deep_gemm_commit')} (v{env.get('deep_gemm_version')}), CUTLASS {env.get('cutlass_commit', '')[:12]}, "
              f"torch {env.get('torch')} CUDA {env.get('torch_cuda')}, {env.get('deep_gemm_num_sms')} SMs; "
              f"calibration/hopper/scripts/bench_deepgemm.py")
    w = csv.writer(sys.stdout, lineterminator='\n')
    w.writerow(HEADER)
    seen = set()
    for path in argv[2:]:
        for r in csv.DictReader(open(path)):
            if r.get('status') != 'ok' or r['case_id'] in seen:
                continue
            seen.add(r['case_id'])
            flops = num(r['flops'])
            byts = num(r['bytes'])
            base = f"own-{gpu}-{r['case_id']}"
            methods = [
                ('flushed', num(r['flushed_median_us']),
                 f"CUDA events around one call, L2 flushed (256 MB memset) before each, median of {r['reps']}",
                 f"p10 {r['flushed_p10_us']} us, p90 {r['flushed_p90_us']} us; includes launch gaps of one call"),
                ('graph', num(r['graph_us']),
                 f"CUDA graph of {r.get('graph_calls') or 20} back-to-back calls / {r.get('graph_calls') or 20}, median of replays",
                 'no flush between calls: operands that fit in L2 stay there'),
                ('kineto', num(r.get('kineto_main_us') or r['kineto_us']),
                 'torch.profiler time of the main kernel, L2 flushed before each call, mean of up to 30 calls (DeepGEMM bench_kineto method)',
                 f"all kernels of the call {r['kineto_us']} us: {r['kineto_kernels']}"),
            ]
            # num_splits=0 in the raw file: the call passed none, which the interface runs as one split
            # (csrc/apis/hyperconnection.hpp line 52 @ 54e2261: num_splits.has_value() ? num_splits.value() : 1)
            shape = r['shape'].replace('num_splits=0', 'num_splits=1')
            for tag, us, method, note in methods:
                if us is None or us <= 0:
                    continue
                rate = f'{flops / us / 1e6:.2f}' if flops else ''
                bw = f"; {byts / us / 1e3:.0f} GB/s of {byts:.0f} counted bytes" if byts else ''
                w.writerow([f'{base}:{tag}', 'own run', detail, gpu, r['kernel'], SHORT.get(r['kernel'], r['precision']),
                            shape, f'{us:.3f}', rate, 'TFLOPS' if rate else '', method,
                            f"{r['name']}; {r['precision']}; {note}{bw}"])


if __name__ == '__main__':
    main(sys.argv)
