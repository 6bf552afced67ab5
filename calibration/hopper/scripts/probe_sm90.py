"""How DeepGEMM's SM90 FP8 GEMM streams its weights at one token: kineto kernel time over K and N (block_n and the
CTA count follow N), and over the SMs it may use (deep_gemm.set_num_sms) at one shape. Cases and timing helpers from
bench_deepgemm.py.  usage: probe_sm90.py warm SHARD NSHARDS | time OUT_CSV"""
import csv
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_deepgemm as B  # noqa: E402
import deep_gemm  # noqa: E402
import torch  # noqa: E402

CASES = [dict(m=1, n=n, k=k, sms=132) for n in (128, 2048, 4608, 8192, 16384) for k in (1024, 2048, 4096, 8192)]
CASES += [dict(m=1, n=4096, k=4096, sms=s) for s in (8, 16, 32, 66)]   # (num_sms must be even: config.hpp:47)
CASES += [dict(m=m, n=2048, k=4096, sms=132) for m in (16, 32, 64)]


if os.environ.get('PROBE_REST'):   # a second call on the same machine: only the cases after the first 22
    CASES = CASES[22:]


def run(c):
    deep_gemm.set_num_sms(c['sms'])
    B.seed(1)
    fn, check, info = B.build_fp8_gemm(dict(shape=dict(m=c['m'], n=c['n'], k=c['k'])))
    return fn, check, info


def main():
    mode = sys.argv[1]
    if mode == 'warm':
        shard, nshards = int(sys.argv[2]), int(sys.argv[3])
        for i, c in enumerate(CASES):
            if i % nshards != shard:
                continue
            fn, check, _ = run(c)
            print('warm', c, f'diff {check():.2e}', flush=True)
        return
    out = sys.argv[2]
    with open(out, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=['m', 'n', 'k', 'sms', 'kineto_us', 'kineto_main_us', 'graph_us', 'kernels', 'bytes'])
        w.writeheader()
        for c in CASES:
            fn, check, info = run(c)
            fn()
            torch.cuda.synchronize()
            tot, main_us, names = B.time_kineto(fn, reps=30)
            g = B.time_graph(fn, calls=20, replays=5)
            row = dict(c, kineto_us=f'{tot:.3f}', kineto_main_us=f'{main_us:.3f}', graph_us=f'{g:.3f}', kernels=names,
                       bytes=info['bytes'])
            w.writerow(row)
            f.flush()
            print(row, flush=True)
    deep_gemm.set_num_sms(132)


if __name__ == '__main__':
    main()
