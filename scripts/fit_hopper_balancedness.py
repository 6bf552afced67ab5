"""Fit sglang-deepep-hopper's eplb_target_balancedness to SGLang's prefill profile table (real routing vs balanced).

The measurement (LMSYS, 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100
GPUs', 5 May 2025, 'Profile Results', prefill table): on the 4 x 8 H100 prefill engine (EP32, DeepEP normal mode,
two-batch overlap) at 16,384 tokens per device and 4,096-token inputs, 50,302 input tokens/s per node with the
engine's expert distribution ('SGLang (Default)') and 59,337 with perfect EPLB simulated ('SGLang + Simulated Perfect
EPLB'): a ratio of two step times at one operating point, 0.848. Balancedness (mean rank load / max rank load)
stretches the routed experts and both DeepEP exchanges (rubinperf/step/graph.py); the fit finds the balancedness at
which the model's step ratio equals the measured one, with the stack's other fields as bundled. Held out: the H100 node
at 2K prompts, the H100 and H800 decode nodes, DeepSeek's profile rows.

    python scripts/fit_hopper_balancedness.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rubinperf.specs.layout import parse_layout        # noqa: E402
from rubinperf.specs.model import load_model           # noqa: E402
from rubinperf.specs.stack import load_platform        # noqa: E402
from rubinperf.step.point import make_point            # noqa: E402
from rubinperf.step.timing import step                 # noqa: E402

DEFAULT, BALANCED = 50302.0, 59337.0     # input tokens/s per node, real routing and perfect EPLB


def step_ratio(balancedness: float) -> float:
    """Balanced step / real-routing step at 4 prompts of 4,096 new tokens per rank (tokens/s go as 1 / step)."""
    m = load_model("deepseek-v3")
    hw = load_platform("h100-cluster")
    lay = parse_layout("dep32")
    kw = dict(phase="prefill", batch=4, new_tokens=16384, context=0)
    real = dataclasses.replace(hw, eplb_target_balancedness=balancedness)
    even = dataclasses.replace(hw, eplb_target_balancedness=1.0)
    return (float(step(m, even, lay, make_point(m, even, lay, **kw)).expected_s)
            / float(step(m, real, lay, make_point(m, real, lay, **kw)).expected_s))


def fit(target: float = DEFAULT / BALANCED, lo: float = 0.5, hi: float = 1.0) -> float:
    """The balancedness at which the model's ratio equals `target` (bisection: the ratio rises with balancedness)."""
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step_ratio(mid) < target else (lo, mid)
    return (lo + hi) / 2


def main() -> None:
    b = fit()
    print(f"measured ratio {DEFAULT / BALANCED:.4f}; fitted eplb_target_balancedness {b:.3f} "
          f"(model ratio there {step_ratio(b):.4f}; at the bundled value "
          f"{load_platform('h100-cluster').eplb_target_balancedness:g}: {step_ratio(load_platform('h100-cluster').eplb_target_balancedness):.4f})")


if __name__ == "__main__":
    main()
