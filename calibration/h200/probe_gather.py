"""Probe of 2026-12-02: a sparse decode gather with a kernel's batch, against Little's law.

Run on the lent H200 from the repository root: ``python3 calibration/h200/probe_gather.py OUT_DIR``.

A Triton kernel runs one program (CTA) per query row. Each program walks its row's `topk` indices in chunks of
`B` (as a sparse decode kernel gathers B top-k entries per stage): it loads the B indices, then the B entries at
those places of a 2^21-entry KV pool (int32 words), and sums them (so that the loads are used). With
``num_stages = 1`` a program has about B entries in flight; with ``num_stages = 3`` Triton pipelines the chunk
loop (up to ~3 B). Entry sizes: 288 B (V4.1's FP4 entry), 576 B and 656 B (FlashMLA's V3.2 FP8 entry); 1-384
query rows; top-k 512 and 2048. The result of every configuration is checked against torch (index_select, then
the sum). Times: triton.testing.do_bench median, L2 flushed before each call.

Little's law: entries in flight over the GPU = rate (entries/s) x HBM latency; per active SM = that / min(rows,
SMs). A 2^16-entry pool (top-k 512 only; from HBM too: L2 is flushed) tells how much the large pool's
scattered pages (TLB misses) add to each gather's latency. torch.index_select of the same selection is timed beside it (the layer's `gather` rows ran ~1.6 G entries/s).
Prints a table; writes gather.csv and gather.env.json under OUT_DIR.
"""

from __future__ import annotations

import csv
import json
import platform
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

POOLS = (1 << 21, 1 << 16)   # entries: a large pool (0.6-1.4 GB) and one of 19-43 MB, whose pages the TLB covers
ENTRY_BYTES = (288, 576, 656)
BATCHES = (1, 8, 64)
STAGES = (1, 3)
ROWS = (1, 8, 32, 132, 384)
TOPKS = (512, 2048)
HBM_LATENCY_S = 4.11e-7   # hardware/h200.toml hbm_latency_s (calibrated): to read the rates as entries in flight


@triton.jit
def gather_kernel(pool, idx, out, topk, words: tl.constexpr, B: tl.constexpr, W: tl.constexpr,
                  STAGES_: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, W)
    col_ok = cols < words
    acc = tl.zeros((W,), dtype=tl.int32)
    for start in tl.range(0, topk, B, num_stages=STAGES_):
        sel = tl.load(idx + row * topk + start + tl.arange(0, B))
        ptrs = pool + sel.to(tl.int64)[:, None] * words + cols[None, :]
        vals = tl.load(ptrs, mask=col_ok[None, :], other=0)
        acc += tl.sum(vals, axis=0)
    tl.store(out + row * W + cols, acc, mask=col_ok)


def reference(pool32, idx, words, W):
    got = torch.index_select(pool32, 0, idx.flatten()).view(idx.shape[0], idx.shape[1], words)
    s = got.to(torch.int64).sum(dim=1) & 0xFFFFFFFF
    ref = torch.zeros(idx.shape[0], W, dtype=torch.int64, device=idx.device)
    ref[:, :words] = s
    return ref


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    gen = torch.Generator(device=dev).manual_seed(0)
    rows_out = []
    t0 = time.time()
    for pool_entries in POOLS:
      for entry in ENTRY_BYTES:
        words = entry // 4
        W = triton.next_power_of_2(words)
        pool32 = torch.randint(-2 ** 31, 2 ** 31 - 1, (pool_entries, words), dtype=torch.int32, device=dev,
                               generator=gen)
        for topk in TOPKS if pool_entries == POOLS[0] else TOPKS[:1]:
            for rows in ROWS:
                idx = torch.randint(0, pool_entries, (rows, topk), dtype=torch.int32, device=dev, generator=gen)
                ref = reference(pool32, idx, words, W)
                flat = idx.flatten()
                ms_torch = triton.testing.do_bench(lambda: torch.index_select(pool32, 0, flat), return_mode="median")
                for B in BATCHES:
                    for st in STAGES:
                        o = torch.empty(rows, W, dtype=torch.int32, device=dev)

                        def call():
                            gather_kernel[(rows,)](pool32, idx, o, topk, words=words, B=B, W=W, STAGES_=st,
                                                   num_warps=4)

                        call()
                        torch.cuda.synchronize()
                        ok = bool(torch.equal(o[:, :words].to(torch.int64) & 0xFFFFFFFF, ref[:, :words]))
                        ms = triton.testing.do_bench(call, return_mode="median")
                        entries = rows * topk
                        rate = entries / (ms * 1e-3)
                        in_flight_sm = rate * HBM_LATENCY_S / min(rows, sms)
                        rows_out.append({"pool_entries": pool_entries, "entry_bytes": entry, "topk": topk, "rows": rows, "batch": B, "stages": st,
                                         "time_s": ms * 1e-3, "entries_per_s": rate, "bytes_per_s": rate * entry,
                                         "in_flight_entries_per_active_sm": in_flight_sm,
                                         "torch_index_select_s": ms_torch * 1e-3, "correct": ok})
        pool32 = idx = ref = None   # (freed before the next pool)
        torch.cuda.empty_cache()
    with open(out / "gather.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows_out[0]))
        w.writeheader()
        w.writerows(rows_out)
    env = {"device": props.name, "sm_count": sms, "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "pool_entries": POOLS,
           "hbm_latency_s_assumed": HBM_LATENCY_S, "wall_s": time.time() - t0,
           "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    (out / "gather.env.json").write_text(json.dumps(env, indent=1))
    print(f"{'pool':>8} {'E(B)':>5} {'topk':>5} {'rows':>5} {'B':>3} {'st':>2} {'time us':>9} {'G ent/s':>8} {'TB/s':>6} "
          f"{'ent/SM':>7} {'torch us':>9} ok")
    for r in rows_out:
        print(f"{r['pool_entries']:>8} {r['entry_bytes']:>5} {r['topk']:>5} {r['rows']:>5} {r['batch']:>3} {r['stages']:>2} "
              f"{r['time_s'] * 1e6:>9.2f} {r['entries_per_s'] / 1e9:>8.3f} {r['bytes_per_s'] / 1e12:>6.3f} "
              f"{r['in_flight_entries_per_active_sm']:>7.1f} {r['torch_index_select_s'] * 1e6:>9.2f} "
              f"{'y' if r['correct'] else 'NO'}")
    print(f"all correct: {all(r['correct'] for r in rows_out)}; wall {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gather_out")
