"""Fit the hardware spec's efficiencies and floors to measurements (numpy only, no torch).

Kernels: the expected time of every row is the model's own `roofline.kernel_time` of
the row's Cost (from `plan.row_cost`) on the hardware with trial efficiencies,

    expected = max(flops_p / (peak_p eff_p), bytes / (hbm_bw hbm_efficiency)) + launches floor,

and the fit minimises the mean absolute log error, mean(|ln(measured / expected)|), over
bf16/fp8 compute efficiency, hbm_efficiency and kernel_launch_floor_s by coordinate
search on a shrinking logarithmic grid. A field with no measurement behind it (FP4,
FP8xFP4, FP32 here) keeps its value. Absolute rather than squared error because the misfit
is not noise: one efficiency per format cannot describe every kernel (on the H200,
torch's grouped GEMM streams weights at 2.2-3.5 TB/s where a dense GEMM reaches 4 TB/s),
and squared error lets the few rows the model misses by 1.5-2x set the values for all
(``loss="sq"`` gives that fit).

Collectives: per row, time = collective_floor_s + hops x nvlink_latency_s
+ bytes_sent / (nvlink_bw x nvlink_efficiency), with hops and bytes sent from
`rubinperf.kernels.collectives`. That is linear in (floor, latency, 1/efficiency), so it
is a non-negative least-squares fit of relative errors.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from rubinperf.calibrate.plan import family_label, row_cost
from rubinperf.cost import Cost
from rubinperf.errors import SpecError
from rubinperf.roofline import kernel_time

KERNEL_FIELDS = ("bf16_compute_efficiency", "fp8_compute_efficiency", "hbm_efficiency", "kernel_launch_floor_s")
COLLECTIVE_FIELDS = ("collective_floor_s", "nvlink_latency_s", "nvlink_efficiency")
BOUNDS = {"kernel_launch_floor_s": (1e-8, 1e-3), "collective_floor_s": (0.0, 1e-3), "nvlink_latency_s": (0.0, 1e-3)}
EFF_BOUNDS = (0.01, 1.0)
START_EFFICIENCY, START_FLOOR_S = 0.7, 3e-6


def stacked_cost(rows: list[dict]) -> Cost:
    """One Cost whose fields are numpy arrays, one entry per row."""
    costs = [row_cost(r) for r in rows]
    return Cost(**{f.name: np.array([float(getattr(c, f.name)) for c in costs]) for f in dataclasses.fields(Cost)})


def measured(rows: list[dict]) -> np.ndarray:
    return np.array([float(r["measured_s"]) for r in rows])


def expected(rows_or_cost, hw) -> np.ndarray:
    cost = rows_or_cost if isinstance(rows_or_cost, Cost) else stacked_cost(rows_or_cost)
    return np.asarray(kernel_time(cost, hw).expected_s, dtype=float)


def sol(rows_or_cost, hw) -> np.ndarray:
    cost = rows_or_cost if isinstance(rows_or_cost, Cost) else stacked_cost(rows_or_cost)
    return np.broadcast_to(np.asarray(kernel_time(cost, hw).sol_s, dtype=float), (len(cost.launches),)).copy()


def log_ratios(rows: list[dict], hw, cost: Cost | None = None) -> np.ndarray:
    """ln(measured / expected) per row."""
    return np.log(measured(rows) / expected(cost if cost is not None else rows, hw))


@dataclass
class FitResult:
    before: dict                  # field -> value before the fit
    after: dict                   # field -> fitted value (unchanged fields included)
    fitted: tuple                 # fields the data constrained
    loss_before: float            # the fit's objective (`method`) before and after
    loss_after: float
    n: int
    notes: list = field(default_factory=list)
    method: str = ""              # how the fit was made
    objective: str = ""           # what loss_before/loss_after measure

    def hardware(self, hw):
        return dataclasses.replace(hw, **self.after)


def _constrained_kernel_fields(cost: Cost) -> list[str]:
    out = []
    if np.any(cost.bf16_flops > 0):
        out.append("bf16_compute_efficiency")
    if np.any(cost.fp8_flops > 0):
        out.append("fp8_compute_efficiency")
    if np.any(cost.hbm_bytes > 0):
        out.append("hbm_efficiency")
    if np.any(cost.launches > 0):
        out.append("kernel_launch_floor_s")
    return out


LOSSES = {  # name: (method, objective, function of the log ratios)
    "abs": ("least absolute log error", "mean |ln(measured/expected)|", lambda r: float(np.mean(np.abs(r)))),
    "sq": ("least squares in log time", "mean ln(measured/expected)^2", lambda r: float(np.mean(r ** 2))),
}


def fit_kernels(rows: list[dict], hw, fields=KERNEL_FIELDS, rounds: int = 16, points: int = 33,
                exclude=("launch",), loss: str = "abs") -> FitResult:
    """Coordinate search of `fields` minimising mean |ln(measured/expected)| (or its square, `loss="sq"`).

    Families in `exclude` are left out of the fit: the empty kernel (`launch`) times the launch
    alone, while the model's kernel_launch_floor_s is the whole fixed cost of a real kernel
    (launch, ramp, tail), which only real kernels show.
    """
    notes = []
    left_out = [r for r in rows if r["family"] in exclude]
    for r in left_out:
        notes.append(f"{r['family']}: {float(r['measured_s']) * 1e6:.2f} us measured, reported but not fitted "
                     "(an empty kernel shows the launch alone; the floor also covers ramp and tail)")
    rows = [r for r in rows if r["family"] not in exclude]
    if not rows:
        raise SpecError("no kernel measurements to fit")
    cost = stacked_cost(rows)
    t = measured(rows)
    free = [f for f in fields if f in _constrained_kernel_fields(cost)]
    base = {f: float(getattr(hw, f)) for f in KERNEL_FIELDS}
    # Start from one fixed point, not the spec's values: the result then depends on the data alone,
    # and re-fitting a calibrated spec reproduces it.
    x = {f: (START_FLOOR_S if f.endswith("_s") else START_EFFICIENCY) if f in free else base[f] for f in fields}

    method, objective, measure = LOSSES[loss]

    def loss(vals: dict) -> float:
        return measure(np.log(t / expected(cost, dataclasses.replace(hw, **vals))))

    loss0 = loss({f: base[f] for f in fields})
    width = math.log(4.0)
    for _ in range(rounds):
        for f in free:
            lo_b, hi_b = BOUNDS.get(f, EFF_BOUNDS)
            lo_b = max(lo_b, 1e-12)
            c = x[f]
            grid = np.unique(np.clip(c * np.exp(np.linspace(-width, width, points)), lo_b, hi_b))
            grid = np.append(grid, c)
            losses = np.array([loss({**x, f: float(g)}) for g in grid])
            best = int(np.argmin(losses))
            if losses[best] < losses[-1] - 1e-15:  # move only on a strict improvement
                x[f] = float(grid[best])
        width *= 0.6
    notes += [f"{f}: no measurement constrains it; kept {getattr(hw, f)!r}" for f in fields if f not in free]
    return FitResult(before=base, after={**base, **{f: _round(f, x[f]) for f in free}}, fitted=tuple(free),
                     loss_before=loss0, loss_after=loss({**x, **{f: _round(f, x[f]) for f in free}}), n=len(rows),
                     notes=notes, method=method, objective=objective)


def _round(name: str, v: float) -> float:
    """Three significant digits: the data do not support more."""
    return float(f"{v:.3g}")


# ---------------------------------------------------------------- collectives


def collective_cost(row: dict) -> Cost:
    from rubinperf.kernels.collectives import all_reduce, all_to_all

    fn = {"all_reduce": all_reduce, "all_to_all": all_to_all}[row["collective"]]
    return fn(float(row["nbytes"]), int(row["ranks"]))


def fit_collectives(rows: list[dict], hw) -> FitResult:
    """Weighted non-negative least squares of t = floor + hops lat + sent / (bw eff), relative errors."""
    if not rows:
        raise SpecError("no collective measurements to fit")
    costs = [collective_cost(r) for r in rows]
    t = measured(rows)
    hops = np.array([float(c.nvlink_hops) for c in costs])
    sent = np.array([float(c.nvlink_bytes) for c in costs]) / hw.nvlink_bandwidth_bytes_per_s
    ones = np.ones_like(t)
    before = {f: float(getattr(hw, f)) for f in COLLECTIVE_FIELDS}
    notes = []
    cols = {"collective_floor_s": ones, "nvlink_latency_s": hops, "inv_eff": sent}
    offset = np.zeros_like(t)
    if len(np.unique(hops)) < 2:
        # floor and latency are not separable with one hop count: keep the latency, fit the floor.
        offset = hops * hw.nvlink_latency_s
        del cols["nvlink_latency_s"]
        notes.append("one hop count only: nvlink_latency_s kept, collective_floor_s fitted")
    if not np.any(sent > 0):
        offset = offset + sent / hw.nvlink_efficiency
        del cols["inv_eff"]
        notes.append("no bytes sent: nvlink_efficiency kept")
    names = list(cols)
    a = np.stack([cols[n] for n in names], axis=1) / t[:, None]
    y = (t - offset) / t
    coef = _nnls(a, y)
    vals = dict(zip(names, coef))
    after = dict(before)
    if "collective_floor_s" in vals:
        after["collective_floor_s"] = vals["collective_floor_s"]
    if "nvlink_latency_s" in vals:
        after["nvlink_latency_s"] = vals["nvlink_latency_s"]
    if "inv_eff" in vals:
        if vals["inv_eff"] > 0:
            after["nvlink_efficiency"] = min(1.0, 1.0 / vals["inv_eff"])
            if vals["inv_eff"] < 1.0:
                notes.append("measured bandwidth above the spec's NVLink peak: nvlink_efficiency capped at 1.0")
        else:
            notes.append("bandwidth term not resolved: nvlink_efficiency kept")
    after = {k: (_round(k, v) if k in vals or (k == "nvlink_efficiency" and "inv_eff" in vals) else v)
             for k, v in after.items()}
    # The spec needs positive floors; a zero fit means "below resolution".
    for k in ("collective_floor_s", "nvlink_latency_s"):
        if after[k] <= 0:
            after[k] = 1e-9
            notes.append(f"{k}: fitted 0, written as 1e-9 s (below resolution)")

    def loss(vals_: dict) -> float:
        h = dataclasses.replace(hw, **vals_)
        e = np.array([float(kernel_time(c, h).expected_s) for c in costs])
        return float(np.mean(np.abs(np.log(t / e))))

    return FitResult(before=before, after=after, fitted=tuple(COLLECTIVE_FIELDS), loss_before=loss(before),
                     loss_after=loss(after), n=len(rows), notes=notes,
                     method="non-negative least squares of relative error",
                     objective="mean |ln(measured/expected)|")


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0, by trying each set of free columns (few columns)."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(np.sum(y ** 2))
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            sol_, *_ = np.linalg.lstsq(a[:, subset], y, rcond=None)
            if np.any(sol_ < 0):
                continue
            c = np.zeros(k)
            c[list(subset)] = sol_
            res = float(np.sum((a @ c - y) ** 2))
            if res < best_res:
                best, best_res = c, res
    return best


def collective_groups(rows: list[dict], hw) -> list[dict]:
    """Per collective and rank count: the fitted intercept (floor + hops x latency) and bandwidth efficiency."""
    out = []
    keys = sorted({(r["collective"], int(r["ranks"])) for r in rows})
    for coll, n in keys:
        sub = [r for r in rows if r["collective"] == coll and int(r["ranks"]) == n]
        costs = [collective_cost(r) for r in sub]
        t = measured(sub)
        sent = np.array([float(c.nvlink_bytes) for c in costs]) / hw.nvlink_bandwidth_bytes_per_s
        a = np.stack([np.ones_like(t), sent], axis=1) / t[:, None]
        c0, c1 = _nnls(a, np.ones_like(t))
        out.append({"collective": coll, "ranks": n, "points": len(sub), "intercept_s": c0,
                    "nvlink_efficiency": (1.0 / c1) if c1 > 0 else float("nan"),
                    "busbw_bytes_per_s": (hw.nvlink_bandwidth_bytes_per_s / c1) if c1 > 0 else float("nan")})
    return out


# ---------------------------------------------------------------- reports


def family_stats(rows: list[dict], hw) -> list[dict]:
    """Per family: rows, median and worst (largest |ln|) measured/expected, and the largest SOL/measured."""
    cost = stacked_cost(rows)
    ratio = measured(rows) / expected(cost, hw)
    sol_ratio = sol(cost, hw) / measured(rows)
    labels = [family_label(r) for r in rows]
    out = []
    for lab in dict.fromkeys(labels):
        idx = [i for i, l in enumerate(labels) if l == lab]
        r = ratio[idx]
        worst = r[int(np.argmax(np.abs(np.log(r))))]
        out.append({"family": lab, "n": len(idx), "median_ratio": float(np.median(r)), "worst_ratio": float(worst),
                    "median_abs_log": float(np.median(np.abs(np.log(r)))), "max_sol_over_measured": float(np.max(sol_ratio[idx]))})
    allr = ratio
    out.append({"family": "all", "n": len(rows), "median_ratio": float(np.median(allr)),
                "worst_ratio": float(allr[int(np.argmax(np.abs(np.log(allr))))]),
                "median_abs_log": float(np.median(np.abs(np.log(allr)))), "max_sol_over_measured": float(np.max(sol_ratio))})
    return out


def before_after_markdown(rows: list[dict], before_hw, after_hw) -> str:
    """The README table: measured/expected per family with the spec's efficiencies before and after the fit."""
    b, a = family_stats(rows, before_hw), family_stats(rows, after_hw)
    lines = ["| family | rows | before: median | before: worst | before: median \\|ln\\| "
             "| after: median | after: worst | after: median \\|ln\\| |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for x, y in zip(b, a):
        lines.append(f"| {x['family']} | {x['n']} | {x['median_ratio']:.2f} | {x['worst_ratio']:.2f} | "
                     f"{x['median_abs_log']:.3f} | {y['median_ratio']:.2f} | {y['worst_ratio']:.2f} | "
                     f"{y['median_abs_log']:.3f} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- calibrated TOML


def rewrite_tables(text: str, updates: dict, sources: dict) -> str:
    """Replace `key = value` lines of a hardware TOML, keeping every other line.

    `updates` maps (section, key) to a number; `sources` maps a section to its new source string.
    """
    lines = text.splitlines(keepends=True)
    section, done = None, set()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("["):
            section = s.strip("[] \t")
            continue
        if not s or s.startswith("#") or "=" not in s:
            continue
        key = s.split("=", 1)[0].strip()
        nl = "\n" if line.endswith("\n") else ""
        if key == "source" and section in sources:
            lines[i] = f"source = {_toml_str(sources[section])}{nl}"
            done.add((section, key))
        elif (section, key) in updates:
            lines[i] = f"{key} = {_toml_float(updates[(section, key)])}{nl}"
            done.add((section, key))
    wanted = [*((sec, "source") for sec in sources), *updates]
    missing = [f"[{sec}] {k}" for sec, k in wanted if (sec, k) not in done]
    if missing:
        raise SpecError(f"hardware TOML: no line for {', '.join(missing)}")
    return "".join(lines)


def rewrite_efficiency(text: str, updates: dict, source: str) -> str:
    """Replace values in the [efficiency] table of a hardware TOML, keeping every other line."""
    return rewrite_tables(text, {("efficiency", k): v for k, v in updates.items()}, {"efficiency": source})


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _toml_float(v: float) -> str:
    s = f"{v:.3g}"
    return s if any(c in s for c in ".en") else s + ".0"


CALIBRATED_NOTE = " (calibrated: "


def calibrated_toml(path, updates: dict, source: str) -> str:
    """The hardware file at `path` with `updates` (field -> value); checked by the strict loader.

    The [efficiency] table's source becomes `source`; another table that receives a value
    (nvlink_latency_s lives in [nvlink]) gets a note pointing there.
    """
    from pathlib import Path

    from rubinperf.specs.hardware import Hardware
    from rubinperf.specs.loader import build_spec, spec_fields, tomllib

    path = Path(path)
    text = path.read_text()
    data = tomllib.loads(text)
    where = {f.name: f.metadata["section"] for f in spec_fields(Hardware)}
    keyed = {(where[k], k): v for k, v in updates.items()}
    sources = {"efficiency": source}
    for sec in sorted({sec for sec, _ in keyed} - {"efficiency"}):
        old = str(data.get(sec, {}).get("source", "")).split(CALIBRATED_NOTE, 1)[0]
        names = ", ".join(k for s_, k in keyed if s_ == sec)
        sources[sec] = f"{old}{CALIBRATED_NOTE}{names}; see the [efficiency] source)"
    text = rewrite_tables(text, keyed, sources)
    build_spec(Hardware, tomllib.loads(text), path)  # raises SpecError if anything is off
    return text


def efficiency_source(env: dict, command: str, result: FitResult, old_source: str, fit_command: str = "") -> str:
    """The [efficiency] table's new source: when, where, by which commands, how; and the old source."""
    when = (env.get("date_utc") or "")[:10] or "unknown date"
    gpu = env.get("gpu") or "unknown GPU"
    soft = f", torch {env['torch']}" if env.get("torch") else ""
    fitted = ", ".join(result.fitted)
    if f"`{command}`" in old_source and "whose source was: " in old_source:  # a re-run: don't nest the same note
        old_source = old_source.split("whose source was: ", 1)[1]
    how = f"measured by `{command}`" + (f", fitted by `{fit_command}`" if fit_command and fit_command != command else "")
    return (f"Calibrated {when} on {gpu}{soft}: {how} ({result.n} measurements; {result.method or 'fit'} "
            f"of the roofline: {fitted}). The other fields were not measured and keep their values, "
            f"whose source was: {old_source}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `rubinperf calibrate --from-csv FILE`")
