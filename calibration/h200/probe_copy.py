"""Why is a 1-2 GiB device copy slower than a 256 MiB one? A one-off probe (PyTorch + CUDA).

Times dst.copy_(src) eagerly between CUDA events (median of 10 after 3 warm-ups) for
power-of-two and padded sizes, with src and dst adjacent or 6 MiB apart, and a 1 GiB copy
done as four 256 MiB copies. Prints bytes read + written per second.

    python3 calibration/h200/probe_copy.py
"""

import statistics

import torch

MiB = 2 ** 20


def timed(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) / 1e3 for s, e in ev)


def case(label, nbytes, gap_mib=0, chunks=1):
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    spacer = torch.empty(gap_mib * MiB, device="cuda", dtype=torch.uint8) if gap_mib else None
    dst = torch.empty_like(src)
    if chunks == 1:
        t = timed(lambda: dst.copy_(src))
    else:
        s_parts, d_parts = src.chunk(chunks), dst.chunk(chunks)
        t = timed(lambda: [d.copy_(s) for s, d in zip(s_parts, d_parts)])
    off = (dst.data_ptr() - src.data_ptr()) / MiB
    print(f"{label:34s} {nbytes / MiB:7.0f} MiB  dst-src {off:8.0f} MiB  {t * 1e6:8.1f} us  {2 * nbytes / t / 1e12:5.2f} TB/s",
          flush=True)
    del src, dst, spacer
    torch.cuda.empty_cache()


if __name__ == "__main__":
    print(torch.cuda.get_device_name(0), torch.__version__)
    for mib in (256, 512, 768, 1024, 1536, 2048, 4096):
        case("adjacent", mib * MiB)
    for mib in (1024, 2048):
        case("6 MiB apart", mib * MiB, gap_mib=6)
        case("size + 6 MiB", (mib + 6) * MiB)
        case("4 chunks", mib * MiB, chunks=4)
