"""Grouped (MoE) GEMM over experts, with the expected number of experts a batch touches."""

from __future__ import annotations

from rubinperf.cost import Cost
from rubinperf.mathops import smax, smin
from rubinperf.precision import PRECISIONS, mma_peak


def experts_touched(rows, groups):
    """Expected distinct groups hit by `rows` independent uniform draws over `groups`: G(1 - (1 - 1/G)^rows).

    Numerically the expression can round just outside its exact range (1 row over 3 groups gives
    0.9999999999999998), so numbers and arrays are clamped to [min(rows, 1), min(G, max(rows, 1))],
    which the exact value always lies in; symbols keep the bare formula.
    """
    touched = groups * (1 - (1 - 1 / groups) ** rows)
    if hasattr(touched, "free_symbols"):
        return touched
    return smin(smax(touched, smin(rows, 1)), groups, smax(rows, 1))


def experts_touched_topk(tokens, top_k, experts, local_experts=None):
    """Expected experts touched among `local_experts` (default: all) when each of `tokens`
    picks `top_k` distinct experts of `experts` uniformly: L(1 - (1 - k/E)^tokens)."""
    local = experts if local_experts is None else local_experts
    return local * (1 - (1 - top_k / experts) ** tokens)


def grouped_gemm(rows, groups, n, k, weight: str = "fp4", act: str | None = None, out: str = "bf16",
                 touched=None, launches=1) -> Cost:
    """`rows` = tokens x top-k routed rows spread uniformly over `groups` experts of [k, n] weights.

    Only touched experts' weights are read; `touched` overrides the uniform-routing expectation.
    """
    act = act or weight
    w, a, o = PRECISIONS[weight], PRECISIONS[act], PRECISIONS[out]
    if touched is None:
        touched = experts_touched(rows, groups)
    return Cost.of_flops(mma_peak(act, weight), 2 * rows * n * k) + Cost(
        weight_bytes=touched * n * k * w.bytes_per_element,
        activation_bytes=rows * k * a.bytes_per_element + rows * n * o.bytes_per_element,
        launches=launches,
    )
