"""A second probe of DeepGEMM's SM90 FP8 GEMM at one token: kineto kernel time over K = 512..16384 (x2) at N = 128
(8 CTAs of 16 columns) and N = 2048, on all SMs, to separate a per-K-block chain (a fixed time per 128-deep K block
of a CTA) from the memory stream (bytes over a rate). Cases and timing helpers from bench_deepgemm.py (its folder in
DG_BENCH_DIR).  usage: probe2_sm90.py warm SHARD NSHARDS | time OUT_CSV"""
import csv
import os
import sys

sys.path.insert(0, os.environ.get('DG_BENCH_DIR', os.path.dirname(os.path.abspath(__file__))))
import bench_deepgemm as B  # noqa: E402
import deep_gemm  # noqa: E402
import torch  # noqa: E402

CASES = [dict(m=1, n=n, k=k, sms=132) for n in (128, 2048) for k in (512, 1024, 2048, 4096, 8192, 16384)]


def run(c):
    deep_gemm.set_num_sms(c['sms'])
    B.seed(1)
    return B.build_fp8_gemm(dict(shape=dict(m=c['m'], n=c['n'], k=c['k'])))


def main():
    mode = sys.argv[1]
    if mode == 'warm':
        shard, nshards = int(sys.argv[2]), int(sys.argv[3])
        for i, c in enumerate(CASES):
            if i % nshards == shard:
                fn, check, _ = run(c)
                print('warm', c, f'diff {check():.2e}', flush=True)
        return
    with open(sys.argv[2], 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=['m', 'n', 'k', 'sms', 'kineto_us', 'kineto_main_us', 'graph_us', 'kernels',
                                          'bytes', 'gpu'])
        w.writeheader()
        for c in CASES:
            fn, check, info = run(c)
            fn()
            torch.cuda.synchronize()
            tot, main_us, names = B.time_kineto(fn, reps=30)
            g = B.time_graph(fn, calls=20, replays=5)
            row = dict(c, kineto_us=f'{tot:.3f}', kineto_main_us=f'{main_us:.3f}', graph_us=f'{g:.3f}', kernels=names,
                       bytes=info['bytes'], gpu=torch.cuda.get_device_name(0))
            w.writerow(row)
            f.flush()
            print(row, flush=True)


if __name__ == '__main__':
    main()
