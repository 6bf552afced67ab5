"""The accuracy ledger's tables (`rubinperf validate`): held-out error per family, coverage (presentation only)."""

from __future__ import annotations

import math

from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table


def _pct(x) -> str:
    return "—" if x is None else f"{100 * (math.exp(x) - 1):.0f}%"


def ledger_tables(led: dict) -> None:
    cols = [col("family", "left", min_width=24), col("level", "left", drop=4), col("rows", drop=3),
            col("held out", short="h/o"), col("median", short="med"), col("90%"), col("worst", "left", drop=5, min_width=16),
            col("verdict", "left", min_width=24)]
    rows = [[s["family"], s["level"], f"{s['rows']:,}", f"{s['held_out']:,}", _pct(s["median_abs_log"]),
             _pct(s["p90_abs_log"]),
             "" if s["worst_ratio"] is None else f"{s['worst']} ({s['worst_ratio']:.2f}x)", s["verdict"]]
            for s in led["families"]]
    print_out(table("Accuracy ledger: error on rows no fit saw", cols, rows,
                    caption="median, 90%: exp(|ln(predicted/measured)|) - 1 over the held-out rows; a fitted "
                            "family's rows are in-sample and count for no band. A point's band above is the larger of "
                            "its rack's median kernel error and the 90th percentile of the other held-out step rows "
                            "(mechanisms: of the other mechanism points), never wider."))
    cov = [c for c in led["coverage"]]
    ccols = [col("kind", "left"), col("name", "left"), col("kernel rows", short="kern"), col("step rows", short="step"),
             col("mechanism rows", short="mech", drop=2), col("serving rows", short="serv"), col("evidence", "left")]
    crow = [[c["kind"], c["name"], "—" if c["kernel"] is None else f"{c['kernel']:,}", f"{c['step']:,}",
             f"{c['mechanism']:,}", f"{c['serving']:,}", c["evidence"]] for c in cov]
    none = [c["name"] for c in cov if c["evidence"] == "none"]
    print_out(table("Coverage: held-out measured evidence per rack, stack and model", ccols, crow,
                    caption=("no measured evidence: " + ", ".join(none)) if none else None))
