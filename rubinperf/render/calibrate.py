"""Tables of `rubinperf calibrate`: the fitted fields, the error per kernel family and on held-out rows (presentation only)."""

from __future__ import annotations
from rubinperf.render.output import print_out
from rubinperf.render.tables import col, table
from rubinperf.units import fmt_time, si



def calibration_tables(rec: dict) -> None:
    """The fitted fields before and after, the error per kernel family (or per collective), and on held-out rows."""
    def val(field: str, v: float) -> str:
        return fmt_time(v) if field.endswith("_s") else f"{v:.3g}"

    rows = [[f["field"], val(f["field"], f["before"]), val(f["field"], f["after"]), "fitted" if f["fitted"] else "kept"]
            for f in rec["fit"]]
    caption = (f"{rec['measurements']} measurements on {rec['gpu'] or 'an unknown GPU'}; {rec['method']}; "
               f"{rec['objective']} {rec['objective_before']:.4f} -> {rec['objective_after']:.4f}\n"
               "wrote " + " and ".join(p for p in (rec["toml"], rec["stack_toml"]) if p) + ("" if rec["csv"] == "" else f"; measurements in {rec['csv']}")
               + "".join(f"\nnote: {n}" for n in rec["notes"]))
    print_out(table(f"Calibrated efficiency table of {rec['hardware']} ({rec['kind']})",
                                  [("field", "left"), ("before", "right"), ("after", "right"), ("", "left")], rows,
                                  caption=caption))
    if rec["kind"] == "kernels":
        fam = [[b["family"], str(b["n"]), f"{b['median_ratio']:.2f}", f"{b['worst_ratio']:.2f}",
                f"{a['median_ratio']:.2f}", f"{a['worst_ratio']:.2f}", f"{a['max_sol_over_measured']:.2f}"]
               for b, a in zip(rec["families_before"], rec["families_after"])]
        cols = [col("family", "left", min_width=17, wrap=False), col("rows"),
                col("before median", short="bef. med.", drop=2), col("before worst", short="bef. worst", drop=3),
                col("after median", short="median"), col("after worst", short="worst"),
                col("max SOL/measured", short="SOL/meas", drop=1)]
        print_out(table("measured / expected time per kernel family", cols, fam))
        ho = rec.get("heldout") or {}
        if ho:
            rows_ = [[m, str(v["n"]), f"{v['median_abs_log']:.3f}", f"{v['worst_abs_log']:.3f}",
                      f"{v['max_sol_over_measured']:.2f}", v["worst_row"]] for m, v in ho["modes"].items()]
            rows_.append(["all", str(ho["n"]), f"{ho['median_abs_log']:.3f}", f"{ho['worst_abs_log']:.3f}",
                          f"{ho['max_sol_over_measured']:.2f}", ho["worst_row"]])
            cols = [col("launch", "left", wrap=False), col("rows"), col("median |ln|", short="median"),
                    col("worst |ln|", short="worst"), col("max SOL/meas", short="SOL/meas", drop=1),
                    col("worst row", "left", min_width=20)]
            print_out(table(f"error on shapes the fit did not see ({ho['folds']}-fold cross-validation over "
                            f"{ho.get('shape_families', '?')} whole shape families)",
                                          cols, rows_))
    else:
        grp = [[g["collective"], str(g["ranks"]), str(g["points"]), fmt_time(g["intercept_s"]),
                f"{g['nvlink_efficiency']:.2f}", si(g["busbw_bytes_per_s"], "B/s")] for g in rec["groups"]]
        cols = [("collective", "left"), ("ranks", "right"), ("sizes", "right"), ("floor + hops x latency", "right"),
                ("link efficiency", "right"), ("bandwidth", "right")]
        print_out(table("per collective and rank count (fitted separately)", cols, grp))
