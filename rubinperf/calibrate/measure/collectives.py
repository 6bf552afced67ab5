"""All-reduce and all-to-all over the GPUs of this host (torch.distributed + NCCL).

One process per GPU (``torch.multiprocessing.spawn``). For each rank count (2, 4, ...,
every GPU) and message size (8 B to 256 MiB per rank, BF16 random data), the
collective is warmed up eagerly, then ``calls`` of it are captured in one CUDA graph
(as serving engines run them; eager when capture fails) and replayed between CUDA
events; a rank's time is the median replay over the calls, and the row keeps the
slowest rank's. NVLink multicast (NVLS) stays off: the variables in ``NCCL_ENV`` are
set before NCCL starts, in this process and in every worker.

Each row records the model's bytes sent per rank and latency hops from
``rubinperf.kernels.collectives`` for the same collective. Standalone:

    python3 -m rubinperf.calibrate.measure.collectives --out collectives.csv [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from rubinperf.calibrate.plan import COLLECTIVE_COLUMNS, COLLECTIVES, rows_to_csv
from rubinperf.errors import SpecError

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SIZES = tuple(8 * 8 ** i for i in range(9)) + (256 * 2 ** 20,)  # 8 B, 64 B, ..., 128 MiB, 256 MiB
QUICK_SIZES = (8, 4096, 2 ** 20, 64 * 2 ** 20)
ELEMENT_BYTES = 2  # bf16


def rank_counts(world: int, min_ranks: int = 2) -> list[int]:
    counts = {world}
    n = 2
    while n < world:
        counts.add(n)
        n *= 2
    return sorted(c for c in counts if c >= min_ranks)


def calls_per_sample(nbytes: int) -> int:
    """Same on every rank (the graphs must pair up): more calls for short collectives."""
    if nbytes <= 2 ** 20:
        return 50
    if nbytes <= 16 * 2 ** 20:
        return 10
    return 3


def message_elements(nbytes: int, ranks: int) -> int:
    """Elements per rank: at least one per rank, a multiple of the rank count (all-to-all splits evenly)."""
    nel = max(ranks, nbytes // ELEMENT_BYTES)
    return nel - nel % ranks


def model_row(collective: str, ranks: int, nbytes: float) -> dict:
    from rubinperf.kernels.collectives import all_reduce, all_to_all

    cost = {"all_reduce": all_reduce, "all_to_all": all_to_all}[collective](nbytes, ranks).cost
    return {"nvlink_bytes": float(cost.nvlink_bytes), "hops": int(cost.nvlink_hops)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, sizes, counts, samples: int, result_path: str):
    os.environ.update(NCCL_ENV)  # before NCCL starts in this process
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    init = dict(backend="nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dist.init_process_group(**init, device_id=dev)
    except TypeError:  # PyTorch before 2.3
        dist.init_process_group(**init)
    torch.manual_seed(1234 + rank)
    rows = []
    for n in counts:
        group = dist.new_group(list(range(n)))  # every rank takes part in creating every group
        if rank < n:
            for coll in COLLECTIVES:
                for size in sizes:
                    nel = message_elements(size, n)
                    x = torch.randn(nel, device=dev, dtype=torch.bfloat16)
                    y = torch.empty_like(x)
                    if coll == "all_reduce":
                        op = lambda: dist.all_reduce(x, group=group)  # noqa: E731
                    else:
                        op = lambda: dist.all_to_all_single(y, x, group=group)  # noqa: E731
                    calls = calls_per_sample(size)
                    med, spread, mode = _time(torch, dist, group, op, calls, samples)
                    worst = torch.tensor([med, spread], device=dev, dtype=torch.float64)
                    dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
                    if rank == 0:
                        nbytes = nel * ELEMENT_BYTES
                        rows.append({"collective": coll, "ranks": n, "nbytes": nbytes, "dtype": "bf16",
                                     "measured_s": float(worst[0]), "spread": float(worst[1]), "samples": samples,
                                     "impl": f"torch.distributed NCCL {mode}", **model_row(coll, n, nbytes)})
                        print(f"  {coll} ranks={n} bytes={nbytes}: {float(worst[0]) * 1e6:.1f} us ({mode})",
                              file=sys.stderr, flush=True)
                    del x, y
        dist.barrier()
    if rank == 0:
        from rubinperf.files import write_atomic

        write_atomic(result_path, json.dumps(rows))  # whole or absent when the parent reads it
    dist.barrier()
    dist.destroy_process_group()


def _time(torch, dist, group, op, calls: int, samples: int):
    from rubinperf.calibrate.measure.bench import event_times

    for _ in range(5):  # warm-up: communicator set-up, buffers, clocks
        op()
    torch.cuda.synchronize()
    mode = "graph"
    graph = None
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            op()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        dist.barrier(group=group)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                op()
        run = graph.replay
    except Exception as exc:
        print(f"    graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}); "
              "timing eagerly", file=sys.stderr, flush=True)
        graph, mode = None, "eager"
        torch.cuda.synchronize()

        def run():
            for _ in range(calls):
                op()
    # every rank agrees on the mode, or the replays would not pair up
    flag = torch.tensor([1.0 if mode == "eager" else 0.0], device=torch.cuda.current_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if float(flag[0]) > 0 and mode == "graph":
        graph.reset()
        graph, mode = None, "eager"

        def run():
            for _ in range(calls):
                op()
    run()
    torch.cuda.synchronize()
    dist.barrier(group=group)
    times = event_times(torch, run, samples, calls)
    if graph is not None:
        graph.reset()
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [med, med, med]
    return med, (q[2] - q[0]) / med if med > 0 else 0.0, mode


def run(quick: bool = False, world: int | None = None, min_ranks: int = 2, samples: int | None = None,
        log=sys.stderr) -> list[dict]:
    """Measure on `world` local GPUs (default: all); needs at least `min_ranks` of them."""
    from rubinperf.calibrate.measure.bench import require_torch_cuda

    os.environ.update(NCCL_ENV)
    torch = require_torch_cuda(min_gpus=max(1, min_ranks))
    import torch.multiprocessing as mp

    world = world or torch.cuda.device_count()
    if world < min_ranks:
        raise SpecError(f"calibrate --collectives needs at least {min_ranks} GPUs, and {world} were given")
    counts = rank_counts(world, min_ranks)
    sizes = QUICK_SIZES if quick else SIZES
    samples = samples or (5 if quick else 10)
    print(f"collectives: {world} GPUs, ranks {counts}, {len(sizes)} sizes, NCCL_NVLS_ENABLE=0", file=log, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "rows.json")
        mp.spawn(_worker, args=(world, _free_port(), sizes, counts, samples, result), nprocs=world, join=True)
        return json.loads(Path(result).read_text())


def write_csv(rows: list[dict], path: Path) -> None:
    from rubinperf.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, rows_to_csv(rows, (*COLLECTIVE_COLUMNS, "impl")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m rubinperf.calibrate.measure.collectives", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="CSV file to write")
    ap.add_argument("--quick", action="store_true", help="four message sizes only")
    ap.add_argument("--world", type=int, default=None, help="GPUs to use (default: all)")
    ap.add_argument("--min-ranks", type=int, default=2, help=argparse.SUPPRESS)  # 1: a single-GPU smoke test
    args = ap.parse_args(argv)
    try:
        rows = run(quick=args.quick, world=args.world, min_ranks=args.min_ranks)
    except SpecError as exc:
        print(f"rubinperf: error: {exc}", file=sys.stderr)
        return 2
    write_csv(rows, Path(args.out))
    print(f"wrote {len(rows)} measurements to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
