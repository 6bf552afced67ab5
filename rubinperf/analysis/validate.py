"""Reference points from published results, and the model's prediction for each.

The points are data (`validation/published.toml`): each names its source, hardware,
model, layout, operating point, the published figure and a band for predicted/published.
Predictions go through the same path the CLI uses (specs -> scenario -> step/serving).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rubinperf.errors import SpecError
from rubinperf.units import fmt_time
from rubinperf.bundled import data_root, folder
from rubinperf.specs.loader import read_toml

POINTS_FILE = folder("validation") / "published.toml"


@dataclass(frozen=True)
class RefPoint:
    id: str
    source: str
    metric: str
    hardware: str
    layout: str       # dep<N> / tp<N>, or "sweep" for serving points (the sweep picks layouts)
    phase: str        # prefill, decode, or serving
    published: float
    band: tuple[float, float]
    model: str = "deepseek-v4.1-flash"
    batch: float | None = None
    context: float | None = None
    acceptance: float | None = None
    workload: str | None = None
    interactivity: float | None = None
    baseline_hardware: str | None = None
    stack: str | None = None            # the stack the point's hardware runs (default: the hardware's default_stack)
    baseline_stack: str | None = None   # the stack of baseline_hardware (default: its default_stack)
    interactivity_stat: str | None = None   # tokens_per_s_per_user: p90, p50 or mean (default: mean, the step's)
    fixed_acceptance: bool = False      # the run forced every request to the mean acceptance: only the step spreads
    note: str = ""
    fitted: bool = False
    op: str | None = None          # op_time_ms / step_time_without_op_ms: the breakdown rows whose name starts with it
    launch: str | None = None      # kernel_error_unseen: the rows of one launch mode (graph, eager, stream, cold)
    data: str | None = None        # kernel_error_unseen: measurements (relative to the repository) the spec was not fitted to
    previous: float | None = None  # the prediction of the last release's model (rubinperf 0.1.0)
    changed: str = ""              # what moved the prediction since that release (stack, kernel terms, P90, ...)
    new_tokens: float | None = None     # prefill: new tokens per rank of the step
    draft_tokens: float | None = None   # decode: drafted tokens verified per step (0: no speculative decoding)
    prefix_hit_rate: float | None = None  # tokens_per_s_per_node in prefill: the published input counts cache hits too
    without: dict = field(default_factory=dict)  # gpu_time_saved*: the spec fields (model, hardware or stack) before the change
    set: tuple = ()                     # --set overrides the run had (the checkpoint's formats: model.dense_dtype=fp8, ...)
    input_tokens: float | None = None   # offline_tokens_per_s_per_gpu: prompt tokens of every request (fixed ISL)
    output_tokens: float | None = None  # offline_tokens_per_s_per_gpu: generated tokens of every request (fixed OSL)
    kv_memory_fraction: float | None = None  # offline_tokens_per_s_per_gpu: share of the free HBM the engine gives its KV
    # serve: a closed-loop benchmark point of an aggregated engine (rubinperf serve), as it was run
    quantity: str | None = None         # the serve record's field compared (total_tokens_per_s_per_gpu, median_tpot_ms, ...)
    concurrency: float | None = None
    isl: float | None = None
    osl: float | None = None
    random_range_ratio: float | None = None
    range_convention: str | None = None
    run_with: dict = field(default_factory=dict)   # spec fields as the run set them (budget, KV bytes, weight formats)
    # simulated_request_rate: an open-loop benchmark run (vllm bench serve / sglang.bench_serving --request-rate)
    request_rate: float | None = None   # requests per second the client sent (Poisson unless burstiness)
    num_requests: float | None = None   # requests of the run (--num-prompts)
    burstiness: float | None = None     # gamma shape of the gaps (1: Poisson)
    seed: float | None = None           # seed of the simulated arrivals and lengths (default 0)
    extra: dict = field(default_factory=dict, compare=False)


_REQUIRED = ("id", "source", "metric", "hardware", "layout", "phase", "published", "band")
_OPTIONAL = ("model", "batch", "context", "acceptance", "workload", "interactivity", "baseline_hardware", "stack",
             "baseline_stack", "interactivity_stat", "fixed_acceptance", "note", "fitted",
             "op", "launch", "data", "previous", "changed", "new_tokens", "draft_tokens", "prefix_hit_rate", "without",
             "set", "input_tokens", "output_tokens", "kv_memory_fraction",
             "quantity", "concurrency", "isl", "osl", "random_range_ratio", "range_convention", "run_with",
             "request_rate", "num_requests", "burstiness", "seed")
# What each key holds: a string, a positive (or non-negative) finite number, or true/false.
_STRINGS = ("id", "source", "metric", "hardware", "layout", "phase", "model", "workload", "baseline_hardware", "stack",
            "baseline_stack", "interactivity_stat", "note", "changed",
            "op", "launch", "data", "quantity", "range_convention")
_POSITIVE = ("published", "batch", "acceptance", "interactivity", "previous", "new_tokens", "input_tokens",
             "output_tokens", "kv_memory_fraction", "concurrency", "isl", "osl", "request_rate", "num_requests",
             "burstiness")
_NON_NEGATIVE = ("context", "draft_tokens", "prefix_hit_rate", "random_range_ratio", "seed")
# The range of each number: outside, a typo or a unit mistake (a figure of 1e308 is no published figure).
_RANGES = {"published": (1e-9, 1e12), "previous": (1e-9, 1e12), "batch": (1, 1e6), "acceptance": (1, 64),
           "interactivity": (1e-3, 1e6), "new_tokens": (1, 1e8), "context": (0, 1e8), "draft_tokens": (0, 64),
           "prefix_hit_rate": (0, 1), "input_tokens": (1, 1e8), "output_tokens": (1, 1e8), "kv_memory_fraction": (1e-3, 1),
           "concurrency": (1, 1e6), "isl": (1, 1e8), "osl": (1, 1e8), "random_range_ratio": (0, 1),
           "request_rate": (1e-6, 1e6), "num_requests": (1, 1e6), "burstiness": (1e-3, 1e3), "seed": (0, 2**63 - 1)}


def _check_types(where: str, raw: dict) -> None:
    for key, v in raw.items():
        if key in _STRINGS and not (isinstance(v, str) and (v.strip() or key in ("note", "changed"))):
            raise SpecError(f"{where}: {key}: expected a non-empty string, got {v!r}")
        if key in _POSITIVE + _NON_NEGATIVE:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise SpecError(f"{where}: {key}: expected a finite number, got {v!r}")
            if v < 0 or (v == 0 and key in _POSITIVE):
                raise SpecError(f"{where}: {key}: expected a {'positive' if key in _POSITIVE else 'non-negative'} "
                                f"number, got {v!r}")
            lo, hi = _RANGES[key]
            if not lo <= v <= hi:
                raise SpecError(f"{where}: {key}: expected {lo:g} to {hi:g}, got {v!r}")
        if key == "set" and not (isinstance(v, list) and all(isinstance(x, str) and "=" in x for x in v)):
            raise SpecError(f"{where}: set: expected a list of key=value strings, got {v!r}")
        if key in ("fitted", "fixed_acceptance") and not isinstance(v, bool):
            raise SpecError(f"{where}: {key}: expected true or false, got {v!r}")
        if key in ("without", "run_with") and not (isinstance(v, dict) and v and all(
                isinstance(x, (bool, str)) or (isinstance(x, (int, float)) and math.isfinite(x)) for x in v.values())):
            raise SpecError(f"{where}: {key}: expected a table of spec fields and their values (numbers, true/false "
                            f"or names), got {v!r}")
        if key == "interactivity_stat" and v not in ("p90", "p50", "mean"):
            raise SpecError(f"{where}: interactivity_stat: expected p90, p50 or mean, got {v!r}")


def load_points(path: str | Path = POINTS_FILE) -> list[RefPoint]:
    path = Path(path)
    data = read_toml(path)
    if set(data) != {"point"} or not isinstance(data["point"], list):
        raise SpecError(f"{path}: expected only [[point]] tables")
    points = []
    for i, raw in enumerate(data["point"]):
        if not isinstance(raw, dict):
            raise SpecError(f"{path}: point {i + 1}: expected a [[point]] table, got {raw!r}")
        where = f"{path}: point {raw.get('id', i + 1)}"
        unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
        if unknown:
            raise SpecError(f"{where}: unknown key '{sorted(unknown)[0]}'")
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            raise SpecError(f"{where}: missing key '{missing[0]}'")
        _check_types(where, raw)
        band = raw["band"]
        numbers = isinstance(band, list) and len(band) == 2 and all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in band)
        if not (numbers and 0 < band[0] <= 1 <= band[1]):
            raise SpecError(f"{where}: band: expected [low, high] around 1, got {band!r}")
        if raw["metric"] not in METRICS:
            raise SpecError(f"{where}: metric: expected one of {', '.join(METRICS)}, got {raw['metric']!r}")
        if "set" in raw:
            raw = {**raw, "set": tuple(raw["set"])}
        points.append(RefPoint(**{**raw, "band": (float(band[0]), float(band[1])), "published": float(raw["published"])}))
    return points


# ---------------------------------------------------------------- metrics


def _step(p: RefPoint, before: dict | None = None, **changes):
    """The point's step; `before` replaces spec fields (the model's, or its rack's hardware or stack) first."""
    import dataclasses

    from rubinperf.specs.layout import parse_layout
    from rubinperf.step.point import make_point
    from rubinperf.step.timing import step

    m, (hw,) = _load_specs(p.model, [p.hardware], sets=list(p.set) or None, stacks=[p.stack] if p.stack else None)
    if before:  # checked as --set checks an override: the field's type and range, the spec's own rules
        from rubinperf.specs.overrides import apply_overrides

        unknown = sorted(set(before) - {f.name for f in dataclasses.fields(hw)} - {f.name for f in dataclasses.fields(m)})
        if unknown:
            raise SpecError(f"point {p.id}: without: {unknown[0]!r} is not a field of {p.model} or of "
                            f"{p.hardware}'s hardware or stack")
        sets = [f"{k}={str(v).lower() if isinstance(v, bool) else v if isinstance(v, str) else repr(v)}"
                for k, v in before.items()]
        try:
            specs = apply_overrides(sets, hardware=hw, model=m)
        except SpecError as exc:
            raise SpecError(f"point {p.id}: without: {str(exc).removeprefix('--set ')}") from None
        hw, m = specs["hardware"], specs["model"]
    lay = parse_layout(p.layout)
    args = dict(phase=p.phase, batch=p.batch, context=p.context, acceptance=p.acceptance)
    if p.new_tokens is not None:
        args["new_tokens"] = p.new_tokens
    if p.draft_tokens is not None:
        args["draft_tokens"] = int(p.draft_tokens)
    args.update(changes)
    from rubinperf.step.estimates import check_finite

    def run():
        r = step(m, hw, lay, make_point(m, hw, lay, **args))
        check_finite(r)
        return r

    if before:
        return run()
    # Inside a validate, points that time the same step on the same loaded specs (_load_specs: one object per spec
    # and overrides) share it: a step is a pure function of the specs, the layout and the operating point.
    return _shared(("step", id(m), id(hw), p.layout, tuple((k, type(v), v) for k, v in args.items())), run)


def _tokens_per_s_per_user(p: RefPoint) -> tuple[float, str]:
    r = _step(p)
    mean = float(r.tokens_per_s_per_user)
    why = f"step {fmt_time(float(r.expected_s))}, bound {r.bound}"
    if p.interactivity_stat in (None, "mean"):
        return mean, why
    from rubinperf.serving.interactivity import speed_factor

    pt, hw = r.point, r.hw
    nu = 1e12 if p.fixed_acceptance else float(hw.acceptance_concentration)
    # (the one statistic asked for: speed_factors' entry for it, without the other statistics' solves)
    f = speed_factor(int(pt.k(r.model)), float(pt.accepted(r.model)), nu, float(hw.step_time_spread), p.interactivity_stat)
    return mean * f, (f"{why}; {p.interactivity_stat.upper()} = {f:.3f} x mean {mean:,.0f}"
                      + (" (fixed acceptance: step spread only)" if p.fixed_acceptance else ""))


def _tokens_per_s_per_gpu(p: RefPoint) -> tuple[float, str]:
    r = _step(p)
    return float(r.tokens_per_s_per_gpu), f"step {fmt_time(float(r.expected_s))}, bound {r.bound}"


def _tokens_per_s_per_node(p: RefPoint) -> tuple[float, str]:
    """Tokens/s of one node (a tray: an 8-GPU HGX board) of the engine; prefill counts the input tokens a
    cache hit spared as well (new tokens / (1 - prefix_hit_rate)), as operators count prefill input."""
    r = _step(p)
    rec_node = float(r.tokens_per_s_per_gpu) * r.hw.gpus_per_tray
    hit = p.prefix_hit_rate or 0.0
    if p.phase == "prefill" and hit:
        if not hit < 1:
            raise SpecError(f"point {p.id}: prefix_hit_rate: expected below 1, got {hit:g}")
        rec_node /= 1 - hit
    nic = sum(float(o.time.scale_out_s * o.op.repeat * o.op.stretch) for o in r.ops)
    return rec_node, (f"step {fmt_time(float(r.expected_s))}, bound {r.bound}, {r.hw.gpus_per_tray} GPUs per node, "
                      f"NIC time {fmt_time(nic)} (before overlap)"
                      + (f"; input counts {hit:.1%} cache hits" if p.phase == "prefill" and hit else ""))


def _context_growth(p: RefPoint) -> tuple[float, str]:
    short, long = _step(p, context=131072), _step(p, context=855_000)
    return float(long.expected_s / short.expected_s), (
        f"{fmt_time(float(short.expected_s))} -> {fmt_time(float(long.expected_s))}")


def _op_rows(p: RefPoint, r) -> list[dict]:
    if not p.op:
        raise SpecError(f"point {p.id}: {p.metric} needs op (the start of a breakdown row's name)")
    rows = [x for x in r.by_name().values() if x["part"] == "target" and x["kernel"].lower().startswith(p.op.lower())]
    if not rows:
        raise SpecError(f"point {p.id}: op: no target op of the step starts with {p.op!r}")
    return rows


def _op_time(p: RefPoint) -> tuple[float, str]:
    r = _step(p)
    rows = _op_rows(p, r)
    t = sum(float(x["expected_s"]) for x in rows)
    terms = {k: sum(float(x["terms"][k]) for x in rows) for k in rows[0]["terms"]}
    return t * 1e3, "terms: " + ", ".join(f"{k} {fmt_time(v)}" for k, v in terms.items() if v > 0)


def _time_without_op(p: RefPoint) -> tuple[float, str]:
    r = _step(p)
    t = float(r.gpu_s) - sum(float(x["expected_s"]) for x in _op_rows(p, r))
    return t * 1e3, f"GPU time {fmt_time(float(r.gpu_s))}, of which the draft {fmt_time(float(r.part_s('draft')))}"


def _saved(p: RefPoint) -> tuple[float, float, str]:
    """GPU time of the point's step before (the `without` fields) and after a change of the model, stack or silicon."""
    if not p.without:
        raise SpecError(f"point {p.id}: {p.metric} needs without (the spec fields before the change)")
    after, before = _step(p), _step(p, before=p.without)
    t0, t1 = float(before.gpu_s), float(after.gpu_s)
    changed = ", ".join(f"{k} = {v}" for k, v in p.without.items())
    return t0, t1, f"GPU time {fmt_time(t0)} with {changed} -> {fmt_time(t1)} as bundled"


def _gpu_time_saved(p: RefPoint) -> tuple[float, str]:
    """Share of the step's GPU time a change saves: 1 - after / before (a post's "x% faster" forward; a throughput
    gain g is a saving of g / (1 + g))."""
    t0, t1, why = _saved(p)
    return 1 - t1 / t0, why


def _gpu_time_saved_us(p: RefPoint) -> tuple[float, str]:
    t0, t1, why = _saved(p)
    return (t0 - t1) * 1e6, why


def _kernel_error_unseen(p: RefPoint) -> tuple[float, str]:
    """Median |ln(measured / expected)| of the committed hardware spec on measurements it was not fitted to."""
    from rubinperf.calibrate.fit import predict
    from rubinperf.calibrate.plan import read_csv
    from rubinperf.specs.stack import load_platform

    from rubinperf.calibrate.plan import MODES

    if not p.data or p.launch not in MODES:
        raise SpecError(f"point {p.id}: {p.metric} needs data (a measurements CSV) and launch ({', '.join(MODES)})")
    _, rows = read_csv(data_root() / p.data)
    stats = predict(rows, load_platform(p.hardware, p.stack))["modes"][p.launch]
    return stats["median_abs_log"], (f"{stats['n']} rows; worst {stats['worst_abs_log']:.2f} ({stats['worst_row']}); "
                                     f"max SOL/measured {stats['max_sol_over_measured']:.2f}")


def _kv_bytes_per_token(p: RefPoint) -> tuple[float, str]:
    from rubinperf.step.capacity import kv_bytes_per_token
    from rubinperf.specs.model import load_model

    return float(kv_bytes_per_token(load_model(p.model))), "sum over KV source layers of (entry + index key) / ratio"


_SUMMARIES: dict[tuple, object] = {}


def _summary(model: str, hardware: str, workload: str, stack: str | None = None):
    """The Pareto summary of one rack (on a stack) on one workload (swept once per run), at P90 interactivity."""
    key = (model, hardware, workload, stack)
    if key not in _SUMMARIES:
        from rubinperf.serving.pareto import summarize
        from rubinperf.serving import batch_grid, sweep
        from rubinperf.specs.stack import load_platform
        from rubinperf.specs.model import load_model
        from rubinperf.specs.workload import load_workload

        sw = sweep([(load_model(model), load_platform(hardware, stack), load_workload(workload))], batches=batch_grid())
        _SUMMARIES[key] = summarize(sw)[0]
    return _SUMMARIES[key]


def _throughput(p: RefPoint, hardware: str, stack: str | None = None) -> tuple[float, str]:
    s = _summary(p.model, hardware, p.workload or "agentx", stack)
    pick = s.peak if p.interactivity is None else s.at_interactivity(p.interactivity)
    if pick is None:  # no prediction at all: reported as unreachable, never as 0 or inf
        return None, f"{hardware} cannot reach {p.interactivity:g} tok/s/user"
    r = pick.record
    return r["tokens_per_s_per_gpu"], (f"{hardware} {r['decode_layout']} x {r['batch_per_rank']:g}, "
                                       f"{r['tokens_per_s_per_user']:.0f} tok/s/user, decode {r['decode_bound']}")


def _throughput_metric(p: RefPoint) -> tuple[float, str]:
    return _throughput(p, p.hardware, p.stack)


def _throughput_ratio(p: RefPoint) -> tuple[float, str]:
    if not p.baseline_hardware:
        raise SpecError(f"point {p.id}: a ratio needs baseline_hardware")
    top, why_top = _throughput(p, p.hardware, p.stack)
    base, why_base = _throughput(p, p.baseline_hardware, p.baseline_stack)
    if top is None or base is None or not base > 0:
        return None, f"{why_top}; {why_base}"
    return top / base, f"{why_top}; {why_base}"


def _offline_tokens_per_s_per_gpu(p: RefPoint) -> tuple[float, str]:
    """An offline max-throughput run of an in-flight-batching engine (trtllm-bench throughput): `concurrency`
    requests (the whole dataset) sent at once, each `input_tokens` in and `output_tokens` out, no speculative
    decoding. The engine is the aggregated one of `rubinperf serve`, with the run's scheduler limits in `run_with`
    (its token budget per step, whole prompts or chunks, prefill in the decode rows' forward). Running requests
    per scheduler: at most `batch` (the engine's max batch size), and at most what the KV cache holds at the full
    length in `kv_memory_fraction` of the HBM left after the weights and the runtime reserve (the run's
    kv_cache_free_gpu_mem_fraction). The figure is the closed loop's output tokens/s per GPU at that
    concurrency: past what the engine holds, the rest of the requests queue."""
    from rubinperf.serving.aggregated import RequestMix, closed_loop, engine
    from rubinperf.specs.layout import check_layout, parse_layout
    from rubinperf.specs.workload import load_workload
    from rubinperf.step.capacity import capacity

    if p.input_tokens is None or p.output_tokens is None or p.batch is None or p.concurrency is None:
        raise SpecError(f"point {p.id}: {p.metric} needs input_tokens, output_tokens, batch (the engine's max batch "
                        f"size) and concurrency (the requests sent at once)")
    sets = list(p.set) + _sets(p.run_with)
    m, (hw,) = _load_specs(p.model, [p.hardware], sets=sets or None, stacks=[p.stack] if p.stack else None)
    lay = parse_layout(p.layout)
    check_layout(lay, m, hw)
    reserve = load_workload(p.workload or "chat-8k1k").runtime_reserve_bytes
    cap = capacity(m, hw, lay, "decode", context_tokens=p.input_tokens + p.output_tokens, tokens_per_request=1,
                   logits_per_request=1, reserve_bytes=reserve)
    fits = math.floor(max(0.0, cap.free_bytes) * (p.kv_memory_fraction or 1.0) / cap.bytes_per_request)
    batch = min(p.batch, fits)
    if batch < 1:
        return None, cap.reason(1) or "no request fits"
    mix = RequestMix(isl=p.input_tokens, osl=p.output_tokens)
    rec = closed_loop(engine(m, hw, lay, mix, draft_tokens=0, max_batch=batch), [p.concurrency]).records()[0]
    running = float(rec["running_batch_per_rank"])
    held = ("the requests sent" if running < batch - 0.5 else "the max batch" if p.batch <= fits else "the KV cache")
    return float(rec["output_tokens_per_s_per_gpu"]), (
        f"batch {running:.4g} per {'rank' if lay.kind == 'dep' else 'instance'} (max batch "
        f"{p.batch:g}, KV fits {fits:g}: held by {held}); budget {rec['max_num_batched_tokens']:,.0f} tokens, "
        f"{rec['prefill_step_share']:.0%} of steps with prefill ({rec['prefill_step_ms']:.3g} vs "
        f"{rec['decode_step_ms']:.3g} ms)")


def _sets(fields: dict) -> list[str]:
    """A table of spec fields as --set texts."""
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v if isinstance(v, str) else repr(v)}"
            for k, v in fields.items()]


# Fields of a point that say which figure it compares and where that figure comes from, not what is run: points equal
# in every other field run the same benchmark (one run's TTFT and its throughput), run once in a validate (_records).
_NOT_RUN = {"id": "", "source": "", "published": 1.0, "band": (1.0, 1.0), "note": "", "fitted": False, "previous": None,
            "changed": "", "quantity": None}
_RUNS: dict = {}
_SHARING = [False]   # inside _records: runs and spec loads are shared by its points


def _shared(key, compute):
    """compute(), or inside a validate (_records) what it gave for `key` earlier in that validate."""
    if not _SHARING[0]:
        return compute()
    if key not in _RUNS:
        _RUNS[key] = compute()
    return _RUNS[key]


def _load_specs(model: str, hardware: list, sets=None, stacks=None):
    """select.load_specs, loaded once in a validate for the points that name the same specs and overrides (records
    frozen: each point reads them, none changes them)."""
    from rubinperf.specs.select import load_specs

    return _shared(("specs", model, tuple(hardware), tuple(sets or ()), tuple(stacks or ())),
                   lambda: load_specs(model, hardware, sets=sets, stacks=stacks))


def _run_once(p: RefPoint, run):
    """run(), or what it gave for a point that differs from `p` only in _NOT_RUN's fields earlier in this validate
    (_records; outside it, run())."""
    import dataclasses

    if not _SHARING[0]:
        return run()
    return _shared((p.metric, repr(dataclasses.replace(p, **_NOT_RUN))), run)


def _serve(p: RefPoint) -> tuple[float, str]:
    """One closed-loop benchmark point of an aggregated engine, through the path `rubinperf serve` takes."""
    from rubinperf.serving.aggregated import RequestMix, closed_loop, engine
    from rubinperf.specs.layout import check_layout, parse_layout

    if not (p.quantity and p.concurrency and p.isl and p.osl):
        raise SpecError(f"point {p.id}: serve needs quantity, concurrency, isl and osl")
    m, (hw,) = _load_specs(p.model, [p.hardware], _sets(p.run_with), stacks=[p.stack] if p.stack else None)
    lay = parse_layout(p.layout)
    check_layout(lay, m, hw)
    mix = RequestMix(isl=p.isl, osl=p.osl, range_ratio=p.random_range_ratio or 0.0,
                     convention=p.range_convention or "vllm", prefix_hit=p.prefix_hit_rate or 0.0)
    draft = None if p.draft_tokens is None else int(p.draft_tokens)
    def built():   # (an engine is a pure function of its specs and arguments: points of one engine share it)
        return _shared(("engine", id(m), id(hw), p.layout, mix, draft, p.acceptance),
                       lambda: engine(m, hw, lay, mix, draft_tokens=draft, acceptance=p.acceptance))

    rec = _run_once(p, lambda: closed_loop(built(), [p.concurrency]).records()[0])
    if p.quantity not in rec or isinstance(rec[p.quantity], (str, bool)):
        raise SpecError(f"point {p.id}: quantity: {p.quantity!r} is not a number of the serve record")
    return float(rec[p.quantity]), (f"batch {rec['running_batch_per_rank']:.3g}/rank, {rec['prefill_step_share']:.0%} of "
                                    f"steps with prefill ({rec['prefill_step_ms']:.3g} vs {rec['decode_step_ms']:.3g} ms), "
                                    f"TPOT {rec['median_tpot_ms']:.3g} ms, TTFT {rec['mean_ttft_ms']:.3g} ms"
                                    + (f", held by the {rec['limited_by']}" if rec["limited_by"] else ""))


def _simulated_request_rate(p: RefPoint) -> tuple[float, str]:
    """One open-loop benchmark run of an aggregated engine (`vllm bench serve --request-rate R --num-prompts N`,
    `sglang.bench_serving`), through the path `rubinperf serve --request-rate` takes: the engine of `serve`, the
    requests drawn as the client draws them (`request_rate`, `burstiness`, `num_requests`, `isl`/`osl` and the
    range ratio) and simulated step by step (serving/simulate.py: serve_records). `quantity` is the field of the
    simulated serve record compared (request_throughput_per_s, median_ttft_ms, p99_itl_ms, duration_s, ...)."""
    from rubinperf.serving.aggregated import RequestMix, engine_setup
    from rubinperf.serving import simulate as sim
    from rubinperf.specs.layout import check_layout, parse_layout

    if not (p.quantity and p.request_rate and p.num_requests and p.isl and p.osl):
        raise SpecError(f"point {p.id}: simulated_request_rate needs quantity, request_rate, num_requests, isl and osl")
    if p.num_requests != int(p.num_requests) or (p.seed is not None and p.seed != int(p.seed)):
        raise SpecError(f"point {p.id}: num_requests and seed: expected whole numbers")
    m, (hw,) = _load_specs(p.model, [p.hardware], _sets(p.run_with) + list(p.set),
                          stacks=[p.stack] if p.stack else None)
    lay = parse_layout(p.layout)
    check_layout(lay, m, hw)
    mix = RequestMix(isl=p.isl, osl=p.osl, range_ratio=p.random_range_ratio or 0.0,
                     convention=p.range_convention or "vllm", prefix_hit=p.prefix_hit_rate or 0.0)
    draft = None if p.draft_tokens is None else int(p.draft_tokens)
    pcts = (50.0, 90.0, 95.0, 99.0)
    # (the engine as serve's: its checks, draft, acceptance and budget; the simulation times its own step tables, so
    # the closed form's steps over its batch grid, which it does not read, are not timed)
    rec, = _run_once(p, lambda: sim.serve_records(
        engine_setup(m, hw, lay, mix, draft_tokens=draft, acceptance=p.acceptance), rates=[p.request_rate],
        num_requests=int(p.num_requests), seed=int(p.seed or 0), burstiness=p.burstiness or 1.0, percentiles=pcts))
    if p.quantity not in rec or isinstance(rec[p.quantity], (str, bool)) or not isinstance(rec[p.quantity], (int, float)):
        raise SpecError(f"point {p.id}: quantity: {p.quantity!r} is not a number of the simulated serve record")
    return float(rec[p.quantity]), (
        f"{rec['request_throughput_per_s']:.3g} req/s of {p.request_rate:g} sent, run {rec['duration_s']:.3g} s; "
        f"batch {rec['mean_running_batch_per_rank']:.3g}/rank, {rec['prefill_step_share']:.0%} of steps with prefill; "
        f"TTFT median {rec['median_ttft_ms']:.4g} ms (P99 {rec['p99_ttft_ms']:.4g}), TPOT median "
        f"{rec['median_tpot_ms']:.3g} ms, ITL median {rec['median_itl_ms']:.3g} ms; "
        f"{rec['requests_queued']} of {rec['num_requests']} queued")


def _dp_prefill_loss(p: RefPoint) -> tuple[float, str]:
    """Prefill throughput a DEP engine loses to its busiest rank (serving/prefill.py: dp_prefill_imbalance)."""
    from rubinperf.serving.prefill import dp_prefill_imbalance
    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.select import serving_setups

    (m, hw, w), = serving_setups(p.model, [p.hardware], p.workload or "agentx", None, [p.stack] if p.stack else None)
    d = dp_prefill_imbalance(m, hw, w, parse_layout(p.layout))
    return d["loss"], (f"{d['seqs_per_rank']:.3g} sequences per rank, the busiest {d['busiest_rank_seqs']:.3g}: step "
                       f"{fmt_time(d['step_s'])} -> {fmt_time(d['busiest_step_s'])}")


METRICS = {
    "serve": _serve,
    "simulated_request_rate": _simulated_request_rate,
    "dp_prefill_loss": _dp_prefill_loss,
    "throughput_at_interactivity": _throughput_metric,
    "peak_throughput": _throughput_metric,
    "throughput_ratio_at_interactivity": _throughput_ratio,
    "peak_throughput_ratio": _throughput_ratio,
    "tokens_per_s_per_user": _tokens_per_s_per_user,
    "tokens_per_s_per_gpu": _tokens_per_s_per_gpu,
    "tokens_per_s_per_node": _tokens_per_s_per_node,
    "step_time_ratio_855k_vs_128k": _context_growth,
    "kv_bytes_per_token": _kv_bytes_per_token,
    "op_time_ms": _op_time,
    "step_time_without_op_ms": _time_without_op,
    "kernel_error_unseen": _kernel_error_unseen,
    "gpu_time_saved": _gpu_time_saved,
    "gpu_time_saved_us": _gpu_time_saved_us,
    "offline_tokens_per_s_per_gpu": _offline_tokens_per_s_per_gpu,
}


def validate(points: list[RefPoint], stack: str | None = None) -> list[dict]:
    """One record per point: predicted vs published, their ratio, and whether it lies in the band the file states.
    `stack` (--stack) runs every point that names no stack of its own on that stack. The band the evidence beneath
    each point allows (the held-out error of its kernel and step families, without the point; never wider) is
    rubinperf.analysis.ledger's: validate_with_evidence. The records of the bundled points on their own stacks
    are computed from the bundled files alone: they are kept between runs (rubinperf/kept.py: kept_of_tree, until a
    file of the package or the bundled folders changes)."""
    if stack is None and points == load_points(POINTS_FILE):
        from rubinperf.kept import kept_of_tree

        return kept_of_tree("validate records", lambda: _records(points, None), lambda recs: recs, lambda recs: recs)
    return _records(points, stack)


def _records(points: list[RefPoint], stack: str | None) -> list[dict]:
    _RUNS.clear()   # (a benchmark's run is shared by the points of one validate only: a spec file may change after)
    _SHARING[0] = True
    try:
        return _records_of(points, stack)
    finally:
        _SHARING[0] = False
        _RUNS.clear()


def _records_of(points: list[RefPoint], stack: str | None) -> list[dict]:
    import dataclasses

    records = []
    for p in points:
        if stack is not None:
            p = dataclasses.replace(p, stack=p.stack or stack, baseline_stack=p.baseline_stack or stack)
        try:
            predicted, why = METRICS[p.metric](p)
        except SpecError as exc:  # a name or an operating point of this point is wrong: say which point
            msg = str(exc)
            raise SpecError(msg if msg.startswith(f"point {p.id}:") else f"point {p.id}: {msg}") from None
        reachable = predicted is not None and math.isfinite(predicted)
        ratio = predicted / p.published if reachable else None
        records.append({
            "id": p.id, "metric": p.metric, "hardware": p.hardware, "stack": p.stack, "model": p.model, "layout": p.layout,
            "phase": p.phase, "published": p.published, "predicted": predicted if reachable else None, "ratio": ratio,
            "band": list(p.band), "in_band": reachable and p.band[0] <= ratio <= p.band[1], "fitted": p.fitted,
            "reachable": reachable, "previous": p.previous,
            "moved": predicted / p.previous if p.previous and reachable else None,
            "detail": why, "changed": p.changed, "source": p.source, "note": p.note,
            "baseline_hardware": p.baseline_hardware, "baseline_stack": p.baseline_stack,
        })
    return records
