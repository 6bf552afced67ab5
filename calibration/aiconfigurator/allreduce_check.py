"""The all-reduce by message size against aiconfigurator's measured all-reduce tables.

For every all-reduce row of calibration/aiconfigurator/<system>-collectives.csv (NCCL 2.29.2, TensorRT-LLM
1.3.0rc20's and SGLang 0.5.14's custom all-reduce, CUDA-graph timings, BF16), the algorithm the row's library
picks for that message under the stack that runs it (TensorRT-LLM rows: trtllm-blackwell or trtllm-hopper;
SGLang rows: sglang-blackwell or sglang-deepep-hopper; NCCL rows: pytorch-2.11, NCCL's ring at every size), the
time rubinperf gives that algorithm on the system's rack (roofline.kernel_time), and the error ln(measured /
expected) per library and algorithm. No parameter is fitted to these rows: they check the switch points and the
resulting times.

    python calibration/aiconfigurator/allreduce_check.py            # the table (markdown)
    python calibration/aiconfigurator/allreduce_check.py --rows     # every row
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rubinperf.kernels.collectives import all_reduce_by_size  # noqa: E402
from rubinperf.roofline import kernel_time  # noqa: E402
from rubinperf.specs.stack import load_platform  # noqa: E402

HERE = Path(__file__).resolve().parent
SYSTEMS = {"h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
HOPPER = {"h200_sxm"}


def stack_of(system: str, impl: str) -> str:
    if impl.startswith("NCCL"):
        return "pytorch-2.11"
    if impl.startswith("TRTLLM"):
        return "trtllm-hopper" if system in HOPPER else "trtllm-blackwell"
    if impl.startswith("SGLang"):
        return "sglang-deepep-hopper" if system in HOPPER else "sglang-blackwell"
    raise ValueError(impl)


def rows():
    out = []
    for system, hardware in SYSTEMS.items():
        with open(HERE / f"{system}-collectives.csv") as f:
            for r in csv.DictReader(f):
                if r["collective"] != "all_reduce":
                    continue
                hw = load_platform(hardware, stack_of(system, r["impl"]))
                nbytes, ranks = float(r["nbytes"]), int(r["ranks"])
                kernel, algorithm = all_reduce_by_size(nbytes, ranks, hw.allreduce_algorithms, hw.allreduce_switch_bytes,
                                                       gpus_per_tray=hw.gpus_per_tray, multicast=hw.nvlink_multicast,
                                                       fused_one_shot=hw.tp_allreduce_fused,
                                                       switch_ranks=hw.allreduce_switch_ranks)
                expected = float(kernel_time(kernel, hw).expected_s)
                measured = float(r["measured_s"])
                out.append(dict(system=system, impl=r["impl"].split()[0].split("_")[0], ranks=ranks, nbytes=int(nbytes),
                                algorithm=algorithm, measured_us=measured * 1e6, expected_us=expected * 1e6,
                                log_error=math.log(measured / expected)))
    return out


def summary(all_rows) -> str:
    groups: dict = {}
    for r in all_rows:
        groups.setdefault((r["impl"], r["algorithm"]), []).append(r)
    lines = ["| library | algorithm | rows | sizes | median ln(measured/expected) | median abs | worst abs |",
             "|---|---|---|---|---|---|---|"]
    for (impl, algorithm), rs in sorted(groups.items()):
        errs = [r["log_error"] for r in rs]
        sizes = f"{min(r['nbytes'] for r in rs):,} - {max(r['nbytes'] for r in rs):,} B"
        lines.append(f"| {impl} | {algorithm} | {len(rs)} | {sizes} | {statistics.median(errs):+.2f} | "
                     f"{statistics.median(abs(e) for e in errs):.2f} | {max(abs(e) for e in errs):.2f} |")
    return "\n".join(lines)


def main(argv) -> int:
    all_rows = rows()
    if "--rows" in argv:
        print("system,impl,ranks,nbytes,algorithm,measured_us,expected_us,log_error")
        for r in all_rows:
            print(f"{r['system']},{r['impl']},{r['ranks']},{r['nbytes']},{r['algorithm']},{r['measured_us']:.3f},"
                  f"{r['expected_us']:.3f},{r['log_error']:+.3f}")
    print(summary(all_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
