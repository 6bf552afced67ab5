"""The accuracy ledger: held-out error per family of evidence, coverage, and the bands it allows.

A family is a set of rows, each (measured, predicted, held_out): kernels of one GPU and stack (the H200
calibration runs, aiconfigurator's tables per system and framework), whole steps (the posts' GB200 DEP4 -> DEP32
figures, aiconfigurator's whole-step estimates, the other published step figures), mechanisms (the share of a step a
change saves) and serving points. A row is held out when no fit saw it: rows a fit was made on are listed in their
own in-sample family and never count for a band. Other evidence (a public kernel table) plugs in as one more
family: `family(...)` of its rows.

Error of a row: |ln(predicted / measured)|. A family reports its held-out rows' median and 90th percentile.

A published point's band (`point_band`) comes from the evidence beneath it, never from a round number: the
half-width in ln is the larger of (a) the held-out median kernel error of its rack's GPU (the per-kernel errors of a
step partly cancel, so the median) and (b) the 90th percentile of the held-out errors of the step family (step and
serving points) or of the mechanism family (mechanism points), each taken without the point itself, so that a band
never widens to admit its own point. A band is never wider than that; a narrower band the points file states
(a published "a few percent") is kept.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field

from rubinperf.bundled import data_root, folder

BASELINE_FILE = folder("validation") / "ledger-baseline.json"

# Which evidence level a validation metric belongs to.
STEP_METRICS = ("tokens_per_s_per_user", "tokens_per_s_per_gpu", "tokens_per_s_per_node", "op_time_ms",
                "step_time_without_op_ms", "step_time_ratio_855k_vs_128k")
SERVING_METRICS = ("serve", "throughput_at_interactivity", "peak_throughput", "throughput_ratio_at_interactivity",
                   "peak_throughput_ratio", "offline_tokens_per_s_per_gpu", "simulated_request_rate")
MECHANISM_METRICS = ("gpu_time_saved", "gpu_time_saved_us", "dp_prefill_loss")
EXACT_METRICS = ("kv_bytes_per_token",)   # a sum over the model's shapes: its stated band stands

# The GPU generation of each bundled rack: kernel evidence is looked up by (rack, stack), then by GPU, then by
# generation (a proxy, said so in the band's note). Rubin has no measured kernel at all.
GPU = {"h200": "H200", "h200-cluster": "H200", "h100-cluster": "H100", "h800-cluster": "H800", "b200": "B200",
       "b200-cluster": "B200", "gb200-nvl72": "GB200", "b300": "B300", "gb300-nvl72": "GB300", "vr-nvl72": "Rubin"}
GENERATION = {"H200": "Hopper", "H100": "Hopper", "H800": "Hopper", "B200": "Blackwell", "GB200": "Blackwell",
              "B300": "Blackwell", "GB300": "Blackwell", "Rubin": "Rubin"}
PROXY_GENERATION = {"Rubin": "Blackwell"}   # no Rubin kernel is measured: the nearest generation's evidence

# aiconfigurator's tables (calibration/aiconfigurator): system -> rack
AIC_SYSTEMS = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72", "b200_sxm": "b200", "h200_sxm": "h200"}
# (framework, stack, system the stack was fitted on or None): the other systems' rows are held out
AIC_FITS = (("sglang", "sglang-blackwell", "gb300", ("gb300", "gb200", "b200_sxm")),
            ("trtllm", "trtllm-blackwell", "gb200", ("gb200", "b200_sxm", "gb300")),
            ("trtllm", "trtllm-hopper", "h200_sxm", ("h200_sxm",)),
            ("sglang", "sglang-deepep-hopper", None, ("h200_sxm",)),
            ("vllm", "vllm-gb300-oct2026", None, ("gb300", "gb200", "b200_sxm")))
FRAMEWORK = {"sglang": "SGLang 0.5.14", "trtllm": "TensorRT-LLM 1.3.0rc20", "vllm": "vLLM 0.24.0"}

# The margin CI allows (tests/analysis/test_ledger.py): a family's held-out median |ln| may grow by at most
# MARGIN_MEDIAN over the committed baseline, its 90th percentile by MARGIN_P90.
MARGIN_MEDIAN = 0.02
MARGIN_P90 = 0.05


@dataclass
class Family:
    name: str                 # "kernels H200 / pytorch-2.11: cuDNN decode (shapes not fitted)"
    level: str                # kernel, step, mechanism, serving
    source: str
    hardware: tuple = ()      # racks the rows ran on
    stacks: tuple = ()
    models: tuple = ()
    rows: list = field(default_factory=list)   # {"id", "measured", "predicted", "held_out"}
    note: str = ""
    same_kernels: bool = True   # the rows time the kernels the stack describes (False: another version's kernels)

    def errors(self, held_out: bool = True, without: str | None = None) -> list[float]:
        return [e for i, e in self._errors(held_out) if i != without]

    def _errors(self, held_out: bool) -> list:
        """(id, |ln(predicted / measured)|) of the usable rows (held out ones only, with `held_out`), kept while the
        rows are the same list of the same length (the bands ask each family again for every point)."""
        memo = self.__dict__.setdefault("_memo", {})
        hit = memo.get(held_out)
        if hit is None or hit[0] is not self.rows or hit[1] != len(self.rows):
            rows = self.held_rows() if held_out else [r for r in self.rows if _usable(r)]
            hit = memo[held_out] = (self.rows, len(self.rows), [
                (r["id"], abs(math.log(r["predicted"] / r["measured"]))) for r in rows])
        return hit[2]

    def held_rows(self) -> list:
        """The usable held-out rows, in order (kept as _errors keeps its errors: stats, coverage and the errors read
        them)."""
        memo = self.__dict__.setdefault("_memo", {})
        hit = memo.get("held rows")
        if hit is None or hit[0] is not self.rows or hit[1] != len(self.rows):
            hit = memo["held rows"] = (self.rows, len(self.rows),
                                       [r for r in self.rows if r["held_out"] and _usable(r)])
        return hit[2]



def validate_with_evidence(points, stack: str | None = None) -> list[dict]:
    """`validate`'s records, each band the one the evidence beneath its point allows (apply_bands: the held-out
    error of its kernel and step families, without the point, never wider than the file's; `stated_band` keeps the
    file's), as `rubinperf validate` prints them."""
    from rubinperf.analysis.validate import validate

    records = validate(points, stack=stack)
    apply_bands(records, all_families(records))
    return records

def _usable(r: dict) -> bool:
    return (r["predicted"] is not None and r["measured"] is not None and r["predicted"] > 0 and r["measured"] > 0
            and math.isfinite(r["predicted"]) and math.isfinite(r["measured"]))


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile by linear interpolation (numpy's default), without numpy."""
    xs = sorted(xs)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(fam: Family) -> dict:
    """The family's ledger line: rows, held-out rows, median and 90th-percentile |ln|, bias, worst, verdict."""
    e = fam.errors()
    held = fam.held_rows()
    signed = [math.log(r["predicted"] / r["measured"]) for r in held]
    worst = held[max(range(len(held)), key=[abs(x) for x in signed].__getitem__)] if held else None
    out = {"family": fam.name, "level": fam.level, "rows": len(fam.rows), "held_out": len(e),
           "median_abs_log": quantile(e, 0.5) if e else None, "p90_abs_log": quantile(e, 0.9) if e else None,
           "bias": quantile(signed, 0.5) if signed else None,
           "worst": worst["id"] if worst else "", "worst_ratio": (worst["predicted"] / worst["measured"]) if worst else None,
           "hardware": list(fam.hardware), "stacks": list(fam.stacks), "models": list(fam.models),
           "source": fam.source, "note": fam.note}
    out["verdict"] = verdict(out)
    return out


def verdict(s: dict) -> str:
    """One line: how far off the family's held-out rows are, and what that allows."""
    n = s["held_out"]
    if not n:
        return "no held-out rows: in-sample only, says nothing of unseen shapes"
    med, p90 = s["median_abs_log"], s["p90_abs_log"]
    pct = lambda x: f"{100 * (math.exp(x) - 1):.0f}%"   # noqa: E731
    word = ("tight" if p90 <= 0.10 else "usable" if p90 <= 0.25 else "loose" if p90 <= 0.5 else "poor")
    few = " (few rows: a weak check)" if n < 5 else ""
    lean = ""
    if s["bias"] is not None and abs(s["bias"]) >= 0.05:
        lean = f"; predicts {'high' if s['bias'] > 0 else 'low'} by {pct(abs(s['bias']))} in the median"
    return f"{word}: half of {n} held-out rows within {pct(med)}, 90% within {pct(p90)}{lean}{few}"


# ---------------------------------------------------------------- kernel families


def _kernel_rows(rows: list[dict], hw, held_out: bool, prefix: str, described: dict | None = None) -> list[dict]:
    """`described` keeps each call's description (fit.call_key) for the same call in another table."""
    import numpy as np

    from rubinperf.calibrate.fit import Stacked, _describe, call_key, measured, timed_rows

    timed = timed_rows(rows)
    if not timed:
        return []
    meas = measured(timed)
    described = {} if described is None else described
    ids, calls = [], [call_key(r) for r in timed]
    for r, call in zip(timed, calls):
        text = described.get(call)
        if text is None:
            text = described[call] = _describe(r)
        ids.append(prefix + text)
    if not held_out:   # in-sample rows: the ledger reads only held-out errors, so their kernels are not built
        return [{"id": i, "measured": float(m), "predicted": None, "held_out": False} for i, m in zip(ids, meas)]
    # Each distinct call is stacked and timed once (a table lists a call about twice: other runs, other sources), in
    # the order of its first row, and each row takes its call's time: a row's time is a function of its call alone,
    # and each time adds its groups' kernels in the same order. The distinct calls' kernels are built a column at a
    # time (Stacked's by_columns: the same groups, bit for bit).
    first: dict = {}
    at = [first.setdefault(call, n) for n, call in enumerate(calls)]
    once = sorted(set(at))
    where = {n: j for j, n in enumerate(once)}
    pred = np.asarray(Stacked([timed[n] for n in once], [calls[n] for n in once], by_columns=True).times(hw))
    pred = pred[np.array([where[n] for n in at], dtype=np.intp)]
    return [{"id": i, "measured": float(m), "predicted": float(p), "held_out": held_out}
            for i, m, p in zip(ids, meas, pred)]


def h200_families() -> list[Family]:
    """Own runs on the lent H200 (calibration/h200), predicted with the committed h200 spec and its stack."""
    from rubinperf.calibrate.plan import read_csv
    from rubinperf.calibrate.rows import row_mode
    from rubinperf.specs.stack import load_platform

    hw = load_platform("h200")
    out = []
    repeat = read_csv(data_root() / "calibration/h200/shapes_repeat.csv")[1]
    for mode in ("graph", "cold"):
        rows = [r for r in repeat if row_mode(r) == mode]
        out.append(Family(
            f"kernels H200 / {hw.stack}: model shapes, {mode} (another run of the fitted shapes)", "kernel",
            "calibration/h200/shapes_repeat.csv (a second run of the shape suite, not fitted)", ("h200",),
            (hw.stack,), rows=_kernel_rows(rows, hw, True, f"h200 {mode} "),
            note="the fit saw these shapes in another run: run-to-run error, not unseen shapes"))
    cudnn = read_csv(data_root() / "calibration/h200/cudnn_decode.csv")[1]
    out.append(Family(f"kernels H200 / {hw.stack}: cuDNN decode attention (shapes not fitted)", "kernel",
                      "calibration/h200/cudnn_decode.csv (measured after the fit)", ("h200",), (hw.stack,),
                      rows=_kernel_rows(cudnn, hw, True, "h200 cudnn ")))
    return out


def aiconfigurator_families() -> list[Family]:
    """aiconfigurator 0.12.0's per-op tables, per system and framework, on the stack of that framework: rows of the
    system a stack was fitted on are in-sample, the other systems' rows held out (systems the fit did not see)."""
    from rubinperf.calibrate.plan import read_csv
    from rubinperf.specs.stack import load_platform

    here = data_root() / "calibration/aiconfigurator"
    out = []
    described: dict = {}    # and its description
    notes = {"vllm": "vLLM 0.24.0's FP8 block GEMMs and mHC, not the October 2026 posts' kernels the stack describes"}
    for framework, stack, fitted, systems in AIC_FITS:
        for system in systems:
            files = [here / f"{system}-{framework}.csv"]
            if framework == "trtllm":
                files.append(here / f"{system}-trtllm-models.csv")
            files = [p for p in files if p.is_file()]
            if not files:
                continue
            rows = [r for p in files for r in read_csv(p)[1]]
            rack = AIC_SYSTEMS[system]
            hw = load_platform(rack, stack)
            held = system != fitted
            how = ("held out: the stack was fitted on " + fitted if held and fitted else
                   "held out: the stack was never fitted to these tables" if held else "in-sample: the stack was fitted on these rows")
            out.append(Family(
                f"kernels {GPU[rack]} / {stack}: aiconfigurator {FRAMEWORK[framework]} ({'held out' if held else 'fitted'})",
                "kernel", ", ".join(f"calibration/aiconfigurator/{p.name}" for p in files), (rack,), (stack,),
                rows=_kernel_rows(rows, hw, held, f"aic {system} {framework} ", described),
                note="; ".join(x for x in (how, notes.get(framework, "")) if x), same_kernels=framework not in notes))
    return out


def kernel_families() -> list[Family]:
    return h200_families() + aiconfigurator_families()


# ---------------------------------------------------------------- step, mechanism and serving families


def aiconfigurator_step_family() -> Family:
    """aiconfigurator's whole decode step (DeepSeek-V4-Flash, SGLang tables, balanced routing, outlier-free) against
    rubinperf's GPU time of the same step (calibration/aiconfigurator/step_compare.csv, like-for-like rows), recomputed
    on the committed specs. Held out: the stack was fitted to single ops, never to a step."""
    import csv

    from rubinperf.specs.layout import parse_layout
    from rubinperf.specs.model import load_model
    from rubinperf.specs.stack import load_platform
    from rubinperf.step.point import make_point
    from rubinperf.step.timing import step

    path = data_root() / "calibration/aiconfigurator/step_compare.csv"
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == "deepseek-v4-flash"]
    m = load_model("deepseek-v4-flash")
    out, racks, platforms = [], [], {}
    for r in rows:
        rack = {"gb300": "gb300-nvl72", "gb200": "gb200-nvl72"}[r["system"]]
        if rack not in platforms:   # (one platform per rack for its rows)
            platforms[rack] = load_platform(rack, "sglang-blackwell")
        hw = platforms[rack]
        lay = parse_layout(r["layout"])
        res = step(m, hw, lay, make_point(m, hw, lay, phase="decode", batch=int(r["batch"]),
                                          context=int(r["context"]), draft_tokens=0))
        out.append({"id": f"aic-step {r['system']} {r['layout']} b{r['batch']}",
                    "measured": float(r["aiconfigurator_balanced_kept_ms"]) * 1e-3, "predicted": float(res.gpu_s),
                    "held_out": True, "hardware": rack, "stack": "sglang-blackwell", "model": "deepseek-v4-flash"})
        racks.append(rack)
    return Family("steps GB300/GB200 / sglang-blackwell: aiconfigurator whole decode step", "step",
                  "calibration/aiconfigurator/step_compare.csv (aiconfigurator 0.12.0 estimates from its measured tables)",
                  tuple(dict.fromkeys(racks)), ("sglang-blackwell",), ("deepseek-v4-flash",), out,
                  note="aiconfigurator's step is itself a sum of measured ops, not a measured step")


def point_families(records: list[dict]) -> list[Family]:
    """The published points (validate's records), by evidence level: the GB200 DEP4 -> DEP32 step figures, the other
    step figures, mechanisms, and serving points. A point marked fitted informed a spec field: not held out."""
    groups = {
        "steps GB200 / vLLM posts: DEP4 -> DEP32 decode (MegaMoE and the rest)":
            lambda r: r["metric"] in STEP_METRICS and r["id"].startswith("gb200-"),
        "steps: other published step figures (single user, context growth, per-node cluster figures)":
            lambda r: r["metric"] in STEP_METRICS and not r["id"].startswith("gb200-"),
        "mechanisms: share of a step a published change saves": lambda r: r["metric"] in MECHANISM_METRICS,
        "serving: disaggregated sweeps (vLLM V4.1 posts, previews on Rubin)":
            lambda r: r["metric"] in SERVING_METRICS and r["metric"] not in ("serve", "offline_tokens_per_s_per_gpu",
                                                                                   "simulated_request_rate"),
        "serving: offline max throughput (TensorRT-LLM perf overview)":
            lambda r: r["metric"] == "offline_tokens_per_s_per_gpu",
        "serving: closed-loop benchmarks (InferenceMAX, vLLM blog)": lambda r: r["metric"] == "serve",
        "serving: open-loop runs at a request rate (engine pull requests and bug reports on GitHub), simulated":
            lambda r: r["metric"] == "simulated_request_rate",
    }
    out = []
    stacks: dict = {}   # each rack's default stack, loaded once
    for name, pick in groups.items():
        rs = [r for r in records if pick(r)]
        level = name.split(" ", 1)[0].rstrip(":")
        level = {"steps": "step", "mechanisms": "mechanism"}.get(level, level)
        out.append(Family(name, level, "validation/published.toml", tuple(dict.fromkeys(r["hardware"] for r in rs)),
                          tuple(dict.fromkeys(r["stack"] or _default_stack(r["hardware"], stacks) for r in rs)),
                          tuple(dict.fromkeys(r["model"] for r in rs)),
                          [{"id": r["id"], "measured": r["published"], "predicted": r["predicted"],
                            "held_out": not r["fitted"], "hardware": r["hardware"],
                            "stack": r["stack"] or _default_stack(r["hardware"], stacks), "model": r["model"]}
                           for r in rs]))
    return out


def _default_stack(rack: str, memo: dict | None = None) -> str:
    """The rack's default stack (`memo`: the answer kept per rack for the other records of the same call)."""
    from rubinperf.specs.hardware import load_hardware

    if memo is not None and ("default stack", rack) in memo:
        return memo[("default stack", rack)]
    try:
        stack = load_hardware(rack).default_stack
    except Exception:   # a user's points file naming a rack by path: shown as given
        stack = "?"
    if memo is not None:
        memo[("default stack", rack)] = stack
    return stack


# ---------------------------------------------------------------- bands


def kernel_error(families: list[Family], rack: str, stack: str | None) -> tuple[float | None, str]:
    """The held-out median kernel |ln| beneath a rack on a stack: the (rack, stack) families whose rows time the
    stack's own kernels, else every family of the rack's GPU, else its generation's, else the nearest generation's
    (a proxy); (None, why) when none has held-out rows. (aiconfigurator's vLLM 0.24.0 tables time another vLLM's
    FP8 block GEMMs than the October 2026 posts' stack describes: evidence of the GPU, not of that stack.)"""
    kern = [f for f in families if f.level == "kernel"]
    gpu = GPU.get(rack)
    tiers = [("this rack and stack", lambda f: rack in f.hardware and stack in f.stacks and f.same_kernels),
             ("this GPU", lambda f: any(GPU.get(h) == gpu for h in f.hardware)),
             ("this GPU generation", lambda f: any(GENERATION.get(GPU.get(h)) == GENERATION.get(gpu) for h in f.hardware))]
    proxy = PROXY_GENERATION.get(GENERATION.get(gpu, ""))
    if proxy:
        tiers.append((f"{proxy} as a proxy (no {gpu} kernel measured)",
                      lambda f: any(GENERATION.get(GPU.get(h)) == proxy for h in f.hardware)))
    for why, pick in tiers:
        e = [x for f in kern if pick(f) for x in f.errors()]
        if e:
            return quantile(e, 0.5), f"kernels of {why}: median of {len(e)} held-out rows"
    return None, "no kernel evidence"


def point_band(rec: dict, families: list[Family], kernel_errors: dict | None = None) -> tuple[tuple[float, float], str]:
    """(low, high) for predicted/published of one validate record from the evidence beneath it, and how.
    `kernel_errors` keeps kernel_error's answer per (rack, stack), and each rack's default stack, for the other
    records over the same families."""
    stated = tuple(rec["band"])
    metric = rec["metric"]
    if metric in EXACT_METRICS:
        return stated, "stated (an exact sum over the model's shapes)"
    parts = []
    if metric in MECHANISM_METRICS:
        e = [x for f in families if f.level == "mechanism" for x in f.errors(without=rec["id"])]
        if e:
            parts.append((quantile(e, 0.9), f"mechanisms: 90th percentile of {len(e)} other points"))
    else:
        racks = [rec["hardware"]] + ([rec["baseline_hardware"]] if rec.get("baseline_hardware") else [])
        stacks = [rec["stack"] or _default_stack(rec["hardware"], kernel_errors)] + (
            [rec.get("baseline_stack") or _default_stack(rec["baseline_hardware"], kernel_errors)]
            if rec.get("baseline_hardware") else [])
        for rack, st in zip(racks, stacks):
            if kernel_errors is None:
                k, why = kernel_error(families, rack, st)
            else:
                if (rack, st) not in kernel_errors:
                    kernel_errors[(rack, st)] = kernel_error(families, rack, st)
                k, why = kernel_errors[(rack, st)]
            if k is not None:
                parts.append((k, f"{rack}: {why}"))
        if metric not in ("kernel_error_unseen",):
            e = [x for f in families if f.level == "step" for x in f.errors(without=rec["id"])]
            if e:
                parts.append((quantile(e, 0.9), f"steps: 90th percentile of {len(e)} other held-out step rows"))
    if not parts:
        return stated, "stated (no evidence beneath it)"
    w, why = max(parts, key=lambda p: p[0])
    lo, hi = math.exp(-w), math.exp(w)
    band = (max(lo, stated[0]), min(hi, stated[1]))
    narrower = band != (lo, hi)
    return band, (f"+-{w:.3f} in ln from {why}" + ("; the stated band is narrower on one side" if narrower else ""))


def apply_bands(records: list[dict], families: list[Family]) -> list[dict]:
    """Each record's band from the evidence beneath it (point_band); `stated_band` keeps the file's."""
    kernel_errors: dict = {}   # (rack, stack) -> kernel_error over these families
    for r in records:
        band, why = point_band(r, families, kernel_errors)
        r["stated_band"] = list(r["band"])
        r["band"] = [band[0], band[1]]
        r["band_low"], r["band_high"] = band
        r["band_from"] = why
        r["in_band"] = bool(r["reachable"] and band[0] <= r["ratio"] <= band[1])
    return records


# ---------------------------------------------------------------- the ledger


def coverage(families: list[Family]) -> list[dict]:
    """Per bundled rack, stack and model: held-out rows of measured evidence at each level."""
    from rubinperf.specs.loader import bundled_names

    out = []
    held = [(f, f.held_rows()) for f in families]
    for kind, attr, key in (("hardware", "hardware", "hardware"), ("stack", "stacks", "stack"), ("model", "models", "model")):
        # held-out usable rows per (level, name): a row's own `key` where it has one, else each of its family's `attr`
        tally: dict = {}
        for f, rows in held:
            names = set(getattr(f, attr))
            for r in rows:
                for name in ((r[key],) if key in r else names):
                    tally[(f.level, name)] = tally.get((f.level, name), 0) + 1
        for name in bundled_names(kind):
            counts = {lvl: tally.get((lvl, name), 0) for lvl in ("kernel", "step", "mechanism", "serving")}
            if kind == "model":
                counts["kernel"] = None   # kernel rows are shapes, not models
            ev = ("none" if not any(counts.values()) else "published figures only (no kernel measured)"
                  if kind != "model" and not counts["kernel"] else "measured")
            out.append({"kind": kind, "name": name, **counts, "evidence": ev})
    return out


def ledger(records: list[dict] | None = None, families: list[Family] | None = None) -> dict:
    """{"families": [stats per family], "coverage": [...]} over the kernel and step evidence and the points."""
    if families is None:
        families = all_families(records or [])
    return {"families": [stats(f) for f in families], "coverage": coverage(families)}


def all_families(records: list[dict]) -> list[Family]:
    return list(_evidence()) + point_families(records)


@functools.lru_cache(maxsize=1)
def _evidence() -> tuple:
    """The kernel and aiconfigurator step families: bundled files only, so built once per process, and kept
    between runs (rubinperf/kept.py: kept_of_tree, until a file of the package or the bundled folders changes)."""
    from rubinperf.kept import kept_of_tree

    fields = [f.name for f in dataclasses.fields(Family)]
    return kept_of_tree("ledger evidence", lambda: tuple(kernel_families() + [aiconfigurator_step_family()]),
                        lambda fams: [[getattr(f, n) for n in fields] for f in fams],
                        lambda kept: tuple(Family(**dict(zip(fields, values))) for values in kept))


def all_families_from(families: list[Family], records: list[dict]) -> list[Family]:
    """`families` with the point families rebuilt from `records` (the kernel and step evidence kept)."""
    return [f for f in families if f.source != "validation/published.toml"] + point_families(records)


def baseline(path=BASELINE_FILE) -> dict:
    return json.loads(open(path).read())


def regressions(current: list[dict], base: dict) -> list[str]:
    """Families whose held-out error grew past the margin over the baseline (or that lost their held-out rows)."""
    out = []
    now = {s["family"]: s for s in current}
    for name, b in base["families"].items():
        s = now.get(name)
        if s is None:
            out.append(f"{name}: family gone")
            continue
        if b["median_abs_log"] is None:
            continue
        if s["median_abs_log"] is None:
            out.append(f"{name}: no held-out rows left (baseline {b['held_out']})")
            continue
        if s["median_abs_log"] > b["median_abs_log"] + base["margin_median"]:
            out.append(f"{name}: median |ln| {s['median_abs_log']:.3f} > baseline {b['median_abs_log']:.3f} + "
                       f"{base['margin_median']}")
        if s["p90_abs_log"] > b["p90_abs_log"] + base["margin_p90"]:
            out.append(f"{name}: 90th percentile |ln| {s['p90_abs_log']:.3f} > baseline {b['p90_abs_log']:.3f} + "
                       f"{base['margin_p90']}")
    return out


def baseline_json(current: list[dict]) -> str:
    fams = {s["family"]: {k: (round(s[k], 4) if isinstance(s[k], float) else s[k])
                          for k in ("level", "held_out", "median_abs_log", "p90_abs_log")} for s in current}
    return json.dumps({"margin_median": MARGIN_MEDIAN, "margin_p90": MARGIN_P90,
                       "written_by": "python -m rubinperf.analysis.ledger --write-baseline", "families": fams},
                      indent=1) + "\n"


if __name__ == "__main__":  # pragma: no cover - the maintainer's command that rewrites the baseline
    import sys

    from rubinperf.analysis.validate import load_points, validate

    led = ledger(validate(load_points()))
    if "--write-baseline" in sys.argv:
        BASELINE_FILE.write_text(baseline_json(led["families"]))
        print(f"wrote {BASELINE_FILE}")
    else:
        for s in led["families"]:
            print(f"{s['family']}: {s['verdict']}")
