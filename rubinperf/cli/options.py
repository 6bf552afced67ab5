"""Every command option shared by two or more commands, declared once, and the rules between them.

Each option is a typer `Annotated` type, entered with its default under the parameter name that
takes it: a command decorated with `@shared_options()` writes that name bare (`*, model, hardware`)
and gets the option, its flags, help, completion and default (typer prints it as `[default: ...]`);
a command that means something else by a name writes `name: Type = default` itself. Options of one
command only are declared in that command. Also here: the rules between output options (--json,
--csv, --quiet, --wide), the one place records are printed in the format asked for, and numbers
with units (128K, 4GB).

Light at import time (typer, click and re only): every command's module imports this.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import click as _click
import typer

from rubinperf.errors import SpecError
from rubinperf.specs.defaults import DEFAULT_HARDWARE, DEFAULT_MODEL  # noqa: F401  (the commands take their defaults from here)

# ---------------------------------------------------------------- shell completion of values


def complete_names(kind: str):
    """Tab-completion of bundled spec names (hardware, model, workload, stack)."""
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
DTYPES = "fp4, fp8, bf16 or fp32"
DTYPE_WORDS = ("fp4", "fp8", "bf16", "fp32")


# ---------------------------------------------------------------- numbers with units on the command line

def parse_tokens(text: str) -> float:
    """A token count: 131072, 128K (= 131,072: K is 1024 and M is 1024², the way context windows
    are quoted, and the way tables print them), 1M, 855000, 1.5e5 (rubinperf.units parses it)."""
    from rubinperf.units import parse_tokens as parse

    try:
        return parse(str(text))
    except SpecError:
        raise ValueError(f"expected a token count such as 131072, 128K or 1M (K = 1024), got {text!r}") from None


class _CountType(_click.ParamType):
    """A count given with its unit: `parse` reads the text (a ValueError carries the message), `allowed` says
    whether the value is in range (`outside` the message when not); a number passes through as a float."""

    outside = ""

    def parse(self, text: str) -> float:
        raise NotImplementedError

    def allowed(self, v: float) -> bool:
        raise NotImplementedError

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        try:
            v = self.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if not self.allowed(v):
            self.fail(f"{self.outside}, got {value!r}", param, ctx)
        return v


class TokensType(_CountType):
    name = "TOKENS"
    outside = "expected 0 or a count from 1 to 1e12 tokens"

    def parse(self, text):
        return parse_tokens(text)

    def allowed(self, v):
        return v == 0 or 1 <= abs(v) <= 1e12   # sizes from one token up: 1e-320 is no count


class BytesType(_CountType):
    """A byte count: 4e9, 4GB (SI: 4e9), 4GiB (2^32), as `--set` parses sizes."""

    name = "BYTES"
    outside = "expected 1 byte to 1PB"

    def parse(self, text):
        from rubinperf.units import parse_value

        try:
            return parse_value(str(text), "copy_bytes")
        except SpecError:
            raise ValueError(f"expected a byte count such as 4e9, 4GB or 4GiB, got {text!r}") from None

    def allowed(self, v):
        return 1 <= v <= 1e15   # sizes from one byte up


TOKENS = TokensType()
BYTES = BytesType()


# ---------------------------------------------------------------- defaults

DEFAULT_RACK = DEFAULT_HARDWARE[0]     # the rack of commands that take one
DEFAULT_WORKLOAD = "agentx"            # the serving sweeps' workload
DEFAULT_MAX_BATCH = 1024               # the largest decode batch they sweep


# ---------------------------------------------------------------- the options of a command by parameter name

# A command's keyword-only parameter written bare (no type, no default) takes its option and default from a table:
# one name, one option, in every command that leaves it bare. Each shared option is entered with its declaration;
# a command that means something else by a name writes the type and the default itself.
SHARED: dict[str, tuple] = {}   # parameter name -> (option, default)
_SWEEP_ONLY: dict[str, tuple] = {}


def _shared(name: str, default, option, table: dict = SHARED):
    """`option`, entered in `table` as what a bare parameter `name` takes, with its default."""
    table[name] = (option, default)
    return option


def _sweep(name: str, default, option):
    """`option` as the serving sweeps (pareto, compare, report) take it: racks side by side, a stack and a --set
    per rack, the draft length k."""
    return _shared(name, default, option, _SWEEP_ONLY)


# ---------------------------------------------------------------- the specs evaluated

MODEL_HELP = ("Bundled model name, a path to a TOML file, or a Hugging Face config.json (or a directory "
              "holding one).")
HARDWARE_HELP = "Bundled hardware name or a path to a TOML file."
STACK_ONE_HELP = ("Software stack: a bundled name (rubinperf list stacks) or a path to a stack TOML file. "
                  "Default: the stack the hardware file names (default_stack).")
STACK_HELP = (STACK_ONE_HELP + " Give it once for every rack, or once per --hardware in the same order: "
              "-H gb300-nvl72 -H vr-nvl72 --stack vllm-rubin-nov2026 --stack vllm-rubin-nov2026 runs both racks "
              "on the November software.")

Model = _shared("model", DEFAULT_MODEL, Annotated[str, typer.Option(
    "--model", "-m", help=MODEL_HELP, autocompletion=complete_names("model"))])
Hardware = _shared("hardware", DEFAULT_RACK, Annotated[str, typer.Option(
    "--hardware", "-H", help=HARDWARE_HELP, autocompletion=complete_names("hardware"))])
Racks = _sweep("hardware", None, Annotated[Optional[List[str]], typer.Option(
    "--hardware", "-H", help="Rack (repeatable). Default: gb300-nvl72 and vr-nvl72; the first is the baseline of ratios.",
    autocompletion=complete_names("hardware"))])
Stack = _shared("stack", None, Annotated[Optional[str], typer.Option(
    "--stack", help=STACK_ONE_HELP, autocompletion=complete_names("stack"))])
Stacks = _sweep("stack", None, Annotated[Optional[List[str]], typer.Option(
    "--stack", help=STACK_HELP, autocompletion=complete_names("stack"))])

SET_HELP = ("What-if override of a spec field, repeatable: --set hbm_bandwidth=30TB/s, --set hbm_bandwidth=+20%, "
            "--set sm_count=x2, --set hardware.nvlink_latency_s=2e-6 (a bare number only where the key names the "
            "unit), --set model.mean_accepted_tokens=3. rubinperf list fields: every field, its unit and range.")
Sets = _shared("sets", None, Annotated[Optional[List[str]], typer.Option("--set", "-s", help=SET_HELP)])
RackSets = _sweep("sets", None, Annotated[Optional[List[str]], typer.Option("--set", "-s", help=(
    "What-if override, repeatable: --set hbm_bandwidth=30TB/s, --set hbm_bandwidth=+20% (or x1.2), "
    "--set workload.prefix_hit_rate=0.9, "
    "--set model.mean_accepted_tokens=3. Prefix a rack name to change one rack only: "
    "--set gb300-nvl72:dp_sync_per_rank=0.3ms."))])


# ---------------------------------------------------------------- the operating point of one step
# (the serving sweeps take --draft-tokens, --acceptance and --eplb with their own help: each follows the step's)

Layout = Annotated[str, typer.Option("--layout", "-l", help="dep<N> or tp<N>.", autocompletion=complete_words(*LAYOUT_WORDS))]
Phase = _shared("phase", None, Annotated[Optional[str], typer.Option(
    "--phase", help="prefill or decode. Default: prefill for dep2 (and dep1), decode otherwise.",
    autocompletion=complete_words("prefill", "decode"))])
Batch = _shared("batch", None, Annotated[Optional[float], typer.Option(
    "--batch", help="Decode: requests per rank (DEP) or per instance (TP). Prefill: sequences per rank. "
         "Default: 16 for dep32 decode, else 1.")])
Context = _shared("context", None, Annotated[Optional[float], typer.Option(
    "--context", click_type=TOKENS, help="Tokens already cached per request: 131072, 128K or 855000 (K = 1024). Default: 128K.")])
NewTokens = _shared("new_tokens", None, Annotated[Optional[float], typer.Option(
    "--new-tokens", click_type=TOKENS, help="Prefill: new tokens per rank (K = 1024). Default: 32K.")])
DraftTokens = _shared("draft_tokens", None, Annotated[Optional[int], typer.Option(
    "--draft-tokens", help="Decode: drafted tokens verified per step (k). Default: the model's (5 for V4.1-Flash).")])
DraftLength = _sweep("draft_tokens", None, Annotated[Optional[int], typer.Option(
    "--draft-tokens", "-k", help="Draft length k. Default: the model's (5); another k keeps the per-token acceptance rate.")])
Acceptance = _shared("acceptance", None, Annotated[Optional[float], typer.Option(
    "--acceptance", help="Decode: mean tokens emitted per verify step. Default: the model's (3.51 for V4.1-Flash).")])
SweepAcceptance = _sweep("acceptance", None, Annotated[Optional[float], typer.Option(
    "--acceptance", help="Mean tokens emitted per verify step. Default: the model's (3.51 at k = 5).")])
Balancedness = _shared("balancedness", None, Annotated[Optional[float], typer.Option(
    "--balancedness", help="MoE mean/max rank load for DEP. Default: 0.94 with EPLB, 0.35 without.")])
Eplb = _shared("eplb", True, Annotated[bool, typer.Option(
    "--eplb/--no-eplb", help="Expert load balancing on (default) or off: sets default balancedness.")])
SweepEplb = _sweep("eplb", True, Annotated[bool, typer.Option(
    "--eplb/--no-eplb", help="Expert load balancing on (default) or off: sets the decode and prefill balancedness.")])


# ---------------------------------------------------------------- one kernel

Launch = _shared("launch", "eager", Annotated[str, typer.Option(
    "--launch", help="eager: the kernel issued from the host behind others, as Triton's do_bench and Nsight "
                     "time it (a stream's kernel boundary; the host's dispatch overlaps the GPU); stream: calls "
                     "issued back to back from the host (each at least its host dispatch); cold: launched alone "
                     "after a synchronisation (host dispatch + driver + wake-up in series); graph: one kernel "
                     "among many in a CUDA graph, as the step's ops are timed (the graph boundary, less what "
                     "programmatic dependent launch hides).",
    autocompletion=complete_words("eager", "stream", "cold", "graph"))])


# ---------------------------------------------------------------- serving sweeps (pareto, compare)

Workload = _shared("workload", DEFAULT_WORKLOAD, Annotated[str, typer.Option(
    "--workload", "-w", help="Bundled workload (examples/: agentx, chat-8k1k) or a path to a TOML file.",
    autocompletion=complete_names("workload"))])
DecodeLayouts = _shared("decode_layout", None, Annotated[Optional[List[str]], typer.Option(
    "--decode-layout", "-l", help="Decode engine shape, repeatable. Default: the engine shapes of each rack's stack "
                                  "(serving.decode_layouts: tp4, dep16, dep32 on GB300; tp8, dep16, dep32 on Rubin).",
    autocompletion=complete_words(*LAYOUT_WORDS))])
PrefillLayouts = _shared("prefill_layout", None, Annotated[Optional[List[str]], typer.Option(
    "--prefill-layout", help="Prefill engine shape, repeatable. Default: the workload's (dep2).",
    autocompletion=complete_words(*LAYOUT_WORDS))])
MaxBatch = _shared("max_batch", DEFAULT_MAX_BATCH, Annotated[int, typer.Option(
    "--max-batch", help="Largest decode batch swept (requests per rank for DEP, per instance for TP).")])
InteractivityStat = _shared("interactivity_stat", "p90", Annotated[str, typer.Option(
    "--interactivity-stat", help="Statistic of tokens/s per user the frontier and --at-interactivity use: p90 (the "
                                 "speed 90% of users reach; the published figures' statistic), p50 or mean.",
    autocompletion=complete_words("p90", "p50", "mean"))])
Ttft = _shared("ttft", None, Annotated[Optional[str], typer.Option(
    "--ttft", help="Keep only points whose time to first token (prefix loads + prefill + KV transfer) is at most "
                   "this, with its unit: 2s or 500ms (milliseconds as aiconfigurator's --ttft; a bare number is refused).")])
Tpot = _shared("tpot", None, Annotated[Optional[str], typer.Option(
    "--tpot", help="Keep only points whose time per output token (1 / tokens/s per user, at --interactivity-stat) "
                   "is at most this, with its unit: 20ms or 0.02s (milliseconds as aiconfigurator's --tpot; a bare "
                   "number is refused).")])
TotalGpus = _shared("total_gpus", None, Annotated[Optional[int], typer.Option(
    "--total-gpus", help="Size the deployment in whole instances within this many GPUs (e.g. 72: 7P1D is 7 DEP2 "
                         "prefill and 1 DEP32 decode instance, as the vLLM posts write them); throughput is counted "
                         "over all of them. Default: a continuous prefill/decode ratio.")])
ServingMode = _shared("serving", "disagg", Annotated[str, typer.Option(
    "--serving", help="disagg (prefill and decode pools, the default), agg (each engine shape of the stack as one "
                      "aggregated engine, swept over closed-loop concurrency at the workload's lengths), or both "
                      "(each frontier, and which wins where).", autocompletion=complete_words("disagg", "agg", "both"))])


Isl = _shared("isl", None, Annotated[Optional[float], typer.Option(
    "--isl", click_type=TOKENS, help="Input tokens per turn (prompt, cached prefix included), as aiconfigurator's "
                                     "--isl: 8192 or 8K (K = 1024). Default: the workload's (serve: 8K). The "
                                     "workload's prefix hit rate is kept, and said so under the tables, unless "
                                     "--prefix-hit is given.")])
Osl = _shared("osl", None, Annotated[Optional[float], typer.Option(
    "--osl", click_type=TOKENS, help="Output tokens per turn, as aiconfigurator's --osl: 1024 or 1K. Default: the "
                                     "workload's (serve: 1K).")])
TurnGap = _sweep("turn_gap", None, Annotated[Optional[float], typer.Option(
    "--turn-gap", help="Seconds a session waits between a reply and its next turn (the aggregated engines' closed "
                       "loop: think time). Default: the workload's turn_gap_s (agentx: 7 s, the median gap between "
                       "agentic requests).")])
PrefixHit = _shared("prefix_hit", None, Annotated[Optional[str], typer.Option(
    "--prefix-hit", help="Fraction of a turn's input found in the prefix cache: 0.9 or 90%. Default: the workload's "
                         "(serve: 0, random prompts).")])


# ---------------------------------------------------------------- output

JsonRecord = Annotated[bool, typer.Option("--json", help="Print one JSON record.")]
JsonRecords = _shared("as_json", False, Annotated[bool, typer.Option(
    "--json", help="Print JSON records instead of tables.")])
Quiet = _shared("quiet", False, Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print nothing but errors (exit status still tells).")])
QuietPlot = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Print nothing but errors (exit status still tells; --plot still writes).")]
Wide = _shared("wide", False, Annotated[bool, typer.Option(
    "--wide", help="Tables with every column at full width (default: fit the terminal, leaving out the least "
                   "needed columns, named under the table).")])
Csv = _shared("as_csv", False, Annotated[bool, typer.Option(
    "--csv", help="Print CSV instead of tables (one row per record; nested fields are in --json only).")])
SaveDir = _shared("save_dir", None, Annotated[Optional[str], typer.Option(
    "--save-dir", help="Also write a bundle to this directory: the tables (CSV and JSON), the charts (SVG; PNG with "
                       "matplotlib), report.html, the command line, the resolved specs (TOML) and the versions, "
                       "listed in its README.txt. A new directory appears whole or not at all; files of an "
                       "existing one are replaced one by one, and only regular files.")])

SWEEP = {**SHARED, **_SWEEP_ONLY}   # the serving sweeps' table


def shared_options(table: dict = SHARED):
    """Decorator: each bare keyword-only parameter of the command (no type, no default) takes its option and
    default from `table` (SHARED or SWEEP), in place, in the order the signature lists them (the order --help
    shows). typer reads the signature; a direct call gets the same defaults. Nothing is evaluated here: a
    command's own annotations stay as written until typer builds the one command a run needs."""
    def fill(command):
        code, given = command.__code__, command.__annotations__
        defaults = dict(command.__kwdefaults__ or {})
        for name in code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]:
            if name in given or name in defaults:
                continue
            if name not in table:
                raise TypeError(f"{command.__qualname__}: no shared option {name!r}")
            given[name], defaults[name] = table[name]
        command.__kwdefaults__ = defaults
        return command
    return fill


# The command line of this run (set by rubinperf.cli.main): what a report or a bundle records.
_ARGV: list[str] = []


def set_command_line(argv) -> None:
    _ARGV[:] = [str(a) for a in argv]


def command_line() -> str:
    """`rubinperf ARGS...`, quoted for a POSIX shell: the exact command that ran."""
    import shlex

    return shlex.join(["rubinperf", *_ARGV])


def apply_wide(wide: bool) -> None:
    from rubinperf.render.tables import set_wide

    set_wide(wide)


def check_output_flags(as_json: bool = False, as_csv: bool = False, quiet: bool = False) -> None:
    """--json and --csv are two formats of one output: choose one. --quiet prints nothing, so
    with --json or --csv it would silently drop what was asked for: an error too."""
    if as_json and as_csv:
        raise SpecError("--json and --csv: choose one output format")
    if quiet and (as_json or as_csv):
        raise SpecError(f"--quiet and {'--json' if as_json else '--csv'}: --quiet prints nothing; choose one")


def emit(records, as_json: bool, render_table, as_csv: bool = False, quiet: bool = False) -> None:
    """Print `records` as asked: JSON, CSV, the command's table (`render_table(records)`), or nothing."""
    from rubinperf.render import output

    check_output_flags(as_json, as_csv, quiet)
    if as_json:
        output.emit_text(output.to_json(records))
    elif as_csv:
        output.emit_text(output.to_csv(records))
    elif not quiet:
        render_table(records)
