"""Attention with flash-style I/O: Q read once, O written once, K/V read once per KV head."""

from __future__ import annotations

from rubinperf.cost import Cost
from rubinperf.precision import PRECISIONS


def attended_per_query(q_len, kv_len, causal: bool):
    """Mean KV entries one query attends. Causal: the q_len queries are the last of kv_len positions."""
    if causal:
        return kv_len - (q_len - 1) / 2
    return kv_len


def attention(batch, heads, q_len, kv_len, head_dim, dtype: str = "bf16", kv_heads=None, causal: bool = False,
              v_head_dim=None, kv_dtype: str | None = None, shared_kv: bool = False, kv_entry_bytes=None,
              launches=1) -> Cost:
    """FLOPs: 2 x (QK^T width + PV width) per query, head and attended entry.

    K/V are shared by groups of heads (GQA/MQA) when `kv_heads` < `heads`; with `shared_kv`
    K and V are one latent tensor (V4 MQA, absorbed MLA) read once. `kv_entry_bytes`
    overrides the bytes of one KV entry per KV head (packed cache formats).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    p = PRECISIONS[dtype]
    kvp = PRECISIONS[kv_dtype or dtype]
    attended = attended_per_query(q_len, kv_len, causal)
    flops = 2 * batch * heads * q_len * attended * (head_dim + v_head_dim)
    if kv_entry_bytes is None:
        kv_entry_bytes = (head_dim if shared_kv else head_dim + v_head_dim) * kvp.bytes_per_element
    return Cost.of_flops(p.peak, flops) + Cost(
        kv_bytes=batch * kv_heads * kv_len * kv_entry_bytes,
        activation_bytes=batch * q_len * heads * (head_dim + v_head_dim) * p.bytes_per_element,
        launches=launches,
    )
