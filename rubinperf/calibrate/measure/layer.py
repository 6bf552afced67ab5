"""Measure the DeepSeek-V4.1-Flash decode layer of `layer.layer_ops` on one GPU, and sparse attention's gather.

For each row count of `layer.LAYER_ROWS`:

- ``layer``: LAYERS copies of the layer (their own dense weights and activations; the experts' weights are one
  tensor, each copy routing its tokens at random) chained in one CUDA graph; seconds per layer = replay / LAYERS.
- ``without``: the same with one operation left out of every copy: the operation's share of the layer is
  layer - without.
- ``alone``: the operation by itself, its LAYERS copies chained in a graph (as `bench.Timer` times a kernel).
- ``eager``: the layer's operations issued from the host one after another after a 256 MB flush, timed with
  events as do_bench times one call (the host dispatches while the GPU runs), and ``host``: the host seconds to
  issue one layer with the GPU busy.

`gather` rows: `index_select` of 512 entries per query row at random places of a KV pool much larger than the L2,
in a graph. Run: ``python3 -m rubinperf.calibrate.measure.layer --out DIR``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from rubinperf.calibrate.measure.bench import KernelBench, Timer, _quantile, _warm_clocks, capture_graph, environment, event_times, require_torch_cuda
from rubinperf.calibrate.layer import EXPERTS, GATHER_POOL_ENTRIES, LAYER_ROWS, gather_rows, layer_ops
from rubinperf.calibrate.rows import row_kernel
from rubinperf.calibrate.measure.shapes import FLUSH_BYTES, clocks, graph_kernel_count

LAYERS = 8
ALONE_MAX_COPIES = 64
COLUMNS = ("rows", "kind", "op", "measured_s", "spread", "samples", "launches", "nbytes")


class LayerBench(KernelBench):
    def __init__(self, torch, l2_bytes: int, rows: int, experts_up, experts_down):
        super().__init__(torch, l2_bytes)
        self.rows = rows
        self.up, self.down = experts_up, experts_down   # [EXPERTS, n, k] FP8, shared by every copy
        self.mm = self._scaled_mm()

    def op(self, row: dict):
        """A callable running `row` on fresh inputs and weights (one copy of the operation)."""
        t, F = self.torch, self.torch.nn.functional
        r, name = self.rows, row["op"]
        fam = row["family"]
        if fam == "elementwise":
            x, w = self.randn(row["m"], row["n"]), self.randn(row["n"])
            return lambda: F.rms_norm(x, (row["n"],), w, 1e-6)
        if fam == "gemm" and row["dtype"] == "fp8":
            a, w = self.randn(row["m"], row["k"], dtype=self.fp8), self.randn(row["n"], row["k"], dtype=self.fp8)
            return lambda: self.mm(a, w.t())
        if fam == "gemm":
            a, w = self.randn(row["m"], row["k"]), self.randn(row["n"], row["k"])
            o = t.empty(row["m"], row["n"], device=self.dev, dtype=t.bfloat16)
            return lambda: t.mm(a, w.t(), out=o)
        if fam == "attention_decode":
            q, kv = self.randn(r, row["heads"], row["head_dim"]) * row["head_dim"] ** -0.5, \
                self.randn(r, row["kv_len"], row["head_dim"])
            dv = row["v_head_dim"]
            return lambda: t.bmm(t.softmax(t.bmm(q, kv.transpose(1, 2)), dim=-1), kv[..., :dv])
        if name == "o_down":
            x, w = self.randn(row["groups"], r, row["k"]), self.randn(row["groups"], row["k"], row["n"])
            return lambda: t.bmm(x, w)
        if fam == "grouped_gemm":
            wts = self.up if name == "experts_up" else self.down
            expert = t.randint(EXPERTS, (row["rows"],), generator=self.gen)
            offs = t.cumsum(t.bincount(expert, minlength=EXPERTS), 0).to(t.int32).to(self.dev)
            a = self.randn(row["rows"], row["k"], dtype=self.fp8)
            sa = t.ones(row["rows"], device=self.dev, dtype=t.float32)
            sb = t.ones(EXPERTS, row["n"], device=self.dev, dtype=t.float32)
            return lambda: t._scaled_grouped_mm(a, wts.transpose(-2, -1), sa, sb, offs=offs, out_dtype=t.bfloat16,
                                                use_fast_accum=True)
        if name in ("attn_residual", "ffn_residual"):
            a, b = self.randn(r, 5120), self.randn(r, 5120)
            o = t.empty_like(a)
            return lambda: t.add(a, b, out=o)
        if name == "topk":
            x = self.randn(r, EXPERTS)
            return lambda: t.topk(x, 6, dim=-1)
        if name in ("experts_act", "shared_act"):
            x = self.randn(r * 6 if name == "experts_act" else r, 2 * 2304)
            return lambda: F.silu(x[:, :2304]) * x[:, 2304:]
        if name == "combine":
            y = self.randn(r, 6, 5120)
            return lambda: y.sum(1)
        raise ValueError(f"no torch op for {name}")


def _graph_time(torch, fns, samples: int = 9) -> tuple[float, float]:
    """Median seconds of one replay of a graph that calls `fns` in order, and the spread (p75 - p25) / median."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    g = capture_graph(torch, fns, fns)
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    times = event_times(torch, g.replay, samples, 1)
    g.reset()
    med = _quantile(times, 0.5)
    return med, (_quantile(times, 0.75) - _quantile(times, 0.25)) / med


def measure_rows(torch, bench: LayerBench, log) -> list[dict]:
    ops = layer_ops(bench.rows)
    copies = [[bench.op(o) for o in ops] for _ in range(LAYERS)]
    out = []
    r = bench.rows

    def add(kind, op, med, spread, samples=9, launches=None, nbytes=None):
        out.append({"rows": r, "kind": kind, "op": op, "measured_s": med, "spread": spread, "samples": samples,
                    "launches": launches, "nbytes": nbytes})

    med, sp = _graph_time(torch, [f for c in copies for f in c])
    add("layer", "", med / LAYERS, sp)
    print(f"rows {r}: layer {med / LAYERS * 1e6:.1f} us", file=log, flush=True)
    for i, o in enumerate(ops):
        wo, sp = _graph_time(torch, [f for c in copies for j, f in enumerate(c) if j != i])
        add("without", o["op"], wo / LAYERS, sp)
        # Alone, an operation's copies are enough to keep its inputs out of the L2 (as bench.Timer's input sets).
        n = max(LAYERS, min(ALONE_MAX_COPIES, bench.sets(row_kernel(o).cost.bytes)))
        fns = [c[i] for c in copies] + [bench.op(o) for _ in range(n - LAYERS)]
        alone, sp = _graph_time(torch, fns)
        add("alone", o["op"], alone / n, sp, launches=graph_kernel_count(torch, copies[0][i]))
        print(f"  {o['op']}: share {(med - wo) / LAYERS * 1e6:.2f} us, alone {alone / n * 1e6:.2f} us",
              file=log, flush=True)
    # The layer issued from the host, as do_bench times a call: flush, event, every op, event.
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(LAYERS)]
    for _ in range(2):
        for c in copies:
            for f in c:
                f()
    torch.cuda.synchronize()
    for (s, e), c in zip(evs, copies):
        flush.zero_()
        s.record()
        for f in c:
            f()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) / 1e3 for s, e in evs)
    add("eager", "", _quantile(times, 0.5), (_quantile(times, 0.75) - _quantile(times, 0.25)) / _quantile(times, 0.5),
        samples=len(times))
    host = []
    for c in copies:
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        t0 = time.perf_counter()
        for f in c:
            f()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    add("host", "", _quantile(sorted(host), 0.5), 0.0, samples=len(host))
    print(f"  eager {out[-2]['measured_s'] * 1e6:.1f} us, host {out[-1]['measured_s'] * 1e6:.1f} us", file=log,
          flush=True)
    del copies
    return out


def measure_gather(torch, log) -> list[dict]:
    out = []
    gen = torch.Generator(device="cpu").manual_seed(1)
    for e in sorted({r["nbytes"] for r in gather_rows()}):
        pool = torch.randint(0, 255, (GATHER_POOL_ENTRIES, e), dtype=torch.uint8, device="cuda")
        for row in (x for x in gather_rows() if x["nbytes"] == e):
            n = row["batch"] * row["kv_len"]
            idx = [torch.randint(GATHER_POOL_ENTRIES, (n,), generator=gen).cuda() for _ in range(8)]
            calls = [(lambda i=i: pool.index_select(0, i)) for i in idx]
            med, spread, samples, per, mode = Timer(torch).measure(calls)
            out.append({"rows": row["batch"], "kind": f"gather_{mode}", "op": "gather", "measured_s": med,
                        "spread": spread, "samples": samples, "launches": 1, "nbytes": e})
            print(f"gather {row['batch']} x {row['kv_len']} x {e} B: {med * 1e6:.2f} us "
                  f"({n * e / med / 1e12:.2f} TB/s)", file=log, flush=True)
        del pool
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m rubinperf.calibrate.measure.layer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for decode_layer.csv, gather.csv and layer.env.json")
    ap.add_argument("--rows", default=",".join(map(str, LAYER_ROWS)), help="row counts, comma-separated")
    args = ap.parse_args(argv)
    torch = require_torch_cuda()
    env = environment(torch, "python3 -m rubinperf.calibrate.measure.layer")
    env["clocks_before"] = clocks()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _warm_clocks(torch)
    rows = []
    base = KernelBench(torch, env["l2_cache_bytes"])
    fp8 = base.fp8
    up = base.randn(EXPERTS, 2 * 2304, 5120, dtype=fp8)
    down = base.randn(EXPERTS, 5120, 2304, dtype=fp8)
    for r in (int(x) for x in args.rows.split(",")):
        try:
            rows += measure_rows(torch, LayerBench(torch, env["l2_cache_bytes"], r, up, down), sys.stderr)
        except Exception as exc:
            print(f"rows {r}: FAILED ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})", file=sys.stderr)
            torch.cuda.synchronize()
        torch.cuda.empty_cache()
        _write(out_dir / "decode_layer.csv", rows)
    del up, down
    torch.cuda.empty_cache()
    gather = measure_gather(torch, sys.stderr)
    _write(out_dir / "gather.csv", gather)
    env["clocks_after"] = clocks()
    env["seconds"] = round(time.perf_counter() - t0, 1)
    env["layers_per_graph"] = LAYERS
    (out_dir / "layer.env.json").write_text(json.dumps(env, indent=2) + "\n")
    return 0


def _write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    raise SystemExit(main())
