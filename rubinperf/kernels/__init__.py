"""Kernel cost formulas: pure functions of shapes, precisions and layout, returning a Kernel (a Cost
and how its work spreads over SMs). Every Cost of the model is born here.

Arguments may be numbers, numpy arrays (sweeps) or sympy symbols (explain). In a product, numbers and
per-request factors come before a factor of the context: over a sweep's batch x context grid the product
then makes one pass over the grid, not one per factor.
"""

from rubinperf.kernels.attention import (attention, indexer_logits, indexer_select, mla_key_assembly, mla_kv_up_projection,
                                        sparse_attention, topk_select, visible_positions)
from rubinperf.kernels.collectives import (all_gather, all_reduce, all_reduce_algorithm, all_reduce_by_size, all_reduce_one_shot, switch_row, all_to_all, ep_all_gather_exchange,
                                           reduce_scatter)
from rubinperf.kernels.gemm import gemm
from rubinperf.kernels.memory import (activation_quant, copy, dp_sync, elementwise, empty, hc_prenorm_gemm, host_step, in_epilogue, kv_insert, kv_insert_kernel,
                                     kv_load, kv_transfer, mhc, mhc_split, rope, stream_probe, table_lookup)
from rubinperf.kernels.moe import (cutlass_moe, ep_copies, ep_dispatch_combine, ep_exchange, experts_touched, experts_touched_topk, grouped_gemm,
                                   mega_moe, routed_gemms, spans_domains)

__all__ = [
    "activation_quant", "attention", "mla_key_assembly", "mla_kv_up_projection", "indexer_logits", "indexer_select", "sparse_attention", "topk_select", "all_gather", "all_reduce", "all_reduce_algorithm", "all_reduce_by_size", "switch_row", "all_reduce_one_shot", "all_to_all",
    "reduce_scatter", "gemm", "copy", "dp_sync", "elementwise", "hc_prenorm_gemm", "host_step", "kv_insert", "kv_load", "kv_transfer", "mhc", "table_lookup",
    "ep_dispatch_combine", "experts_touched", "experts_touched_topk", "grouped_gemm", "mega_moe", "ep_copies",
    "spans_domains", "ep_exchange", "ep_all_gather_exchange", "in_epilogue", "kv_insert_kernel", "mhc_split", "rope", "routed_gemms", "cutlass_moe", "empty", "stream_probe", "visible_positions",
]
