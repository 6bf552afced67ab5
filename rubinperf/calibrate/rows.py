"""Each measured row as the Kernel the model times: the same kernel functions `estimate` uses.

No torch here. A row's `mode` says how it was launched: `graph` (chained in one CUDA graph,
the default for rows written before the column existed) or `eager` (launched alone).
Probe families measure one hardware fact directly instead of a kernel time:
`launch` (an empty kernel: the launch alone), `pointer_chase` (one dependent HBM load).
"""

from __future__ import annotations

from rubinperf.cost import Cost, Kernel
from rubinperf.errors import SpecError

PROBES = ("launch", "pointer_chase")


def row_mode(row: dict) -> str:
    return row.get("mode") or "graph"


def row_kernel(row: dict) -> Kernel:
    """The Kernel of one measured row, from the model's own kernel functions."""
    from rubinperf.kernels import attention, copy, elementwise, gemm, grouped_gemm

    fam = row["family"]
    if fam in PROBES:
        return Kernel("stream", Cost(launches=1), dependent_loads=0)
    if fam == "copy":
        return copy(row["nbytes"])
    if fam == "elementwise":  # nbytes: bytes read + written
        return elementwise(row["nbytes"] / 2, row["nbytes"] / 2)
    if fam == "stream_ctas":  # a read-only probe of `ctas` CTAs, each with `inflight_bytes` in flight
        return Kernel("stream", Cost(activation_bytes=row["nbytes"], launches=1), ctas=row["ctas"],
                      in_flight_bytes_per_cta=row["inflight_bytes"])
    if fam == "gemm":
        d = row["dtype"]
        return gemm(row["m"], row["n"], row["k"], weight=d, act=d, out="bf16")
    if fam == "grouped_gemm":
        d = row["dtype"]
        return grouped_gemm(row["rows"], row["groups"], row["n"], row["k"], weight=d, act=d, out="bf16",
                            touched=row.get("touched"))
    if fam in ("attention_decode", "attention_prefill"):
        v = row.get("v_head_dim")
        return attention(row["batch"], row["heads"], row["q_len"], row["kv_len"], row["head_dim"], dtype=row["dtype"],
                         kv_heads=row["kv_heads"], causal=bool(row["causal"]), v_head_dim=v or None,
                         shared_kv=bool(v) and v < row["head_dim"])
    raise SpecError(f"unknown kernel family '{fam}'")
