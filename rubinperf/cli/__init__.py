"""The command line: thin. Parse options, call the library, hand records to report.

Every error a user can cause ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import List, Optional


def _import_typer():
    """typer, imported as if rich were not installed.

    rubinperf's help and usage errors are click's plain text (rich_markup_mode=None, and
    typer.core.rich = None below), and its tracebacks are off, so typer never uses
    typer.rich_utils; yet typer.core and typer.main import it, with rich.markdown,
    markdown_it, rich.traceback and pygments: about half of the start-up of every command.
    typer supports running without rich (its ImportError fallbacks set rich = None), which is
    exactly what rubinperf asks for. rich itself is unaffected: hidden only while typer's
    modules load, and imported by rubinperf's tables as usual. A typer imported earlier (by
    another module of the process) is used as it is."""
    if "typer" in sys.modules:
        return sys.modules["typer"]
    missing = object()
    saved = sys.modules.get("rich", missing)
    sys.modules["rich"] = None  # `import rich` inside typer raises ImportError
    try:
        import typer
    finally:
        if saved is missing:
            del sys.modules["rich"]
        else:
            sys.modules["rich"] = saved
    return typer


typer = _import_typer()

from rubinperf.cli.options import BYTES, STACK_ONE_OPT, STACK_OPT, TOKENS, WIDE_OPT, apply_wide  # noqa: E402
from rubinperf.errors import SpecError  # noqa: E402

# typer escapes '[' in help texts for rich markup whenever rich is importable, even with markup
# off (rich_markup_mode=None), so plain help would read '\[default: 1024]'. Help is plain here
# (already so when typer was imported by _import_typer; this covers a typer imported before).
typer.core.rich = None
typer.main.rich = None

app = typer.Typer(
    name="rubinperf",
    help="Analytical roofline performance of MoE model serving on rack-scale GPU systems.\n\n"
    "Example: rubinperf estimate --hardware vr-nvl72 --layout dep32 --breakdown",
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
kernel_app = typer.Typer(help="Time one kernel on one GPU: speed of light, expected time, and the bound.\n\n"
                         "Example: rubinperf kernel gemm --m 4096 --n 7168 --k 2048 --dtype fp8 --hardware b200")
list_app = typer.Typer(help="List bundled specs: hardware, models or layouts.\n\n"
                       "Example: rubinperf list hardware --json")
app.add_typer(kernel_app, name="kernel")
app.add_typer(list_app, name="list")

DTYPES = "fp4, fp8, bf16 or fp32"
DTYPE_WORDS = ("fp4", "fp8", "bf16", "fp32")


def _version(value: bool):
    if value:
        from rubinperf import __version__

        typer.echo(f"rubinperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    """Analytical roofline performance of MoE model serving on rack-scale GPU systems."""


def _emit(records, as_json: bool, render_table, as_csv: bool = False, quiet: bool = False):
    from rubinperf.render import tables as report
    from rubinperf.cli.options import check_output_flags

    check_output_flags(as_json, as_csv, quiet)

    if as_json:
        report.emit_text(report.to_json(records))
    elif as_csv:
        report.emit_text(report.to_csv(records))
    elif not quiet:
        render_table(records)


# ---------------------------------------------------------------- shell completion of values


def complete_names(kind: str):
    """Tab-completion of bundled spec names (hardware, model, workload)."""
    def complete(incomplete: str) -> list[str]:
        from rubinperf.specs.loader import bundled_names

        try:
            return [n for n in bundled_names(kind) if n.startswith(incomplete)]
        except SpecError:  # no bundled specs: nothing to complete
            return []
    return complete


def complete_words(*words: str):
    return lambda incomplete: [w for w in words if w.startswith(incomplete)]


LAYOUT_WORDS = ("dep2", "dep8", "dep16", "dep32", "dep64", "tp4", "tp8")


# ---------------------------------------------------------------- kernel

HW_OPT = typer.Option("gb300-nvl72", "--hardware", "-H", help="Bundled hardware name or a path to a TOML file.",
                      autocompletion=complete_names("hardware"))
JSON_OPT = typer.Option(False, "--json", help="Print one JSON record.")
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells).")
SET_HELP = ("What-if override of a spec field, repeatable: --set hbm_bandwidth=30TB/s, "
            "--set hardware.nvlink_latency_s=2e-6, --set model.mean_accepted_tokens=3.")
SET_OPT = typer.Option(None, "--set", "-s", help=SET_HELP)
LAUNCH_OPT = typer.Option("eager", "--launch",
                          help="eager: the kernel launched alone from the host (pays the host launch); graph: one "
                               "kernel among many in a CUDA graph, as the step's ops are timed (pays the graph "
                               "boundary, with the hardware's programmatic-dependent-launch overlap).",
                          autocompletion=complete_words("eager", "graph"))


def _run_kernel(kind: str, shape_values: dict, dtype, hardware: str, as_json: bool, shape: dict, sets=None,
                quiet: bool = False, launch: str = "eager", causal: bool = False, stack: str | None = None,
                ranks=None):
    """Build the catalog's kernel `kind` at `shape_values`, time it on the platform and print its record."""
    from rubinperf.roofline import LAUNCH_MODES, kernel_time
    from rubinperf.records import kernel_record
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
    _emit(rec, as_json, _kernel_table, quiet=quiet)


def _kernel_table(rec: dict):
    from rubinperf.render import tables as report

    shape = ", ".join(f"{k}={v}" for k, v in rec.items() if k not in {"kernel", "hardware", "launch"} and not k.endswith(("_ms", "_bytes")) and k not in {"bound", "flops", "bytes", "fraction_of_roofline"})
    rows = [
        ["expected time", report.fmt_time(rec["time_ms"] / 1e3)],
        ["speed of light", report.fmt_time(rec["sol_time_ms"] / 1e3)],
        ["% of roofline", report.fmt_pct(rec["fraction_of_roofline"])],
        ["bound", rec["bound"]],
        ["compute term", report.fmt_time(rec["compute_ms"] / 1e3)],
        ["memory term", report.fmt_time(rec["memory_ms"] / 1e3)],
        ["parallelism term", report.fmt_time(rec["parallelism_ms"] / 1e3)],
        ["link term", report.fmt_time(rec["comm_ms"] / 1e3)],
        ["latency term", report.fmt_time(rec["latency_ms"] / 1e3)],
        ["FLOPs", report.si(rec["flops"], "FLOP")],
        ["bytes", report.si(rec["bytes"], "B")],
    ]
    if rec.get("nvlink_bytes") or rec.get("scale_out_bytes"):
        rows += [["NVLink bytes sent", report.si(rec["nvlink_bytes"], "B")],
                 ["NIC bytes sent", report.si(rec["scale_out_bytes"], "B")],
                 ["NIC time (of link)", report.fmt_time(rec["scale_out_ms"] / 1e3)]]
    report.print_out(report.table(f"{rec['kernel']} on {rec['hardware']}, {rec['launch']} launch  ({shape})", [("", "left"), ("", "right")], rows))


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
    from rubinperf.precision import get_precision

    return get_precision(value).name


@kernel_app.command("gemm")
def kernel_gemm(
    m: int = typer.Option(..., help="Rows of the activations (tokens)."),
    n: int = typer.Option(..., help="Output width (weight columns)."),
    k: int = typer.Option(..., help="Reduction width."),
    dtype: str = typer.Option("bf16", help=f"Operand format: {DTYPES}.", autocompletion=complete_words(*DTYPE_WORDS)),
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    launch: str = LAUNCH_OPT,
    as_json: bool = JSON_OPT,
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_OPT,
):
    """Dense GEMM [m, k] x [k, n]: 2mnk FLOPs; weights, inputs and outputs moved once.

    Example: rubinperf kernel gemm --m 16 --n 7168 --k 2048 --dtype fp8 --hardware h200 --json
    """
    for name, v in (("m", m), ("n", n), ("k", k)):
        _positive(name, v)
    d = _dtype(dtype)
    _run_kernel("gemm", dict(m=m, n=n, k=k), d, hardware, as_json, dict(m=m, n=n, k=k, dtype=d), sets=sets, quiet=quiet,
                launch=launch, stack=stack)


@kernel_app.command("grouped-gemm")
def kernel_grouped_gemm(
    tokens: int = typer.Option(..., help="Routed rows: tokens already multiplied by top-k."),
    groups: int = typer.Option(..., help="Experts the rows are spread over, uniformly at random."),
    n: int = typer.Option(..., help="Output width of each expert."),
    k: int = typer.Option(..., help="Reduction width of each expert."),
    dtype: str = typer.Option("fp4", help=f"Weight format: {DTYPES} (activations the same, FP8 for FP4).",
                              autocompletion=complete_words(*DTYPE_WORDS)),
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    launch: str = LAUNCH_OPT,
    as_json: bool = JSON_OPT,
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_OPT,
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
                quiet=quiet, launch=launch, stack=stack)


@kernel_app.command("attention")
def kernel_attention(
    batch: int = typer.Option(..., help="Sequences."),
    heads: int = typer.Option(..., help="Query heads."),
    q_len: int = typer.Option(..., help="Query tokens per sequence (1 for decode)."),
    kv_len: int = typer.Option(..., help="KV tokens per sequence."),
    head_dim: int = typer.Option(..., help="Head dimension of Q/K and V."),
    kv_heads: Optional[int] = typer.Option(None, help="KV heads (below --heads: groups of heads share K/V, GQA/MQA)."),
    dtype: str = typer.Option("bf16", help=f"Format of Q, K, V: {DTYPES}.", autocompletion=complete_words(*DTYPE_WORDS)),
    causal: bool = typer.Option(False, "--causal/--no-causal", help="Causal mask (prefill): queries are the last q-len positions."),
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    launch: str = LAUNCH_OPT,
    as_json: bool = JSON_OPT,
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_OPT,
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
                causal=causal, stack=stack)


@kernel_app.command("copy")
def kernel_copy(
    nbytes: float = typer.Option(..., "--bytes", click_type=BYTES, help="Bytes copied (each read once and written once): 4e9, 4GB, 4GiB."),
    hardware: str = HW_OPT,
    stack: Optional[str] = STACK_ONE_OPT,
    launch: str = LAUNCH_OPT,
    as_json: bool = JSON_OPT,
    sets: Optional[List[str]] = SET_OPT,
    quiet: bool = QUIET_OPT,
):
    """Device-to-device memory copy: 2 x bytes through HBM.

    Example: rubinperf kernel copy --bytes 4e9 --hardware h200
    """
    _positive("bytes", nbytes)
    _run_kernel("copy", {"bytes": nbytes}, None, hardware, as_json, dict(copy_bytes=nbytes), sets=sets, quiet=quiet,
                launch=launch, stack=stack)


def _collective_command(kind: str, what: str, bytes_help: str, example: str):
    """`kernel all-to-all|all-reduce|all-gather`: one catalog kind over a group of ranks on a rack or cluster."""
    def command(
        nbytes: float = typer.Option(..., "--bytes", click_type=BYTES, help=bytes_help),
        ranks: int = typer.Option(8, help="Ranks (GPUs) in the group."),
        gpus_per_domain: Optional[int] = typer.Option(None, help="GPUs per NVLink domain (default: the hardware's "
                                                      "nvlink_domain_size); a wider group also crosses the NIC."),
        mode: str = typer.Option("direct", help="all-to-all across domains: direct (DeepEP low-latency: RDMA to every "
                                 "rank) or hierarchical (DeepEP normal: RDMA to one GPU per domain, NVLink forward).",
                                 autocompletion=complete_words("direct", "hierarchical")),
        hardware: str = HW_OPT,
        stack: Optional[str] = STACK_ONE_OPT,
        launch: str = LAUNCH_OPT,
        as_json: bool = JSON_OPT,
        sets: Optional[List[str]] = SET_OPT,
        quiet: bool = QUIET_OPT,
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
                    ranks=ranks)

    command.__doc__ = f"{what}\n\nExample: {example}"
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


# ---------------------------------------------------------------- estimate


@app.command("estimate")
def estimate(
    model: str = typer.Option("deepseek-v4.1-flash", "--model", "-m", help="Bundled model name or a path to a TOML file.",
                              autocompletion=complete_names("model")),
    hardware: Optional[List[str]] = typer.Option(None, "--hardware", "-H", help="Hardware (repeatable). Default: gb300-nvl72 and vr-nvl72.",
                                                 autocompletion=complete_names("hardware")),
    layout: Optional[List[str]] = typer.Option(None, "--layout", "-l", help="dep<N> or tp<N> (repeatable). Default: dep2 prefill, dep32 and tp8 decode.",
                                               autocompletion=complete_words(*LAYOUT_WORDS)),
    phase: Optional[str] = typer.Option(None, help="prefill or decode. Default: prefill for dep2 (and dep1), decode otherwise.",
                                        autocompletion=complete_words("prefill", "decode")),
    batch: Optional[float] = typer.Option(None, help="Decode: requests per rank (DEP) or per instance (TP). Prefill: sequences per rank. Default: 16 for dep32 decode, else 1."),
    context: Optional[float] = typer.Option(None, click_type=TOKENS, help="Tokens already cached per request: 131072, 128K or 855000 (K = 1024). Default: 128K."),
    new_tokens: Optional[float] = typer.Option(None, click_type=TOKENS, help="Prefill: new tokens per rank (K = 1024). Default: 32K."),
    draft_tokens: Optional[int] = typer.Option(None, help="Decode: drafted tokens verified per step (k). Default: the model's (5 for V4.1-Flash)."),
    acceptance: Optional[float] = typer.Option(None, help="Decode: mean tokens emitted per verify step. Default: the model's (3.51)."),
    balancedness: Optional[float] = typer.Option(None, help="MoE mean/max rank load for DEP. Default: 0.94 with EPLB, 0.35 without."),
    eplb: bool = typer.Option(True, "--eplb/--no-eplb", help="Expert load balancing on (default) or off: sets default balancedness."),
    stack: Optional[List[str]] = STACK_OPT,
    engram_placement: Optional[str] = typer.Option(None, help="Engram tables: hbm (split over the instance's ranks), host (C2C) or peer-hbm (NVLink). Default: hbm for decode, host for prefill.",
                                                   autocompletion=complete_words("hbm", "host", "peer-hbm")),
    breakdown: bool = typer.Option(False, "--breakdown", "-b", help="Per-kernel table: time, speed of light, % of roofline, share of step, bound."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of result records."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV (one row per result, no breakdown)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors (exit status still tells)."),
    sets: Optional[List[str]] = SET_OPT,
    wide: bool = WIDE_OPT,
):
    """Step time and tokens/s of a model on racks, per parallel layout and phase.

    With no options: DeepSeek-V4.1-Flash on GB300 NVL72 and Vera Rubin NVL72 in the three
    engine shapes (DEP2 prefill at 32K new tokens per rank, DEP32 decode at 16 requests per
    rank x 6 tokens, TP8 decode at batch 1), at 128K context.

    Examples:

      rubinperf estimate

      rubinperf estimate -H vr-nvl72 -l dep32 --batch 64 --context 855000 --breakdown

      rubinperf estimate -l tp8 --acceptance 3.0 --json
    """
    from rubinperf.cli.options import check_output_flags
    from rubinperf.engine import run_estimates

    check_output_flags(as_json, as_csv, quiet)
    apply_wide(wide)
    records = run_estimates(model, hardware, layout, phase=phase, batch=batch, context=context, new_tokens=new_tokens,
                            draft_tokens=draft_tokens, acceptance=acceptance, balancedness=balancedness, eplb=eplb,
                            engram_placement=engram_placement, sets=sets, stacks=stack)
    from rubinperf.render.step import estimate_tables

    _emit(records, as_json, lambda rs: estimate_tables(rs, breakdown), as_csv=as_csv, quiet=quiet)


from rubinperf.cli import explain as cli_explain  # noqa: E402  (light: sympy loads inside the commands)

app.command("explain")(cli_explain.explain)
app.command("sensitivity")(cli_explain.sensitivity)


# ---------------------------------------------------------------- serving (rubinperf/cli/serving.py)

from rubinperf.cli import serving as cli_serving  # noqa: E402  (light: no model code at import)

app.command("pareto")(cli_serving.pareto)
app.command("compare")(cli_serving.compare)


# ---------------------------------------------------------------- validate


@app.command("validate")
def validate_cmd(
    points: Optional[str] = typer.Option(None, "--points", help="A TOML file of [[point]] tables. Default: the bundled validation/published.toml."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing; the exit status says whether every point is in band."),
    stack: Optional[str] = typer.Option(None, "--stack", help="Run every point that names no stack of its own on this "
                                        "stack (a bundled name or a path). Default: each point's stack, else its "
                                        "hardware's default_stack."),
    wide: bool = WIDE_OPT,
):
    """Compare predictions with published results; exit 0 when every point lies in its band, 1 otherwise.

    Each point carries its source, operating point, the published figure and a band for
    predicted/published. Points marked fitted informed a spec field and are not independent.

    Example: rubinperf validate --json
    """
    from rubinperf.render.step import validate_table
    from rubinperf.cli.options import check_output_flags
    from rubinperf.validate import POINTS_FILE, load_points, validate

    check_output_flags(as_json, quiet=quiet)
    apply_wide(wide)
    if stack is not None:
        from rubinperf.specs.stack import load_stack

        load_stack(stack)   # a bad name fails once, before any point runs
    records = validate(load_points(points or POINTS_FILE), stack=stack)
    _emit(records, as_json, validate_table, quiet=quiet)
    if not all(r["in_band"] for r in records):
        raise typer.Exit(1)


# ---------------------------------------------------------------- list


@list_app.command("hardware")
def list_hardware(as_json: bool = typer.Option(False, "--json", help="Print JSON records."), quiet: bool = QUIET_OPT,
                  wide: bool = WIDE_OPT):
    """Bundled hardware specs with their headline peaks.

    Example: rubinperf list hardware --json
    """
    from rubinperf.render import tables as report
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.loader import bundled_names

    apply_wide(wide)
    recs = []
    for name in bundled_names("hardware"):
        hw = load_hardware(name)
        recs.append({
            "name": hw.name, "description": hw.description, "preview": hw.preview, "default_stack": hw.default_stack,
            "fp4_dense_flops_per_s": hw.fp4_dense_flops_per_s, "fp8_dense_flops_per_s": hw.fp8_dense_flops_per_s,
            "bf16_dense_flops_per_s": hw.bf16_dense_flops_per_s, "hbm_capacity_bytes": hw.hbm_capacity_bytes,
            "hbm_bandwidth_bytes_per_s": hw.hbm_bandwidth_bytes_per_s,
            "nvlink_bandwidth_bytes_per_s": hw.nvlink_bandwidth_bytes_per_s, "nvlink_domain_size": hw.nvlink_domain_size,
            "gpu_power_w": hw.gpu_power_w, "price_usd_per_gpu_hour": hw.price_usd_per_gpu_hour,
        })

    def render(rs):
        rows = [[r["name"] + (" (preview)" if r["preview"] else ""), report.si(r["fp4_dense_flops_per_s"], "FLOP/s"),
                 report.si(r["fp8_dense_flops_per_s"], "FLOP/s"), report.si(r["bf16_dense_flops_per_s"], "FLOP/s"),
                 report.si(r["hbm_capacity_bytes"], "B"), report.si(r["hbm_bandwidth_bytes_per_s"], "B/s"),
                 report.si(r["nvlink_bandwidth_bytes_per_s"], "B/s"), str(r["nvlink_domain_size"]),
                 report.si(r["gpu_power_w"], "W"), f"${r['price_usd_per_gpu_hour']:.2f}"] for r in rs]
        col = report.col
        cols = [col("hardware", "left", min_width=11), col("FP4"), col("FP8", drop=3), col("BF16", drop=4), col("HBM"),
                col("HBM BW"), col("NVLink/dir", drop=2), col("domain", drop=5), col("power", drop=6),
                col("$/GPU-h", drop=1)]
        report.print_out(report.table("Hardware (dense peaks per GPU)", cols, rows))

    _emit(recs, as_json, render, quiet=quiet)


@list_app.command("stacks")
def list_stacks(as_json: bool = typer.Option(False, "--json", help="Print JSON records."), quiet: bool = QUIET_OPT,
                wide: bool = WIDE_OPT):
    """Bundled software stacks: kernel library and engine facts, and which racks name each as their default.

    Example: rubinperf list stacks --json
    """
    from rubinperf.render import tables as report
    from rubinperf.specs.hardware import load_hardware
    from rubinperf.specs.loader import bundled_names
    from rubinperf.specs.stack import load_stack

    apply_wide(wide)
    default_of: dict = {}
    for name in bundled_names("hardware"):
        hw = load_hardware(name)
        default_of.setdefault(hw.default_stack, []).append(hw.name)
    recs = []
    for name in bundled_names("stack"):
        st = load_stack(name)
        recs.append({"name": st.name, "description": st.description, "default_for": default_of.get(st.name, []),
                     "split_k_max": st.split_k_max, "mma_bytes_in_flight_per_sm": st.mma_bytes_in_flight_per_sm,
                     "pdl_hidden_fraction": st.pdl_hidden_fraction, "mma_compute_efficiency": st.mma_compute_efficiency,
                     "grouped_compute_efficiency": st.grouped_compute_efficiency,
                     "step_overhead_s": st.step_overhead_s, "dp_sync_per_rank_s": st.dp_sync_per_rank_s,
                     "eplb_target_balancedness": st.eplb_target_balancedness})

    def render(rs):
        col = report.col
        rows = [[r["name"], ", ".join(r["default_for"]) or "—", str(r["split_k_max"]),
                 report.si(r["mma_bytes_in_flight_per_sm"], "B"), f"{r['pdl_hidden_fraction']:.2f}",
                 f"{r['mma_compute_efficiency']:.2f}/{r['grouped_compute_efficiency']:.2f}",
                 report.fmt_time(r["dp_sync_per_rank_s"]), f"{r['eplb_target_balancedness']:.2f}"] for r in rs]
        cols = [col("stack", "left", min_width=12), col("default for", "left", wrap=True, min_width=10),
                col("split-K", drop=4), col("GEMM bytes in flight/SM", short="in flight", wrap=True, drop=3),
                col("PDL hidden", short="PDL", drop=5), col("GEMM/MoE eff.", short="eff."),
                col("DP sync/rank", short="DP sync", drop=2), col("EPLB bal.", short="EPLB", drop=1)]
        report.print_out(report.table("Software stacks (stacks/*.toml; --stack NAME|PATH)", cols, rows))

    _emit(recs, as_json, render, quiet=quiet)


@list_app.command("models")
def list_models(as_json: bool = typer.Option(False, "--json", help="Print JSON records."), quiet: bool = QUIET_OPT,
                wide: bool = WIDE_OPT):
    """Bundled model specs with total and active parameters implied by their shapes.

    Example: rubinperf list models
    """
    from rubinperf.render import tables as report
    from rubinperf.architecture import parameter_counts
    from rubinperf.specs.loader import bundled_names
    from rubinperf.specs.model import load_model

    apply_wide(wide)
    recs = []
    for name in bundled_names("model"):
        m = load_model(name)
        recs.append({"name": m.name, "description": m.description, "layers": m.num_layers,
                     "routed_experts": m.num_routed_experts, "experts_per_token": m.experts_per_token,
                     **parameter_counts(m)})

    def render(rs):
        rows = [[r["name"], str(r["layers"]), f"{r['routed_experts']} top-{r['experts_per_token']}",
                 report.si(r["total_params"]), report.si(r["active_params"]), report.si(r["draft_params"]),
                 report.si(r["engram_table_bytes"], "B") if r["engram_table_bytes"] else "—"] for r in rs]
        col = report.col
        cols = [col("model", "left", wrap=False), col("layers", drop=2), col("experts", drop=3),
                col("total params", short="total"), col("active/token", short="active"), col("draft/MTP", short="draft"),
                col("Engram tables", short="Engram", drop=1)]
        report.print_out(report.table("Models (parameters from the spec's shapes)", cols, rows))

    _emit(recs, as_json, render, quiet=quiet)


@list_app.command("layouts")
def list_layouts(as_json: bool = typer.Option(False, "--json", help="Print JSON records."), quiet: bool = QUIET_OPT):
    """Parallel layouts: dep<N> (data-parallel attention + expert parallel) and tp<N> (tensor parallel).

    Example: rubinperf list layouts
    """
    from rubinperf.render import tables as report
    from rubinperf.layout import LAYOUT_EXAMPLES

    recs = [{"name": n, "description": d} for n, d in LAYOUT_EXAMPLES]
    _emit(recs, as_json, lambda rs: report.print_out(
        report.table("Layouts (any N that divides the model: dep<N>, tp<N>)", [("layout", "left"), ("meaning", "left")],
                     [[r["name"], r["description"]] for r in rs])), quiet=quiet)


# ---------------------------------------------------------------- calibrate (rubinperf/cli/calibrate.py)

from rubinperf.cli import calibrate as cli_calibrate  # noqa: E402  (light: numpy and torch load inside the command)

app.command("calibrate")(cli_calibrate.calibrate)


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error becomes one line on stderr and exit status 2.

    Ctrl-C (SIGINT) and SIGTERM unwind the stack (a file half written is removed) and end
    with one line and status 130 (143). A failed write to standard output (a full disk, a
    closed pipe) is one line too. The click exceptions are matched by name: typer ships
    click itself in some versions.
    """
    from rubinperf.render.console import make_streams_safe

    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["--help"]
    make_streams_safe()
    apply_wide(False)  # each run starts compact; --wide is per command
    # numpy's floating-point warnings are not for users: results are checked for finiteness instead.
    warnings.filterwarnings("ignore", message=r"(overflow|divide by zero|invalid value|underflow) encountered",
                            category=RuntimeWarning)
    with _signals_unwind():
        try:
            code = _run(argv)
            _flush_stdout()
            return code
        except _Signal as sig:
            _fail(sig.message, sig.status)
        except KeyboardInterrupt:
            _fail("rubinperf: interrupted", 130)
    return 2  # pragma: no cover


def _click_command(argv: list[str]):
    """The click group for this run. typer builds a click command from each function's signature
    on every run (about 20 ms for all of rubinperf's); when the first word is a command (or a
    command group), only that one is built: its help, errors and behaviour are the same. Anything
    else (no command, group options, a misspelt name, shell completion) gets the whole group."""
    import copy

    name = argv[0] if argv else ""
    if name.startswith("-") or any(k.startswith("_RUBINPERF_COMPLETE") for k in os.environ):
        return typer.main.get_command(app)
    commands = [c for c in app.registered_commands
                if (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return typer.main.get_command(app)
    lite = copy.copy(app)
    lite.registered_commands, lite.registered_groups = commands, groups
    return typer.main.get_command(lite)


def _run(argv: list[str]) -> int:
    command = _click_command(argv)
    try:
        rv = command.main(args=argv, prog_name="rubinperf", standalone_mode=False)
        if rv == 130:  # typer turns a KeyboardInterrupt into a silent exit code 130; no command returns it
            _fail("rubinperf: interrupted", 130)
        return rv if isinstance(rv, int) else 0
    except SpecError as exc:
        _fail(f"rubinperf: error: {exc}")
    except BrokenPipeError:
        from rubinperf.render.console import silence_stdout

        silence_stdout()
        return 0
    except (KeyboardInterrupt, _Signal):
        raise
    except SystemExit:
        raise
    except RecursionError:
        _fail("rubinperf: error: the input is nested too deeply")
    except OSError as exc:  # a file or stream the user pointed at: name it
        doing = "cannot install shell completion: " if "--install-completion" in argv else ""
        _fail(f"rubinperf: error: {doing}{_os_error(exc)}")
    except Exception as exc:  # never a traceback for users
        kind = type(exc).__name__
        if kind == "Exit":
            return getattr(exc, "exit_code", 0)
        if kind == "Abort":
            if isinstance(exc.__context__, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt):
                _fail("rubinperf: interrupted", 130)
            _fail("rubinperf: aborted")
        if hasattr(exc, "format_message"):
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else "rubinperf: "
            _fail(where + "error: " + exc.format_message())
        _fail(f"rubinperf: internal error: {kind}: {exc}")
    return 2  # pragma: no cover


def _os_error(exc: OSError) -> str:
    from rubinperf.errors import shorten

    what = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{shorten(str(exc.filename))}: {what}"
    return f"cannot read or write a file: {what}"


def _flush_stdout() -> None:
    """Output is flushed here, not at exit, so that a full disk or a closed pipe is one line."""
    from rubinperf.render.console import silence_stdout

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    except OSError as exc:
        silence_stdout()
        _fail(f"rubinperf: error: cannot write to standard output: {exc.strerror or exc}")
    except ValueError:  # a closed stream
        pass


class _Signal(BaseException):
    """SIGINT or SIGTERM during a command: not an Exception, so nothing on the way swallows it."""

    def __init__(self, signum: int):
        from rubinperf.entry import MESSAGES, exit_status

        super().__init__(signum)
        self.message = MESSAGES.get(signum, "rubinperf: interrupted")
        self.status = exit_status(signum)


def _raise_signal(signum, frame):
    import signal

    for s in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not interrupt the clean-up
        signal.signal(s, signal.SIG_IGN)
    raise _Signal(signum)


class _signals_unwind:
    """SIGINT/SIGTERM raise _Signal while a command runs (main thread only); restored after."""

    def __enter__(self):
        import signal
        import threading

        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(s)
                if old is not None:
                    self.saved[s] = old
                    signal.signal(s, _raise_signal)
        return self

    def __exit__(self, *exc):
        import signal

        for s, old in self.saved.items():
            signal.signal(s, old)
        return False


def _fail(msg: str, status: int = 2):
    from rubinperf.errors import shorten

    from rubinperf.render.console import silence_stdout

    try:
        sys.stdout.flush()  # what was printed before the error goes first (and a full disk is not a second error)
    except (OSError, ValueError):
        silence_stdout()
    sys.stderr.write(shorten(" ".join(str(msg).split()), 1000) + "\n")
    raise SystemExit(status)


if __name__ == "__main__":
    raise SystemExit(main())
