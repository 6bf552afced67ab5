#!/usr/bin/env python3
"""Turn bench_flashmla.py's raw CSV + env.json into rows of the public kernel-evidence schema (kernel
sparse_mla_decode). usage: python3 to_evidence.py ENV_JSON RAW_CSV [ENV_JSON RAW_CSV ...] > flashmla_sm90_evidence.csv

One evidence row per case and timing method (kineto, flushed CUDA events, CUDA graph). Shape keys: batch (sequences),
heads, seq_q (next_n), topk_tokens (the indexer's selection), window_tokens (the sliding window, a second cache),
context (entries a sequence has cached), head_dim / head_dim_v (512: FlashMLA's MODEL1 format). Standard library only.
"""
import csv
import json
import math
import sys

HEADER = ['id', 'source_url', 'source_detail', 'gpu', 'kernel', 'precision', 'shape', 'measured_us',
          'reported_rate', 'reported_rate_unit', 'timing_method', 'notes']


def gpu_tag(name):
    n = name.lower()
    return 'h200' if 'h200' in n else 'h100' if 'h100' in n else n.replace(' ', '_')


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def main(argv):
    w = csv.writer(sys.stdout, lineterminator='\n')
    w.writerow(HEADER)
    seen = set()   # (gpu, case): a case timed again in a later call keeps the first call's row
    for env_path, raw_path in zip(argv[1::2], argv[2::2]):
        env = json.load(open(env_path))
        gpu = gpu_tag(env['gpu_name'])
        detail = (f"FlashMLA {env.get('flashmla_commit')} (SM90 sparse FP8 decode, MODEL1 cache format, 64 heads; "
                  f"own build: calibration/hopper/flashmla/scripts/setup_sm90.py), CUTLASS {env.get('cutlass_commit', '')[:12]}, "
                  f"torch {env.get('torch')} CUDA {env.get('torch_cuda')}, {env.get('sm_count')} SMs; "
                  f"calibration/hopper/flashmla/scripts/bench_flashmla.py")
        for r in csv.DictReader(open(raw_path)):
            if r.get('status') != 'ok' or (gpu, r['case_id']) in seen:
                continue
            seen.add((gpu, r['case_id']))
            shape = (f"batch={r['batch']};heads={r['heads']};seq_q={r['next_n']};topk_tokens={r['topk']};"
                     f"window_tokens={r['window'] or 0};context={r['context']};head_dim=512;head_dim_v=512")
            shape = shape.replace(';window_tokens=0;', ';')   # (a shape size must be positive: no window, no key)
            flops = num(r['flops'])
            base = f"own-{gpu}-sparse_mla_decode:{r['case_id']}"
            kernels = f"splitkv {r['kineto_splitkv_us']} us + combine {r['kineto_combine_us']} us"
            methods = [
                ('kineto', num(r['kineto_us']),
                 'torch.profiler kernel time of one call (the split-KV kernel + the combine kernel), L2 flushed '
                 '(256 MB memset) before each call, mean of 30 calls',
                 f"{kernels}; num_sm_parts {r['num_sm_parts']}; the scheduler-metadata kernel ran once (not timed)"),
                ('flushed', num(r['flushed_median_us']),
                 f"CUDA events around one call, L2 flushed (256 MB memset) before each, median of {r['reps']}",
                 f"p10 {r['flushed_p10_us']} us, p90 {r['flushed_p90_us']} us; holds the launch gap between the two kernels"),
                ('graph', num(r['graph_us']),
                 f"CUDA graph of {r['graph_calls']} back-to-back calls / {r['graph_calls']}, median of replays",
                 'no flush between calls: the gathered entries that fit in L2 stay there'),
            ]
            for tag, us, method, note in methods:
                if us is None or us <= 0:
                    continue
                rate = f'{flops / us / 1e6:.2f}' if flops else ''
                byts = num(r['kv_gathered_bytes'])
                bw = f"; {byts / us / 1e3:.0f} GB/s of {byts:.0f} gathered KV bytes (584 B an entry)" if byts else ''
                w.writerow([f'{base}:{tag}', 'own run', detail, gpu, 'sparse_mla_decode', 'fp8_kv_bf16_mma', shape,
                            f'{us:.3f}', rate, 'TFLOPS' if rate else '', method,
                            f"FP8 MODEL1 cache (448 FP8 + 64 BF16 RoPE + 7 UE8M0 scales) dequantised to BF16 for BF16 "
                            f"WGMMAs, attention sink on; random top-k within the context; {note}{bw}"])


if __name__ == '__main__':
    main(sys.argv)
