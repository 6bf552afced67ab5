"""Kernel cost formulas: pure functions of shapes, precisions and layout, returning a Cost.

Arguments may be numbers, numpy arrays (sweeps) or sympy symbols (explain).
"""

from rubinperf.kernels.attention import attention
from rubinperf.kernels.collectives import all_gather, all_reduce, all_to_all
from rubinperf.kernels.gemm import gemm
from rubinperf.kernels.memory import copy, elementwise, table_lookup
from rubinperf.kernels.moe import experts_touched, experts_touched_topk, grouped_gemm

__all__ = [
    "attention", "all_gather", "all_reduce", "all_to_all", "gemm", "copy", "elementwise",
    "table_lookup", "experts_touched", "experts_touched_topk", "grouped_gemm",
]
