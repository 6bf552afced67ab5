"""`rubinperf kernel KIND`: one kernel on one GPU (thin: shapes in, the catalog's kernel timed, its record out)."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from rubinperf.cli.options import BYTES, BYTES_RANGE, DTYPE_WORDS, DTYPES, SHARED, JsonRecord, complete_words, emit, ranged, shared_options
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
MAX_KERNEL_INT = 10 ** 15
MAX_RANKS = 2 ** 20   # GPUs in one collective group: far beyond any cluster


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

KERNEL_OPTIONS = {**SHARED, "as_json": (JsonRecord, False)}   # a kernel is one record


def _kernel(kind: str, **shape):
    """Decorator: register the command as `kernel KIND`. Each of `shape` is a positional parameter left bare: a
    help text makes it a required whole-number option, anything else is its annotation. The bare keyword-only
    parameters (rack, stack, launch, output) take KERNEL_OPTIONS'."""
    def register(command):
        for name, how in shape.items():
            command.__annotations__[name] = (Annotated[int, typer.Option(**ranged(how, 1, MAX_KERNEL_INT))]
                                            if isinstance(how, str) else how)
        kernel_app.command(kind)(shared_options(KERNEL_OPTIONS)(command))
        return command
    return register


def _positives(**sizes):
    """Each size positive and finite, checked in the order given (the first bad one is the error)."""
    for name, v in sizes.items():
        _positive(name.replace("_", "-"), v)


@_kernel("gemm", m="Rows of the activations (tokens).", n="Output width (weight columns).", k="Reduction width.")
def kernel_gemm(m, n, k, dtype: OperandDtype = "bf16", *, hardware, stack, launch, as_json, as_csv, sets, quiet):
    """Dense GEMM [m, k] x [k, n]: 2mnk FLOPs; weights, inputs and outputs moved once.

    Example: rubinperf kernel gemm --m 16 --n 7168 --k 2048 --dtype fp8 --hardware h200 --json
    """
    _positives(m=m, n=n, k=k)
    d = _dtype(dtype)
    _run_kernel("gemm", dict(m=m, n=n, k=k), d, hardware, as_json, dict(m=m, n=n, k=k, dtype=d), sets=sets, quiet=quiet,
                launch=launch, stack=stack, as_csv=as_csv)


@_kernel("grouped-gemm", tokens="Routed rows: tokens already multiplied by top-k.",
         groups="Experts the rows are spread over, uniformly at random.", n="Output width of each expert.",
         k="Reduction width of each expert.")
def kernel_grouped_gemm(tokens, groups, n, k, dtype: WeightDtype = "fp4", *, hardware, stack, launch, as_json, as_csv,
                        sets, quiet):
    """Grouped (MoE) GEMM: only the experts touched are read; E[touched] = G(1 - (1 - 1/G)^rows).

    Example: rubinperf kernel grouped-gemm --tokens 768 --groups 256 --n 4096 --k 7168 --dtype fp8
    """
    from rubinperf.kernels import experts_touched

    _positives(tokens=tokens, groups=groups, n=n, k=k)
    d = _dtype(dtype)
    shape = dict(tokens=tokens, groups=groups, n=n, k=k, dtype=d, experts_touched=float(experts_touched(tokens, groups)))
    _run_kernel("grouped-gemm", dict(tokens=tokens, groups=groups, n=n, k=k), d, hardware, as_json, shape, sets=sets,
                quiet=quiet, launch=launch, stack=stack, as_csv=as_csv)


@_kernel("attention", batch="Sequences.", heads="Query heads.", q_len="Query tokens per sequence (1 for decode).",
         kv_len="KV tokens per sequence.", head_dim="Head dimension of Q/K and V.")
def kernel_attention(
    batch, heads, q_len, kv_len, head_dim,
    kv_heads: Annotated[Optional[int], typer.Option(
        **ranged("KV heads (below --heads: groups of heads share K/V, GQA/MQA).", 1, MAX_KERNEL_INT))] = None,
    dtype: QkvDtype = "bf16",
    causal: Annotated[bool, typer.Option(
        "--causal/--no-causal", help="Causal mask (prefill): queries are the last q-len positions.")] = False,
    *, hardware, stack, launch, as_json, as_csv, sets, quiet,
):
    """Attention with flash-style I/O: K/V read once per KV head, Q read and O written once.

    Example: rubinperf kernel attention --batch 8 --heads 64 --kv-heads 8 --q-len 1 --kv-len 32768 --head-dim 128
    """
    _positives(batch=batch, heads=heads, q_len=q_len, kv_len=kv_len, head_dim=head_dim, kv_heads=kv_heads)
    if kv_heads is not None and (kv_heads > heads or heads % kv_heads):
        raise SpecError(f"--kv-heads: expected a divisor of --heads ({heads}), got {kv_heads}")
    if q_len > kv_len:
        raise SpecError(f"--q-len: expected at most --kv-len ({kv_len}), got {q_len}")
    d = _dtype(dtype)
    shape = dict(batch=batch, heads=heads, kv_heads=kv_heads or heads, q_len=q_len, kv_len=kv_len, head_dim=head_dim, dtype=d, causal=causal)
    _run_kernel("attention", dict(batch=batch, heads=heads, kv_heads=kv_heads, q_len=q_len, kv_len=kv_len,
                                  head_dim=head_dim), d, hardware, as_json, shape, sets=sets, quiet=quiet, launch=launch,
                causal=causal, stack=stack, as_csv=as_csv)


def _bytes(help_text: str):
    """--bytes, read with units (4e9, 4GB, 4GiB), with this kind's help."""
    return Annotated[float, typer.Option("--bytes", click_type=BYTES, help=f"{help_text} {BYTES_RANGE}")]


@_kernel("copy", nbytes=_bytes("Bytes copied (each read once and written once): 4e9, 4GB, 4GiB."))
def kernel_copy(nbytes, *, hardware, stack, launch, as_json, as_csv, sets, quiet):
    """Device-to-device memory copy: 2 x bytes through HBM.

    Example: rubinperf kernel copy --bytes 4e9 --hardware h200
    """
    _positive("bytes", nbytes)
    _run_kernel("copy", {"bytes": nbytes}, None, hardware, as_json, dict(copy_bytes=nbytes), sets=sets, quiet=quiet,
                launch=launch, stack=stack, as_csv=as_csv)


def _collective_command(kind: str, what: str, bytes_help: str, example: str):
    """`kernel all-to-all|all-reduce|all-gather`: one catalog kind over a group of ranks on a rack or cluster."""
    def command(
        nbytes,
        ranks: Annotated[int, typer.Option(**ranged("Ranks (GPUs) in the group.", 1, MAX_RANKS))] = 8,
        gpus_per_domain: Annotated[Optional[int], typer.Option(
            **ranged("GPUs per NVLink domain (default: the hardware's nvlink_domain_size); a wider group also "
                     "crosses the NIC.", 1, MAX_RANKS))] = None,
        mode: Annotated[str, typer.Option(
            help="all-to-all across domains: direct (DeepEP low-latency: RDMA to every rank) or hierarchical "
                 "(DeepEP normal: RDMA to one GPU per domain, NVLink forward).",
            autocompletion=complete_words("direct", "hierarchical"))] = "direct",
        *, hardware, stack, launch, as_json, as_csv, sets, quiet,
    ):
        _positive("bytes", nbytes)
        _positives(ranks=ranks, gpus_per_domain=gpus_per_domain)
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
    _kernel(kind, nbytes=_bytes(bytes_help))(command)   # --bytes: this kind's help


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
