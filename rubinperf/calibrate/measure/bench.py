"""Kernel micro-benchmarks on the local GPU (PyTorch + CUDA, imported only when run).

Families (shapes in `plan.kernel_plan`):

- ``launch``: an empty kernel (``torch.cuda._sleep(0)``): the per-kernel floor.
- ``copy``: a device-to-device copy of 1 MiB to 2 GiB by an SM kernel (``torch.mul(src, 1.0,
  out=dst)``: each byte read once and written once). ``Tensor.copy_`` is a memcpy, which a
  CUDA graph runs as a memcpy node, and those of 1 GiB and more were a third slower.
- ``gemm``: ``torch.mm`` (BF16) and ``torch._scaled_mm`` (FP8 e4m3, per-tensor scales, fast
  accumulation, BF16 out) of activations [M, K] by nn.Linear-style weights [N, K].
- ``grouped_gemm``: ``torch._grouped_mm`` / ``torch._scaled_grouped_mm`` (one kernel for all
  experts) when present and working, else a loop of per-expert GEMMs inside one CUDA graph
  (then ``launches`` counts the touched experts); rows routed uniformly at random over
  the experts, and the row records how many experts were actually touched, so only their
  weights count.
- ``attention_decode`` / ``attention_prefill``: ``scaled_dot_product_attention`` in BF16
  with GQA (``enable_gqa``; K/V repeated beforehand where unsupported, and then counted
  as read per query head); causal for prefill. The fastest of the flash, cuDNN and
  memory-efficient backends that accept the shape is kept, and named in ``impl``.

Method: random inputs (never zeros), several input sets rotated so their total is at
least three times the L2 cache, eager warm-up, then the calls captured in one CUDA
graph (eager when capture fails: ``impl`` says so) and timed with CUDA events around
each replay; the row's time is the median over the replays divided by the calls in one.

Each row's ``flops`` and ``bytes`` come from ``plan.row_cost``, i.e. from the model's
own kernel functions. Run standalone (no typer/rich needed):

    python3 -m rubinperf.calibrate.measure --out measurements.csv [--quick]

The model-shape suite (DeepSeek-V4.1-Flash shapes in four launch modes, and the
pointer-chase and CTA-streaming probes) is `measure.shapes`, run with ``--suite shapes``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
import time
import warnings
from pathlib import Path

from rubinperf.calibrate.plan import KERNEL_COLUMNS, kernel_plan, row_cost, rows_to_csv
from rubinperf.errors import SpecError

DEFAULT_L2_BYTES = 60 * 2 ** 20


def require_torch_cuda(min_gpus: int = 1):
    """Import torch and check for CUDA GPUs; otherwise a one-line SpecError saying what is missing."""
    try:
        import torch
    except ImportError:
        raise SpecError("calibrate needs PyTorch with CUDA, and PyTorch is not installed "
                        "(pip install 'rubinperf[gpu]'), or use --from-csv FILE to fit existing measurements") from None
    except Exception as exc:  # a broken CUDA install can fail at import
        raise SpecError(f"calibrate needs PyTorch with CUDA, and importing torch failed: {type(exc).__name__}: {exc}") from None
    if not torch.cuda.is_available():
        raise SpecError("calibrate needs a CUDA GPU, and PyTorch sees none (torch.cuda.is_available() is False); "
                        "use --from-csv FILE to fit existing measurements")
    n = torch.cuda.device_count()
    if n < min_gpus:
        raise SpecError(f"calibrate --collectives needs at least {min_gpus} GPUs on this host, and PyTorch sees {n}")
    return torch


def environment(torch, command: str = "") -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "sm_count": props.multi_processor_count,
        "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
        "gpu_memory_bytes": int(props.total_memory),
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "command": command,
    }


class Timer:
    """Median time of one kernel call: eager warm-up, CUDA-graph capture of many calls, event-timed replays."""

    def __init__(self, torch, samples: int = 15, target_s: float = 2e-3, max_calls: int = 256):
        self.torch, self.samples, self.target_s, self.max_calls = torch, samples, target_s, max_calls

    def measure(self, calls):
        """`calls[i]()` runs the kernel on input set i. Returns (median_s, spread, samples, calls_per_sample, mode)."""
        torch = self.torch
        n = len(calls)
        for c in calls:  # warm-up: handles, workspaces, heuristics, clocks
            c()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for c in calls:
            c()
        end.record()
        end.synchronize()
        est = max(start.elapsed_time(end) / 1e3 / n, 1e-7)
        rounds = max(1, min(math.ceil(self.target_s / (est * n)), max(1, self.max_calls // n)))
        total = n * rounds

        graph, mode = None, "graph"
        try:
            graph = capture_graph(torch, calls, [calls[i % n] for i in range(total)])
            run = graph.replay
        except Exception as exc:  # capture unsupported for this op: time eagerly
            print(f"    graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); timing eagerly",
                  file=sys.stderr)
            graph, mode = None, "eager"
            torch.cuda.synchronize()

            def run():
                for i in range(total):
                    calls[i % n]()

        for _ in range(2):
            run()
        torch.cuda.synchronize()
        times = event_times(torch, run, self.samples, total)
        if graph is not None:
            graph.reset()
        med = _quantile(times, 0.5)
        spread = (_quantile(times, 0.75) - _quantile(times, 0.25)) / med if med > 0 else 0.0
        return med, spread, len(times), total, mode


def capture_graph(torch, warm, calls, graph=None):
    """A CUDA graph (`graph`, or a new one) of `calls` in order, captured after `warm` ran once on a side stream
    (handles, workspaces and allocator pools made outside the capture, as torch.cuda.graphs asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in warm:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph() if graph is None else graph
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    return graph


def event_times(torch, run, samples: int, calls: int) -> list[float]:
    """Seconds per call of `samples` replays of `run` (each making `calls` calls), timed with CUDA events, sorted."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    for s, e in events:
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) / 1e3 / calls for s, e in events)


def shape_text(row: dict) -> str:
    """A plan row's shape for the log: its set columns but the family, dtype and kernel count."""
    return " ".join(f"{k}={v}" for k, v in row.items() if k not in ("family", "dtype", "launches") and v is not None
                    and v != "")


def measure_or_skip(torch, measure, label: str, log, empty: bool = True):
    """`measure()` for one plan row; a row that fails is logged as SKIPPED (one line) and gives None, so one
    unsupported shape never ends a run. With `empty`, the GPU's cache is emptied after every row either way."""
    try:
        return measure()
    except Exception as exc:
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        print(f"{label}: SKIPPED ({type(exc).__name__}: {first})", file=log, flush=True)
        torch.cuda.synchronize()
        return None
    finally:
        if empty:
            torch.cuda.empty_cache()


def _quantile(sorted_values, q):
    x = (len(sorted_values) - 1) * q
    lo, hi = math.floor(x), math.ceil(x)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (x - lo)


class KernelBench:
    """Builds the inputs and the callables for each plan row."""

    def __init__(self, torch, l2_bytes: int, seed: int = 0):
        self.torch, self.l2 = torch, l2_bytes or DEFAULT_L2_BYTES
        self.dev = torch.device("cuda")
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        torch.manual_seed(seed)
        self.fp8 = getattr(torch, "float8_e4m3fn", None)

    # -- helpers
    def sets(self, set_bytes: float) -> int:
        """Input sets to rotate among: their total is at least 3x the L2 (one set if it alone is)."""
        if set_bytes >= 3 * self.l2:
            return 1
        return min(256, math.ceil(3 * self.l2 / max(set_bytes, 1.0)) + 1)

    def randn(self, *shape, dtype=None):
        t = self.torch
        x = t.randn(*shape, device=self.dev, dtype=t.bfloat16)
        if dtype is None or dtype is t.bfloat16:
            return x
        return x.to(dtype)

    def _elt(self, dtype: str) -> int:
        return 1 if dtype == "fp8" else 2

    # -- families: each returns (calls, impl, row updates)
    def launch(self, row):
        t = self.torch
        if hasattr(t.cuda, "_sleep"):
            return [lambda: t.cuda._sleep(0)], "torch.cuda._sleep(0)", {}
        x = self.randn(1)
        return [lambda: x.mul_(1.0)], "mul_ on one element", {}

    def copy(self, row):
        nbytes = row["nbytes"]
        k = self.sets(2 * nbytes)
        pairs = [(self.randn(nbytes // 2), None) for _ in range(k)]
        pairs = [(src, self.torch.empty_like(src)) for src, _ in pairs]
        # An SM kernel that reads each byte once and writes it once. Not Tensor.copy_: that is a
        # cudaMemcpyAsync, which a CUDA graph turns into a memcpy node, and on the H200 such nodes of
        # 1 GiB and more ran at 2.8 TB/s against 4.3 TB/s for the same copy eagerly (calibration/h200).
        mul = self.torch.mul
        return [(lambda s=s, d=d: mul(s, 1.0, out=d)) for s, d in pairs], "torch.mul(src, 1.0, out=dst)", {}

    def gemm(self, row):
        t = self.torch
        m, n, k, dtype = row["m"], row["n"], row["k"], row["dtype"]
        e = self._elt(dtype)
        count = self.sets((m * k + n * k) * e + m * n * 2)
        if dtype == "bf16":
            sets = [(self.randn(m, k), self.randn(n, k), t.empty(m, n, device=self.dev, dtype=t.bfloat16)) for _ in range(count)]
            return [(lambda a=a, w=w, o=o: t.mm(a, w.t(), out=o)) for a, w, o in sets], "torch.mm", {}
        mm = self._scaled_mm()
        sets = [(self.randn(m, k, dtype=self.fp8), self.randn(n, k, dtype=self.fp8)) for _ in range(count)]
        calls = [(lambda a=a, w=w: mm(a, w.t())) for a, w in sets]
        return calls, "torch._scaled_mm(per-tensor scales, fast accum)", {}

    def _scaled_mm(self):
        t = self.torch
        if self.fp8 is None or not hasattr(t, "_scaled_mm"):
            raise RuntimeError("this PyTorch has no FP8 GEMM (torch._scaled_mm / float8_e4m3fn): FP8 rows skipped")
        one = t.ones((), device=self.dev, dtype=t.float32)

        def mm(a, b):
            try:
                return t._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=t.bfloat16, use_fast_accum=True)
            except TypeError:  # older signature
                return t._scaled_mm(a, b, out_dtype=t.bfloat16, scale_a=one, scale_b=one)
        return mm

    def grouped_gemm(self, row):
        t = self.torch
        rows, groups, n, k, dtype = row["rows"], row["groups"], row["n"], row["k"], row["dtype"]
        if row.get("routing") == "balanced":  # every expert gets exactly rows / groups rows
            if rows % groups:
                raise ValueError(f"balanced routing needs rows ({rows}) to be a multiple of groups ({groups})")
            counts = t.full((groups,), rows // groups, dtype=t.int64)
        else:
            expert = t.randint(groups, (rows,), generator=self.gen)
            counts = t.bincount(expert, minlength=groups)
        touched = int((counts > 0).sum())
        offs = t.cumsum(counts, 0).to(t.int32).to(self.dev)
        e = self._elt(dtype)
        count = self.sets(touched * n * k * e + rows * k * e + rows * n * 2)
        wdtype = self.fp8 if dtype == "fp8" else None
        if dtype == "fp8" and self.fp8 is None:
            raise RuntimeError("this PyTorch has no float8_e4m3fn: FP8 rows skipped")
        sets = [(self.randn(rows, k, dtype=wdtype), self.randn(groups, n, k, dtype=wdtype)) for _ in range(count)]
        # One kernel for all experts, where this PyTorch has it and it takes the shape.
        fused = None
        if dtype == "bf16" and hasattr(t, "_grouped_mm"):
            fused = lambda a, w: t._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=t.bfloat16)  # noqa: E731
            name = "torch._grouped_mm"
        elif dtype == "fp8" and hasattr(t, "_scaled_grouped_mm"):
            sa = t.ones(rows, device=self.dev, dtype=t.float32)
            sb = t.ones(groups, n, device=self.dev, dtype=t.float32)
            fused = lambda a, w: t._scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs=offs,  # noqa: E731
                                                      out_dtype=t.bfloat16, use_fast_accum=True)
            name = "torch._scaled_grouped_mm(row-wise scales, fast accum)"
        if fused is not None:
            try:
                fused(*sets[0])
                t.cuda.synchronize()
                return [(lambda a=a, w=w: fused(a, w)) for a, w in sets], name, {"touched": touched, "launches": 1}
            except Exception as exc:
                print(f"    {name} failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                      "looping over experts", file=sys.stderr)
                t.cuda.synchronize()
        # A loop of per-expert GEMMs (captured in one graph): one launch per touched expert.
        bounds = [0] + t.cumsum(counts, 0).tolist()
        spans = [(g, bounds[g], bounds[g + 1]) for g in range(groups) if bounds[g + 1] > bounds[g]]
        if dtype == "bf16":
            outs = [t.empty(rows, n, device=self.dev, dtype=t.bfloat16) for _ in sets]

            def loop(a, w, o):
                for g, s, f in spans:
                    t.mm(a[s:f], w[g].t(), out=o[s:f])
            calls = [(lambda a=a, w=w, o=o: loop(a, w, o)) for (a, w), o in zip(sets, outs)]
            impl = "loop of torch.mm per expert in one CUDA graph"
        else:
            mm = self._scaled_mm()

            def loop(a, w):
                for g, s, f in spans:
                    mm(a[s:f], w[g].t())
            calls = [(lambda a=a, w=w: loop(a, w)) for a, w in sets]
            impl = "loop of torch._scaled_mm per expert in one CUDA graph"
        return calls, impl, {"touched": touched, "launches": len(spans)}

    def attention(self, row):
        t = self.torch
        import torch.nn.functional as F

        b, h, hkv, lq, lkv, d, causal = (row["batch"], row["heads"], row["kv_heads"], row["q_len"], row["kv_len"],
                                         row["head_dim"], bool(row["causal"]))
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", getattr(SDPBackend, "CUDNN_ATTENTION", None)),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
            backends = [(nm, be) for nm, be in backends if be is not None]
        except ImportError:  # old PyTorch: let SDPA choose
            sdpa_kernel, backends = None, [("default", None)]
        count = self.sets(2 * b * h * lq * d * 2 + 2 * b * hkv * lkv * d * 2)
        sets = [(self.randn(b, h, lq, d), self.randn(b, hkv, lkv, d), self.randn(b, hkv, lkv, d)) for _ in range(count)]
        options = []  # (name, calls, updates)
        gqa_ok = True
        for nm, be in backends:
            def call(q, k, v, be=be):
                if be is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != h)
            try:
                call(*sets[0])
                t.cuda.synchronize()
            except TypeError:  # no enable_gqa in this PyTorch
                gqa_ok = False
                break
            except Exception:  # backend does not take this shape
                t.cuda.synchronize()
                continue
            options.append((f"sdpa-{nm}", [(lambda q=q, k=k, v=v, c=call: c(q, k, v)) for q, k, v in sets], {}))
        if not options and (not gqa_ok or hkv != h):
            # Repeat K/V to all query heads beforehand: the kernel then reads h heads of K/V.
            rep = h // hkv
            sets = [(q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)) for q, k, v in sets]
            calls = [(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)) for q, k, v in sets]
            options.append(("sdpa-default(K/V repeated per head)", calls, {"kv_heads": h}))
        if not options:
            raise RuntimeError("no SDPA backend accepted the shape")
        return options

    def run_row(self, row: dict, timer: Timer) -> dict:
        fam = row["family"]
        if fam in ("attention_decode", "attention_prefill"):
            best, tried = None, []
            for name, calls, updates in self.attention(row):
                res = timer.measure(calls)
                tried.append(f"{name} {res[0] * 1e6:.1f} us")
                if best is None or res[0] < best[1][0]:
                    best = (name, res, updates)
                del calls
            impl, res, updates = best
            print(f"    backends: {', '.join(tried)}", file=sys.stderr, flush=True)
        else:
            calls, impl, updates = getattr(self, fam)(row)
            res = timer.measure(calls)
            del calls
        med, spread, samples, per, mode = res
        out = dict(row, **updates)
        out.update(impl=impl + ("" if mode == "graph" else " [eager]"), measured_s=med, spread=spread, samples=samples,
                   calls=per)
        cost = row_cost(out)
        out["flops"] = float(cost.flops)
        out["bytes"] = float(cost.bytes)
        return out


def _warm_clocks(torch, seconds: float = 1.0):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    del a


def run(quick: bool = False, log=sys.stderr, budget_s: float = 360.0, dtypes=("bf16", "fp8"),
        command: str = "", partial_csv: Path | None = None) -> tuple[list[dict], dict]:
    """Measure every plan row on GPU 0: (rows, environment). A failed row is logged and skipped.

    With `partial_csv`, the rows so far are rewritten there after each kernel (a killed run keeps them).
    """
    torch = require_torch_cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment(torch, command)
    bench = KernelBench(torch, env["l2_cache_bytes"])
    timer = Timer(torch, samples=7 if quick else 15, target_s=1e-3 if quick else 2e-3)
    plan = kernel_plan(quick=quick, dtypes=dtypes)
    print(f"calibrate: {env['gpu']}, {env['sm_count']} SMs, L2 {env['l2_cache_bytes'] / 2**20:.0f} MiB, "
          f"torch {env['torch']} (CUDA {env['cuda']}); {len(plan)} kernels", file=log, flush=True)
    _warm_clocks(torch)
    out, t0 = [], time.perf_counter()
    with warnings.catch_warnings():  # SDPA explains at length why a backend declines a shape
        warnings.simplefilter("ignore", UserWarning)
        _measure_all(plan, bench, timer, out, t0, budget_s, log, partial_csv, torch)
    env["measurements"] = len(out)
    env["planned"] = len(plan)
    env["seconds"] = round(time.perf_counter() - t0, 1)
    return out, env


def _measure_all(plan, bench, timer, out, t0, budget_s, log, partial_csv, torch):
    for i, row in enumerate(plan, 1):
        if time.perf_counter() - t0 > budget_s:
            print(f"calibrate: time budget of {budget_s:.0f} s spent; {len(plan) - i + 1} kernels not measured",
                  file=log, flush=True)
            break
        shape = shape_text(row)
        res = measure_or_skip(torch, lambda: bench.run_row(row, timer), f"[{i}/{len(plan)}] {row['family']} "
                              f"{row['dtype']} {shape}", log)
        if res is None:
            continue
        out.append(res)
        if partial_csv is not None:
            from rubinperf.files import write_atomic

            write_atomic(partial_csv, rows_to_csv(out, KERNEL_COLUMNS))
        rate = f"{res['flops'] / res['measured_s'] / 1e12:.0f} TFLOP/s, " if res["flops"] else ""
        print(f"[{i}/{len(plan)}] {row['family']} {row['dtype']} {shape}: {res['measured_s'] * 1e6:.2f} us "
              f"({rate}{res['bytes'] / res['measured_s'] / 1e12:.2f} TB/s; {res['impl']}; spread {res['spread']:.1%})",
              file=log, flush=True)


def write_outputs(rows: list[dict], csv_path: Path, env: dict) -> None:
    from rubinperf.files import write_atomic

    csv_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(csv_path, rows_to_csv(rows, KERNEL_COLUMNS))
    write_atomic(csv_path.with_name(csv_path.stem + ".env.json"), json.dumps(env, indent=2) + "\n")
