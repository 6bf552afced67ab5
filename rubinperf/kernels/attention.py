"""Attention kernels: generic flash-style attention, the step's sparse MQA attention, the indexer's logits.

Flash-style I/O: Q read once, O written once, K/V read once per KV head.
"""

from __future__ import annotations

from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.kernels.gemm import gemm
from rubinperf.mathops import scap, sceil, smin
from rubinperf.specs.precision import ACT_BYTES, LOGIT_BYTES, PRECISIONS  # BF16 queries and outputs, FP32 indexer scores

# Queries of one CTA of a flash prefill kernel (FlashAttention-2/3 and cuDNN's fused attention on Hopper: 128-query
# tiles at head dim 128; FlashAttention-3 paper, Shah et al. 2024). One CTA per (sequence, head, query tile).
FLASH_QUERY_TILE = 128


def attended_per_query(q_len, kv_len, causal: bool):
    """Mean KV entries one query attends. Causal: the q_len queries are the last of kv_len positions."""
    if causal:
        return kv_len - (q_len - 1) / 2
    return kv_len


def computed_per_query(q_len, kv_len, tile=FLASH_QUERY_TILE):
    """Mean KV entries a causal flash kernel computes per query: it skips the key blocks wholly above the diagonal
    but computes the blocks the diagonal crosses in full, masking their upper part (FlashAttention-2,
    csrc/flash_attn/src/flash_fwd_kernel.h: n_block_max = ceil_div((m_block + 1) x kBlockM + seqlen_k - seqlen_q,
    kBlockN); TensorRT-LLM's context kernel ASSUMED alike). With query tiles and key blocks of `tile` (ASSUMPTION:
    equal, 128, range 64-128; the kernels' own key-block widths not read) a tile of queries computes up to the end
    of the key block holding its last query: (tile - 1) / 2 keys per query beyond those it attends, never past the
    last key block (a short q_len behind a long prefix pays at most that block)."""
    return smin(attended_per_query(q_len, kv_len, True) + (tile - 1) / 2, sceil(kv_len / tile) * tile)


def attention(batch, heads, q_len, kv_len, head_dim, dtype: str = "bf16", kv_heads=None, causal: bool = False,
              v_head_dim=None, kv_dtype: str | None = None, shared_kv: bool = False, kv_entry_bytes=None,
              mma_dtype: str | None = None) -> Kernel:
    """FLOPs: 2 x (QK^T width + PV width) per query, head and attended entry, at the rate of `mma_dtype`
    (None: `dtype`, the queries' and outputs' format).

    K/V are shared by groups of heads (GQA/MQA) when `kv_heads` < `heads`; with `shared_kv`
    K and V are one latent tensor (V4 MQA, absorbed MLA) read once. `kv_entry_bytes`
    overrides the bytes of one KV entry per KV head (packed cache formats). Non-causal (decode):
    one CTA per (sequence, KV head) and tile of its query rows; with fewer such groups than SMs a flash
    kernel splits the KV over more CTAs, so it fills the GPU, and a second kernel reduces the splits
    (`Kernel.split_kv_groups`, roofline.split_kv_reduction).

    Causal (prefill) attention runs one CTA per (sequence, head, tile of FLASH_QUERY_TILE queries) and computes the
    key blocks its diagonal crosses in full (`computed_per_query`; the FLOPs are the useful ones, the masked work a
    padding of its compute, `Kernel.work_padding`); a tile's work grows with its position (the last sees every
    key), so the CTAs are unequal and the longest one, started in the last wave, sets a tail: the kernel states the
    longest CTA's share of the work (`Kernel.critical_share`, roofline.parallelism).
    """
    kv_heads = heads if kv_heads is None else kv_heads
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    p = PRECISIONS[dtype]
    kvp = PRECISIONS[kv_dtype or dtype]
    attended = attended_per_query(q_len, kv_len, causal)
    flops = 2 * batch * heads * q_len * attended * (head_dim + v_head_dim)
    if kv_entry_bytes is None:
        kv_entry_bytes = (head_dim if shared_kv else head_dim + v_head_dim) * kvp.bytes_per_element
    cost = Cost.of_flops(PRECISIONS[mma_dtype or dtype].peak, flops,
        kv_bytes=batch * kv_heads * kv_len * kv_entry_bytes,
        activation_bytes=batch * q_len * heads * (head_dim + v_head_dim) * p.bytes_per_element,
        launches=1,
    )
    if not causal:  # split-KV decoding: one CTA per (sequence, KV head, tile of its query rows), split if too few
        groups = batch * kv_heads * sceil(q_len * heads / kv_heads / FLASH_QUERY_TILE)
        return Kernel("attention", cost, split_kv_groups=groups)
    # the last tile of a sequence: its queries are the last min(tile, q_len) positions of kv_len
    last = smin(FLASH_QUERY_TILE, q_len)
    computed = computed_per_query(q_len, kv_len)
    longest = last * computed_per_query(last, kv_len)
    return Kernel("attention", cost, ctas=batch * heads * sceil(q_len / FLASH_QUERY_TILE),
                  critical_share=longest / (batch * heads * q_len * computed), work_padding=computed / attended)


def mla_kv_up_projection(seqs, q_per_seq, context, heads, nope_dim, v_dim, latent_dim, weight: str) -> Kernel:
    """Decompressed (MHA-form) MLA prefill: kv_b_proj up-projects the latent of every position a query attends, the
    `q_per_seq` new ones and the `context` cached ones before them (the engine gathers the cached prefix's latent and
    up-projects it, chunk by chunk), into `heads` keys of `nope_dim` and values of `v_dim` (BF16): one GEMM of
    seqs x (context + q_per_seq) rows, heads x (nope_dim + v_dim) columns, depth `latent_dim`. An FP8 or FP4 weight
    runs with FP8 activations (the latent quantised, as the engine's linear does)."""
    act = "fp8" if weight in ("fp8", "fp4") else weight
    return gemm(seqs * (context + q_per_seq), heads * (nope_dim + v_dim), latent_dim, weight=weight, act=act)


def mla_key_assembly(seqs, q_per_seq, context, heads, nope_dim, rope_dim) -> Kernel:
    """Decompressed MLA prefill: each position's `heads` keys assembled from the up-projected no-RoPE part and the
    one shared RoPE key (SGLang: k = torch.empty_like(q), then k[..., :nope] = k_nope and k[..., nope:] = k_pe;
    vLLM: torch.cat of k_nope and k_pe expanded over the heads): the no-RoPE parts read, the whole BF16 keys
    written, the RoPE key read once a position. One kernel (ASSUMPTION: SGLang's two slice copies taken as one)."""
    positions = seqs * (context + q_per_seq)
    return Kernel("stream", Cost(activation_bytes=positions * (heads * (2 * nope_dim + rope_dim) + rope_dim) * ACT_BYTES,
                                 launches=1))


def visible_positions(context, q_per_seq, prefill: bool):
    """Mean KV positions one query sees: the cached context plus, in prefill, the causal half of the new ones."""
    return context + ((q_per_seq + 1) / 2 if prefill else q_per_seq)


def sparse_attention(tokens, seqs, q_per_seq, context, heads, ratio, topk, window, entry_bytes, qk_dim, v_dim,
                     prefill: bool, mma_dtype: str = "bf16", entries_in_flight_per_cta=128, tokens_per_cta=2) -> Kernel:
    """MegaAttn over a compressed KV cache: each query attends its indexer's `topk` compressed
    entries (None: every compressed entry, or none when `ratio` is 0) plus a sliding `window`.

    `tokens` queries on this rank from `seqs` sequences of `q_per_seq` queries each. Each query
    gathers its own selection; a sequence's window is read once for all its queries; in
    prefill no more than the whole cache is read. Decode runs one or two tokens per CTA (MegaAttn,
    as the November 2026 Rubin post describes it): the chain of an index load, then a KV gather, before each block's MMA.

    The QK and PV products run at the rate of `mma_dtype` (the cache dequantised to it). A decode CTA gathering a
    top-k selection keeps `entries_in_flight_per_cta` scattered entries in flight (its gathered entries per stage x
    the stages it buffers): with few CTAs the gather, not the bytes or the MMA, sets the time, at
    CTAs x entries in flight x entry bytes per HBM latency (the roofline's parallelism term, Little's law).
    """
    seen = visible_positions(context, q_per_seq, prefill)
    win = scap(seen, window) if window else 0
    entries = seen / ratio if ratio else 0
    if ratio and topk:
        selected = scap(entries, topk)
        kv_read = tokens * selected * entry_bytes + seqs * win * entry_bytes
        if prefill:
            kv_read = smin(kv_read, seqs * (context + q_per_seq) * entry_bytes * (1 / ratio + 1))
    else:
        selected = entries
        kv_read = seqs * (entries + win) * entry_bytes
    attended = selected + win
    cost = Cost.of_flops(PRECISIONS[mma_dtype].peak, 2 * tokens * heads * attended * (qk_dim + v_dim),
        kv_bytes=kv_read, activation_bytes=tokens * heads * (qk_dim + v_dim) * ACT_BYTES, launches=1)
    # Decode CTAs: a query gathering its own top-k selection runs one or two tokens per CTA (MegaAttn); a dense
    # pass over a whole cache (no top-k: MLA, full attention) splits the KV over CTAs and fills the GPU
    # (split-KV flash decoding, as FlashMLA), as prefill does.
    dense = bool(ratio) and not topk
    ctas = None if prefill or dense else sceil(tokens / tokens_per_cta)
    # a dense decode pass splits the KV when its (sequence, query tile) groups are too few, then reduces the splits
    groups = seqs * sceil(q_per_seq * heads / FLASH_QUERY_TILE) if dense and not prefill else None
    gather = entries_in_flight_per_cta * entry_bytes if ctas is not None else None
    return Kernel("attention", cost, ctas=ctas, dependent_loads=2 if topk else 1, split_kv_groups=groups,
                  in_flight_bytes_per_cta=gather)


def indexer_logits(tokens, seqs, q_per_seq, context, heads, head_dim, ratio, key_bytes, dtype: str,
                   prefill: bool, epilogue_flops_per_head=0.0) -> Kernel:
    """The indexer's MQA logits: every query scores every compressed entry it can see, over
    `heads` x `head_dim` (FP4 in V4.1), and writes FP32 scores for the top-k that follows.
    Keys are read once per sequence. Each (query, entry, head) product then takes
    `epilogue_flops_per_head` FP32 operations on CUDA cores (ReLU, head weight, sum over heads):
    on Blackwell's FP4 rate more time than the MMA itself."""
    entries = visible_positions(context, q_per_seq, prefill) / ratio
    keys_per_seq = (context + q_per_seq) / ratio
    cost = Cost.of_flops(PRECISIONS[dtype].peak, 2 * tokens * heads * head_dim * entries,
        fp32_flops=epilogue_flops_per_head * tokens * heads * entries,
        kv_bytes=seqs * key_bytes * keys_per_seq, activation_bytes=tokens * LOGIT_BYTES * entries, launches=1)
    return Kernel("attention", cost)


def indexer_select(tokens, q_per_seq, context, ratio, k, prefill: bool) -> Kernel:
    """DeepSelect over the indexer's scores: the top `k` of the compressed entries each query sees."""
    return topk_select(tokens, visible_positions(context, q_per_seq, prefill) / ratio, k)


def topk_select(tokens, candidates, k, passes=1) -> Kernel:
    """DeepSelect: the top `k` of `candidates` FP32 scores per token, read `passes` times, indices written."""
    return Kernel("stream", Cost(activation_bytes=tokens * (LOGIT_BYTES * passes) * candidates + tokens * k * 4,
                                 launches=1))
