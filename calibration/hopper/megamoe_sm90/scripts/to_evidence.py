#!/usr/bin/env python3
"""Turn bench_mega.py's raw CSV(s) + env.json into rows of the kernel-evidence schema (calibration/public/kernels.csv).

usage: python3 to_evidence.py [--no-header] [--tag TAG] ENV_JSON RAW_CSV [RAW_CSV ...] >> megamoe_sm90_evidence.csv

TAG (e.g. run2) goes into the ids of a later call's rows; a raw file whose name holds `_noswap` was timed with the
swapAB decode path switched off (DG_SM90_MEGA_NO_SWAP_AB=1, scripts/patch_pybind.py), `_probe` on fewer SMs too.
Cases whose output failed the check against the torch reference are kept (they were timed), marked in `notes`.

One row per case and timing method that gave a number (kineto: the primary row; flushed CUDA events; CUDA graph).
Kernel `mega_moe_sm90`: DeepGEMM PR #323's SM90 FP8 Mega MoE, one rank holding every expert. Standard library only.
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
    header = '--no-header' not in argv
    argv = [a for a in argv if a != '--no-header']
    tag = ''
    if '--tag' in argv:
        i = argv.index('--tag')
        tag = argv[i + 1] + ':'
        argv = argv[:i] + argv[i + 2:]
    env = json.load(open(argv[1]))
    gpu = gpu_tag(env['gpu_name'])
    detail = (f"DeepGEMM PR #323 fork {env.get('deep_gemm_repo')} @ {env.get('deep_gemm_commit')} (SM90 FP8 Mega MoE, "
              f"sm90_fp8_mega_moe.cuh; host built with setup.py + calibration/hopper/megamoe_sm90/scripts/patch_pybind.py), "
              f"CUTLASS {str(env.get('cutlass_commit'))[:12]}, torch {env.get('torch')} CUDA {env.get('torch_cuda')}, "
              f"{env.get('deep_gemm_num_sms')} SMs; one process, num_ranks=1; "
              f"calibration/hopper/megamoe_sm90/scripts/bench_mega.py")
    w = csv.writer(sys.stdout, lineterminator='\n')
    if header:
        w.writerow(HEADER)
    seen = set()
    for path in argv[2:]:
        variant = 'noswap:' if '_noswap' in path else 'probe:' if '_probe' in path else ''
        for r in csv.DictReader(open(path)):
            key = (variant, r['case_id'], r.get('num_sms', '132'))
            # the 0-token probe (the fixed part alone) stays in its raw file: the schema takes positive sizes only
            if r.get('status') not in ('ok', 'check_failed') or key in seen or r['tokens'] == '0':
                continue
            seen.add(key)
            sms = int(r.get('num_sms') or 132)
            flops, wbytes = num(r['flops']), num(r['weight_bytes'])
            shape = (f"tokens_per_rank={r['tokens']};num_sms={sms};experts={r['num_experts']};top_k={r['topk']};hidden={r['hidden']};"
                     f"intermediate={r['intermediate']};ep=1;experts_touched={r['experts_touched']};pairs={r['pairs']}")
            route = ('random top-6 of uniform scores' if r['route'] == 'random' else
                     f"{r['experts_target']} chosen experts, each token's min(6, {r['experts_target']}) slots dealt "
                     f"round-robin over them, the other slots -1")
            base = (f"own-{gpu}-mega_moe_sm90:{tag}{variant}{r['case_id'].replace(':', '_')}"
                    + (f"_sms{sms}" if sms != 132 else ''))
            how = ('swapAB decode path off (DG_SM90_MEGA_NO_SWAP_AB=1); ' if variant == 'noswap:' else
                   'heuristic defaults (swapAB at <= 128 tokens); ')
            if sms != 132:
                how += f'deep_gemm.set_num_sms({sms}); '
            check = (f"check vs torch reference diff {r['check_diff']}" if r['status'] == 'ok' else
                     f"CHECK FAILED: output vs torch reference diff {r['check_diff']} (timed all the same)")
            methods = [
                ('kineto', num(r['kineto_us']),
                 f"torch.profiler duration of sm90_fp8_mega_moe_impl, L2 flushed (256 MB memset) before each call, "
                 f"mean of {r['kineto_calls']} calls", ''),
                ('flushed', num(r['flushed_median_us']),
                 'CUDA events around one call, L2 flushed (256 MB memset) before each, median of 30',
                 f"p10 {r['flushed_p10_us']} us, p90 {r['flushed_p90_us']} us; holds the eager launch"),
                ('graph', num(r['graph_us']),
                 f"CUDA graph of {r['graph_calls']} back-to-back calls / {r['graph_calls']}, median of 10 replays",
                 'no flush between calls: weights that fit in L2 stay there'),
            ]
            for how_timed, us, method, note in methods:
                if us is None or us <= 0:
                    continue
                rate = f'{flops / us / 1e6:.3f}' if flops else ''
                bw = (f"{wbytes / us / 1e3:.0f} GB/s of {wbytes:.0f} expert-weight bytes (FP8 + FP32 block scales)"
                      if wbytes else 'no expert touched')
                w.writerow([f'{base}:{how_timed}', 'own run', detail, gpu, 'mega_moe_sm90', 'fp8', shape, f'{us:.3f}', rate,
                            'TFLOPS' if rate else '', method,
                            f"{how}routing: {route}; {check}; {bw}"
                            + (f"; {note}" if note else '')])


if __name__ == '__main__':
    main(sys.argv)
