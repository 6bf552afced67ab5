"""`rubinperf kernel KIND`: one kernel on one GPU (thin: shapes in, the catalog's kernel timed, its record out)."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from rubinperf.cli.options import (BYTES, DEFAULT_RACK, DTYPE_WORDS, DTYPES, Csv, Hardware, JsonRecord, Launch, Quiet,
                                   Sets, Stack, complete_words, emit)
from rubinperf.errors import SpecError

kernel_app = typer.Typer(help="Time one kernel on one GPU: speed of light, expected time, and the bound.\n\n"
                         "Example: rubinperf kernel gemm --m 4096 --n 7168 --k 2048 --dtype fp8 --hardware b200")


def _run_kernel(kind: str, shape_values: dict, dtype, hardware: str, as_json: bool, shape: dict, sets=None,
                quiet: bool = False, launch: str = "eager", causal: bool = False, stack: str | None = None,
                ranks=None, as_csv: bool = False):
    """Build the catalog's kernel `kind` at `shape_values`, time it on the platform and print its record."""
    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, as_csv, quiet)
    from rubinperf.roofline import LAUNCH_MODES, kernel_time
    from rubinperf.step.records import kernel_record
    from rubinperf.specs.stack import load_platform
    from rubinperf.specs.overrides import apply_overrides

    if launch not in LAUNCH_MODES:
        raise SpecError(f"--launch: expected one of {', '.join(LAUNCH_MODES)}, got {launch!r}")
    hw = apply_overrides(sets, hardware=load_platform(hardware, stack))["hardware"]
    from rubinperf.kernels.catalog import build

    if ranks is not None:  # a collective: its group on this rack (GPUs per tray and per NVLink domain from the spec)
        shape_values = {**shape_values, "gpus_per_domain": shape_values.get("gpus_per_domain") or hw.nvlink_domain_size}
        shape = {**shape, "ranks": ranks, "gpus_per_domain": shape_values["gpus_per_domain"],
                 "nvlink_domains": -(-ranks // shape_values["gpus_per_domain"])}
    kern = build(kind, shape_values, dtype=dtype, causal=causal, ranks=ranks or 8,
                 gpus_per_tray=hw.gpus_per_tray if ranks is not None else None)
    rec = kernel_record(kind, kern.cost, kernel_time(kern, hw, launch=launch), hardware=hw.name, launch=launch, **shape)
    rec["stack"] = hw.stack
    if as_csv:  # one record: one CSV row
        emit([rec], False, _kernel_table, as_csv=True, quiet=quiet)
        return
    emit(rec, as_json, _kernel_table, quiet=quiet)


def _kernel_table(rec: dict):
    from rubinperf.render.step import kernel_table

    kernel_table(rec)


MAX_KERNEL_SIZE = 1e15  # far beyond any kernel; keeps products of sizes finite


def _positive(name: str, value, allow_zero: bool = False):
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):  # nan, inf, 1e400
        raise SpecError(f"--{name}: expected a finite number, got {value}")
    if value < 0 or (value == 0 and not allow_zero):
        raise SpecError(f"--{name}: expected a positive number, got {value}")
    if value > MAX_KERNEL_SIZE:
        digits = str(value) if isinstance(value, int) else ""
        shown = f"{value:.6g}" if not digits else digits if len(digits) <= 20 else f"{digits[:8]}... ({len(digits)} digits)"
        raise SpecError(f"--{name}: expected at most {MAX_KERNEL_SIZE:g}, got {shown}")


def _dtype(value: str) -> str:
    from rubinperf.specs.precision import get_precision

    return get_precision(value).name


OperandDtype = Annotated[str, typer.Option(help=f"Operand format: {DTYPES}.", autocompletion=complete_words(*DTYPE_WORDS))]
WeightDtype = Annotated[str, typer.Option(help=f"Weight format: {DTYPES} (activations the same, FP8 for FP4).",
                                          autocompletion=complete_words(*DTYPE_WORDS))]
QkvDtype = Annotated[str, typer.Option(help=f"Format of Q, K, V: {DTYPES}.", autocompletion=complete_words(*DTYPE_WORDS))]


@kernel_app.command("gemm")
def kernel_gemm(
    m: Annotated[int, typer.Option(help="Rows of the activations (tokens).")],
    n: Annotated[int, typer.Option(help="Output width (weight columns).")],
    k: Annotated[int, typer.Option(help="Reduction width.")],
    dtype: OperandDtype = "bf16",
    hardware: Hardware = DEFAULT_RACK,
    stack: Stack = None,
    launch: Launch = "eager",
    as_json: JsonRecord = False,
    as_csv: Csv = False,
    sets: Sets = None,
    quiet: Quiet = False,
):
    """Dense GEMM [m, k] x [k, n]: 2mnk FLOPs; weights, inputs and outputs moved once.

    Example: rubinperf kernel gemm --m 16 --n 7168 --k 2048 --dtype fp8 --hardware h200 --json
    """
    for name, v in (("m", m), ("n", n), ("k", k)):
        _positive(name, v)
    d = _dtype(dtype)
    _run_kernel("gemm", dict(m=m, n=n, k=k), d, hardware, as_json, dict(m=m, n=n, k=k, dtype=d), sets=sets, quiet=quiet,
                launch=launch, stack=stack, as_csv=as_csv)


@kernel_app.command("grouped-gemm")
def kernel_grouped_gemm(
    tokens: Annotated[int, typer.Option(help="Routed rows: tokens already multiplied by top-k.")],
    groups: Annotated[int, typer.Option(help="Experts the rows are spread over, uniformly at random.")],
    n: Annotated[int, typer.Option(help="Output width of each expert.")],
    k: Annotated[int, typer.Option(help="Reduction width of each expert.")],
    dtype: WeightDtype = "fp4",
    hardware: Hardware = DEFAULT_RACK,
    stack: Stack = None,
    launch: Launch = "eager",
    as_json: JsonRecord = False,
    as_csv: Csv = False,
    sets: Sets = None,
    quiet: Quiet = False,
):
    """Grouped (MoE) GEMM: only the experts touched are read; E[touched] = G(1 - (1 - 1/G)^rows).

    Example: rubinperf kernel grouped-gemm --tokens 768 --groups 256 --n 4096 --k 7168 --dtype fp8
    """
    from rubinperf.kernels import experts_touched

    for name, v in (("tokens", tokens), ("groups", groups), ("n", n), ("k", k)):
        _positive(name, v)
    d = _dtype(dtype)
    shape = dict(tokens=tokens, groups=groups, n=n, k=k, dtype=d, experts_touched=float(experts_touched(tokens, groups)))
    _run_kernel("grouped-gemm", dict(tokens=tokens, groups=groups, n=n, k=k), d, hardware, as_json, shape, sets=sets,
                quiet=quiet, launch=launch, stack=stack, as_csv=as_csv)


@kernel_app.command("attention")
def kernel_attention(
    batch: Annotated[int, typer.Option(help="Sequences.")],
    heads: Annotated[int, typer.Option(help="Query heads.")],
    q_len: Annotated[int, typer.Option(help="Query tokens per sequence (1 for decode).")],
    kv_len: Annotated[int, typer.Option(help="KV tokens per sequence.")],
    head_dim: Annotated[int, typer.Option(help="Head dimension of Q/K and V.")],
    kv_heads: Annotated[Optional[int], typer.Option(
        help="KV heads (below --heads: groups of heads share K/V, GQA/MQA).")] = None,
    dtype: QkvDtype = "bf16",
    causal: Annotated[bool, typer.Option(
        "--causal/--no-causal", help="Causal mask (prefill): queries are the last q-len positions.")] = False,
    hardware: Hardware = DEFAULT_RACK,
    stack: Stack = None,
    launch: Launch = "eager",
    as_json: JsonRecord = False,
    as_csv: Csv = False,
    sets: Sets = None,
    quiet: Quiet = False,
):
    """Attention with flash-style I/O: K/V read once per KV head, Q read and O written once.

    Example: rubinperf kernel attention --batch 8 --heads 64 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128
    """
    for name, v in (("batch", batch), ("heads", heads), ("q-len", q_len), ("kv-len", kv_len), ("head-dim", head_dim), ("kv-heads", kv_heads)):
        _positive(name, v)
    if kv_heads is not None and (kv_heads > heads or heads % kv_heads):
        raise SpecError(f"--kv-heads: expected a divisor of --heads ({heads}), got {kv_heads}")
    if q_len > kv_len:
        raise SpecError(f"--q-len: expected at most --kv-len ({kv_len}), got {q_len}")
    d = _dtype(dtype)
    shape = dict(batch=batch, heads=heads, kv_heads=kv_heads or heads, q_len=q_len, kv_len=kv_len, head_dim=head_dim, dtype=d, causal=causal)
    _run_kernel("attention", dict(batch=batch, heads=heads, kv_heads=kv_heads, q_len=q_len, kv_len=kv_len,
                                  head_dim=head_dim), d, hardware, as_json, shape, sets=sets, quiet=quiet, launch=launch,
                causal=causal, stack=stack, as_csv=as_csv)


@kernel_app.command("copy")
def kernel_copy(
    nbytes: Annotated[float, typer.Option(
        "--bytes", click_type=BYTES, help="Bytes copied (each read once and written once): 4e9, 4GB, 4GiB.")],
    hardware: Hardware = DEFAULT_RACK,
    stack: Stack = None,
    launch: Launch = "eager",
    as_json: JsonRecord = False,
    as_csv: Csv = False,
    sets: Sets = None,
    quiet: Quiet = False,
):
    """Device-to-device memory copy: 2 x bytes through HBM.

    Example: rubinperf kernel copy --bytes 4e9 --hardware h200
    """
    _positive("bytes", nbytes)
    _run_kernel("copy", {"bytes": nbytes}, None, hardware, as_json, dict(copy_bytes=nbytes), sets=sets, quiet=quiet,
                launch=launch, stack=stack, as_csv=as_csv)


CollectiveBytes = Annotated[float, typer.Option("--bytes", click_type=BYTES)]  # each kind sets its own help below


def _collective_command(kind: str, what: str, bytes_help: str, example: str):
    """`kernel all-to-all|all-reduce|all-gather`: one catalog kind over a group of ranks on a rack or cluster."""
    def command(
        nbytes: CollectiveBytes,
        ranks: Annotated[int, typer.Option(help="Ranks (GPUs) in the group.")] = 8,
        gpus_per_domain: Annotated[Optional[int], typer.Option(
            help="GPUs per NVLink domain (default: the hardware's nvlink_domain_size); a wider group also crosses "
                 "the NIC.")] = None,
        mode: Annotated[str, typer.Option(
            help="all-to-all across domains: direct (DeepEP low-latency: RDMA to every rank) or hierarchical "
                 "(DeepEP normal: RDMA to one GPU per domain, NVLink forward).",
            autocompletion=complete_words("direct", "hierarchical"))] = "direct",
        hardware: Hardware = DEFAULT_RACK,
        stack: Stack = None,
        launch: Launch = "eager",
        as_json: JsonRecord = False,
        as_csv: Csv = False,
        sets: Sets = None,
        quiet: Quiet = False,
    ):
        _positive("bytes", nbytes)
        for name, v in (("ranks", ranks), ("gpus-per-domain", gpus_per_domain)):
            _positive(name, v)
        if ranks < 2:
            raise SpecError(f"--ranks: expected at least 2, got {ranks}")
        if mode not in ("direct", "hierarchical"):
            raise SpecError(f"--mode: expected direct or hierarchical, got {mode!r}")
        if mode != "direct" and kind != "all-to-all":
            raise SpecError(f"--mode: applies to all-to-all only ({kind} across domains is hierarchical)")
        values = {"bytes": nbytes, "gpus_per_domain": gpus_per_domain, "hierarchical": mode == "hierarchical"}
        shape = {"collective_bytes": nbytes, **({"mode": mode} if kind == "all-to-all" else {})}
        _run_kernel(kind, values, None, hardware, as_json, shape, sets=sets, quiet=quiet, launch=launch, stack=stack,
                    ranks=ranks, as_csv=as_csv)

    command.__doc__ = f"{what}\n\nExample: {example}"
    # the help of --bytes is this kind's (annotations are strings read in this module's globals: set it as an object)
    command.__annotations__["nbytes"] = Annotated[float, typer.Option("--bytes", click_type=BYTES, help=bytes_help)]
    kernel_app.command(kind)(command)


_collective_command(
    "all-to-all", "All-to-all (EP dispatch or combine): of each rank's bytes, (d-1)/n stay in its NVLink domain of d "
    "GPUs and (n-d)/n (the remote fraction) cross the NIC.", "Bytes each rank sends, itself included (4e6, 4MB).",
    "rubinperf kernel all-to-all --bytes 7.3MB --ranks 32 --hardware h800-cluster")
_collective_command(
    "all-reduce", "All-reduce: 2(n-1)/n x bytes in one NVLink domain; across domains hierarchical (reduce-scatter, "
    "all-reduce of each 1/d shard over the NIC, all-gather).", "Bytes reduced per rank (4e6, 4MB).",
    "rubinperf kernel all-reduce --bytes 64MB --ranks 8 --hardware h200")
_collective_command(
    "all-gather", "All-gather: each rank receives (n-1)/n of the gathered bytes; across domains hierarchical "
    "(over the NIC among GPUs of one local index, then in the domain).", "Bytes of the gathered output (4e6, 4MB).",
    "rubinperf kernel all-gather --bytes 64MB --ranks 16 --hardware h100-cluster")
