"""The public kernel evidence table: every published measurement of the kernels the bundled
stacks name, one row each (`calibration/public/kernels.csv`; its README describes every source
and column).

`load_evidence()` reads it strictly: an unknown or missing column, an unknown GPU or kernel, a
time that is not a positive number, a shape that is not `key=value` pairs of numbers, a rate
without its unit, a repeated id: each is a SpecError naming the file and the row. Times are
held in seconds inside (`measured_s`); `measured_us` gives them back as the file writes them.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping

from rubinperf.errors import SpecError, shorten

COLUMNS = ("id", "source_url", "source_detail", "gpu", "kernel", "precision", "shape",
           "measured_us", "reported_rate", "reported_rate_unit", "timing_method", "notes")

GPUS = ("h20", "h800", "h100", "h200", "b200", "b300", "gb200", "gb300")

KERNELS = ("mega_moe", "mega_moe_sm90", "fp8_gemm", "fp8_fp4_gemm", "bf16_gemm", "grouped_gemm_contiguous",
           "grouped_gemm_masked", "mqa_logits", "mqa_logits_paged", "hc_prenorm_gemm", "sparse_mla_decode", "sparse_mla_prefill",
           "mla_decode", "deepep_dispatch", "deepep_combine", "deepep_ll_dispatch", "deepep_ll_combine")

_REQUIRED = ("id", "source_url", "source_detail", "gpu", "kernel", "precision", "shape", "measured_us",
             "timing_method")
# The source of a row measured by this project (calibration/hopper/: the script, commit and environment in its
# source_detail); accepted only where the loader is told the file holds own runs.
OWN_SOURCE = "own run"
_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")
# Rates a source publishes beside the one in `reported_rate`, kept in `notes` as
# "[other_rates hbm_gbps=1311 nvlink_gbps=1]".
_OTHER_RATES = re.compile(r"\[other_rates ([^\]]*)\]")


@dataclass(frozen=True)
class EvidenceRow:
    id: str
    source_url: str
    source_detail: str
    gpu: str
    kernel: str
    precision: str
    shape: Mapping[str, float] = field(hash=False)  # shape key -> value (read-only): m, n, k, tokens_per_rank, ep, batch, ...
    measured_s: float                 # the kernel time as published (or derived from its rate: see notes)
    reported_rate: float | None       # the rate the source prints beside the time, in reported_rate_unit
    reported_rate_unit: str
    timing_method: str
    notes: str
    other_rates: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @property
    def measured_us(self) -> float:
        return self.measured_s * 1e6

    @property
    def source(self) -> str:
        return source_key(self.source_url)


def default_path() -> Path:
    from rubinperf.bundled import folder

    return folder("calibration") / "public" / "kernels.csv"


def own_path() -> Path:
    """The own measurements in the same schema: DeepGEMM's SM90 kernels timed on an H200 (calibration/hopper/)."""
    from rubinperf.bundled import folder

    return folder("calibration") / "hopper" / "deepgemm_sm90_evidence.csv"


def own_paths() -> list[Path]:
    """Every file of own measurements in this schema: DeepGEMM's SM90 kernels (own_path), FlashMLA's SM90 sparse
    decode timed on an H100 / H200 (calibration/hopper/flashmla/) and the SM90 FP8 Mega MoE of DeepGEMM PR #323's fork
    on one GPU (calibration/hopper/megamoe_sm90/)."""
    from rubinperf.bundled import folder

    return [own_path(), folder("calibration") / "hopper" / "flashmla" / "flashmla_sm90_evidence.csv",
            folder("calibration") / "hopper" / "megamoe_sm90" / "megamoe_sm90_evidence.csv"]


def source_key(url: str) -> str:
    """One name per public source: a GitHub pull request or bug report (`owner/repo#N`), a file in a repository
    (`owner/repo:path`, whatever the commit), else the address without its scheme."""
    m = re.match(r"https?://github\.com/([^/]+/[^/]+)/(?:pull|issues)/(\d+)", url)
    if m:
        return f"{m.group(1)}#{m.group(2)}"
    m = re.match(r"https?://github\.com/([^/]+/[^/]+)/blob/[^/]+/(.+?)(?:#.*)?\Z", url)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    return re.sub(r"\Ahttps?://", "", url).split("#")[0]


def _number(where: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{where}: {key}: expected a number, got {shorten(text)!r}") from None
    if not math.isfinite(value):
        raise SpecError(f"{where}: {key}: expected a finite number, got {shorten(text)!r}")
    return value


def _pairs(where: str, key: str, text: str, sep: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in text.split(sep):
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or not _KEY.match(name):
            raise SpecError(f"{where}: {key}: expected key=value pairs separated by {sep!r}, got {shorten(part)!r}")
        if name in out:
            raise SpecError(f"{where}: {key}: {name} given twice")
        out[name] = _number(where, f"{key} {name}", value.strip())
    return out


def _row(where: str, raw: dict[str, str], own_runs: bool = False) -> EvidenceRow:
    for key in _REQUIRED:
        if not raw[key].strip():
            raise SpecError(f"{where}: {key} is empty")
    if raw["gpu"] not in GPUS:
        raise SpecError(f"{where}: gpu: {shorten(raw['gpu'])!r} is not one of {', '.join(GPUS)}")
    if raw["kernel"] not in KERNELS:
        raise SpecError(f"{where}: kernel: {shorten(raw['kernel'])!r} is not one of {', '.join(KERNELS)}")
    if not raw["source_url"].startswith("https://") and not (own_runs and raw["source_url"].strip() == OWN_SOURCE):
        raise SpecError(f"{where}: source_url: expected an https:// address, got {shorten(raw['source_url'])!r}")
    us = _number(where, "measured_us", raw["measured_us"])
    if us <= 0:
        raise SpecError(f"{where}: measured_us: expected a positive time, got {raw['measured_us']!r}")
    rate = None
    if raw["reported_rate"].strip():
        rate = _number(where, "reported_rate", raw["reported_rate"])
        if rate <= 0:
            raise SpecError(f"{where}: reported_rate: expected a positive rate, got {raw['reported_rate']!r}")
        if not raw["reported_rate_unit"].strip():
            raise SpecError(f"{where}: reported_rate {raw['reported_rate']} has no reported_rate_unit")
    shape = _pairs(where, "shape", raw["shape"], ";")
    if not shape:
        raise SpecError(f"{where}: shape is empty")
    if any(v <= 0 for v in shape.values()):
        raise SpecError(f"{where}: shape: every size must be positive, got {raw['shape']!r}")
    others: dict[str, float] = {}
    for found in _OTHER_RATES.findall(raw["notes"]):
        others.update(_pairs(where, "notes other_rates", found, " "))
    return EvidenceRow(
        id=raw["id"].strip(), source_url=raw["source_url"].strip(), source_detail=raw["source_detail"].strip(),
        gpu=raw["gpu"], kernel=raw["kernel"], precision=raw["precision"].strip(),
        shape=MappingProxyType(shape), measured_s=us * 1e-6, reported_rate=rate,
        reported_rate_unit=raw["reported_rate_unit"].strip(), timing_method=raw["timing_method"].strip(),
        notes=raw["notes"].strip(), other_rates=MappingProxyType(others))


def load_evidence(path: str | Path | None = None, own_runs: bool = False) -> list[EvidenceRow]:
    """Every row of the evidence table (the bundled one unless `path` names another), in file order. `own_runs`: the
    file holds this project's own measurements (calibration/hopper/), whose source_url may be OWN_SOURCE."""
    path = Path(path) if path is not None else default_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the evidence table ({exc.strerror or exc})") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise SpecError(f"{path}: empty file, expected the header {','.join(COLUMNS)}")
    if header != list(COLUMNS):
        unknown = [c for c in header if c not in COLUMNS]
        missing = [c for c in COLUMNS if c not in header]
        what = (f"unknown column {unknown[0]!r}" if unknown else f"missing column {missing[0]!r}" if missing
                else "columns repeated or out of order")
        raise SpecError(f"{path}: row 1 (header): {shorten(what)}; expected {','.join(COLUMNS)}")
    rows: list[EvidenceRow] = []
    seen: set[str] = set()
    for line, cells in enumerate(reader, start=2):
        if not cells or not any(c.strip() for c in cells):
            continue
        where = f"{path}: row {line}" + (f" ({shorten(cells[0], 60)})" if cells[0].strip() else "")
        if len(cells) != len(header):
            raise SpecError(f"{where}: {len(cells)} fields, expected {len(header)} (quote fields that hold commas)")
        row = _row(where, dict(zip(header, cells)), own_runs)
        if row.id in seen:
            raise SpecError(f"{where}: id {row.id!r} repeats an earlier row")
        seen.add(row.id)
        rows.append(row)
    if not rows:
        raise SpecError(f"{path}: no rows")
    return rows


def select(rows: Iterable[EvidenceRow], *, kernel: str | None = None, gpu: str | None = None) -> list[EvidenceRow]:
    """The rows of one kernel family and/or one GPU."""
    return [r for r in rows if (kernel is None or r.kernel == kernel) and (gpu is None or r.gpu == gpu)]
