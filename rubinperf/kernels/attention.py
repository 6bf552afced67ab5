"""Attention kernels: generic flash-style attention, the step's sparse MQA attention, the indexer's logits.

Flash-style I/O: Q read once, O written once, K/V read once per KV head.
"""

from __future__ import annotations

from rubinperf.kernels.cost import Cost, Kernel
from rubinperf.kernels.gemm import gemm
from rubinperf.mathops import sadd, scap, sceil, sfloor, smax, smin, sscale, sstep
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


def _zero(x) -> bool:
    return isinstance(x, (int, float)) and x == 0


def visible_positions(context, q_per_seq, prefill: bool):
    """Mean KV positions one query sees: the cached context plus, in prefill, the causal half of the new ones."""
    return context + ((q_per_seq + 1) / 2 if prefill else q_per_seq)


# FlashMLA's SM90 sparse FP8 decode (github.com/deepseek-ai/FlashMLA @ 9241ae3ef9bac614dd25e45e507e089f888280e0), a
# persistent split-KV kernel: csrc/sm90/decode/sparse_fp8/config.h (BLOCK_M = 64 heads a CTA, TOPK_BLOCK_SIZE = 64
# entries a block, NUM_K_BUFS = 2), csrc/api/sparse_decode.h (Decode_Sm90_Impl::get_meta: num_sm_parts =
# max(num_sms / s_q / (h_q / 64), 1), fixed_overhead_num_blocks = 5, block_size_topk = 64),
# csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu (the schedule) and splitkv_mla.cuh (the grid:
# dim3(h_q / 64, s_q, num_sm_parts)).
FLASHMLA_HEADS_PER_CTA = 64
FLASHMLA_TOPK_BLOCK = 64
FLASHMLA_FIXED_OVERHEAD_BLOCKS = 5


def _whole(x):
    """A plain number that is whole as an int (exact fractions in the symbolic form), anything else as it is."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


def _blocks(x, size):
    """ceil(x / size): a whole number where x is a plain number (so that the schedule's symbolic form keeps exact
    fractions, whose floors sympy can decide), else sceil."""
    return -(-int(x) // size) if isinstance(x, (int, float)) and float(x).is_integer() else sceil(x / size)


def flashmla_sm90_schedule(seqs, q_per_seq, heads, topk, window, sms):
    """(CTAs, the most 64-entry blocks one CTA runs, the most CTAs one request spreads over, 1 where some request is
    split else 0) of FlashMLA's SM90 sparse decode (constants above).

    A request (one sequence, at one of its q_per_seq query positions) has n = ceil(window / 64) + ceil(topk / 64)
    blocks: its window (the `k_cache`, padded to whole blocks) then its top-k (the `extra_k_cache`). The grid is
    heads / 64 x q_per_seq x num_sm_parts CTAs, num_sm_parts = max(sms // q_per_seq // (heads / 64), 1); every CTA of a
    query position takes the next `payload` = ceil(seqs x (n + 5) / num_sm_parts) + 5 units of the requests in order,
    a request costing its blocks + 5 (the scheduler's fixed overhead); a request that does not fit whole is split, its
    first blocks here, the rest in the next CTA (whose partial outputs the combine kernel merges). The first CTA runs
    the most blocks: floor(payload / (n + 5)) whole requests plus the rest of the payload less 5, at most all
    seqs x n blocks (exact against the scheduler's loop for 1-300 sequences, 1-8 positions and top-k 128-2048 with and
    without a window)."""
    seqs, q_per_seq, sms = _whole(seqs), _whole(q_per_seq), _whole(sms)
    groups = _blocks(heads, FLASHMLA_HEADS_PER_CTA)
    parts = smax(sfloor(sms / (q_per_seq * groups)), 1)   # (floor(floor(a / b) / c) = floor(a / (b c)) for whole numbers)
    n = _blocks(window, FLASHMLA_TOPK_BLOCK) + _blocks(topk, FLASHMLA_TOPK_BLOCK)
    unit = n + FLASHMLA_FIXED_OVERHEAD_BLOCKS
    payload = sceil(seqs * unit / parts) + FLASHMLA_FIXED_OVERHEAD_BLOCKS
    whole = sfloor(payload / unit)
    rest = smax(payload - whole * unit - FLASHMLA_FIXED_OVERHEAD_BLOCKS, 0)   # blocks of a request a CTA ends on
    longest = smin(seqs * n, whole * n + rest)
    # the most CTAs one request spreads over: where a CTA holds less than a request, its n blocks over CTAs of
    # payload - 5 blocks each, plus the CTA it starts in; else 2 where a CTA ends inside a request (rest > 0), 1 where
    # none does (at most one more than the loop gives: the test against it)
    per_cta = smax(payload - FLASHMLA_FIXED_OVERHEAD_BLOCKS, 1)
    within = sstep(rest, (0,), (0, 1)) * sstep(seqs * n - longest, (0,), (0, 1))   # 1 where a CTA ends inside one
    longer = sstep(n - per_cta, (0,), (0, 1))                                       # 1 where a request outgrows a CTA
    splits = smin(longer * (sceil(n / per_cta) + 1) + (1 - longer) * (1 + within), parts)
    return groups * q_per_seq * parts, longest, splits, smax(longer, within)


def sparse_attention(tokens, seqs, q_per_seq, context, heads, ratio, topk, window, entry_bytes, qk_dim, v_dim,
                     prefill: bool, mma_dtype: str = "bf16", entries_in_flight_per_cta=128, tokens_per_cta=2,
                     dequant_flops_per_value=0.0, quantised_values_per_entry=None, persistent_sms=None,
                     block_cycles=None) -> Kernel:
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

    A cache stored quantised is dequantised to the MMA's format on CUDA cores: `dequant_flops_per_value` FP32 FLOP
    equivalents for each of an entry's `quantised_values_per_entry` values (None: `v_dim`, the latent's quantised
    part), once per query token and attended entry (the CTAs of one token's heads share it: FlashMLA's SM90 sparse
    FP8 decode, docs/20250929-hopper-fp8-sparse-deep-dive.md @ 9241ae3, 'crossover'), in a top-k decode kernel only;
    it adds to the MMAs' time.

    `persistent_sms` (a top-k decode kernel only): the kernel is FlashMLA's SM90 persistent split-KV decode over that
    many SMs (flashmla_sm90_schedule), not one or two tokens per CTA: its CTAs each run their share of the requests'
    64-entry blocks one after another, `block_cycles` SM cycles a block (gather, dequantise, two BF16 WGMMAs and the
    softmax of one block of 64 heads x 64 entries; Kernel.serial_steps, roofline.serial_chain), the CTA with the most
    blocks setting the time, then the CTAs' last output tiles stored together and waited for (Kernel.tail_store_bytes);
    and its combine kernel always follows (split_kv_groups 1: roofline.launch_latency), loading a request's splits one
    after another (Kernel.reduce_loads). FlashMLA takes 64 or 128 heads (an 8-head call was refused on the H100): fewer
    (a TP rank's share) run padded to 64 (ASSUMPTION: the engine pads), the same chain; more (a 2-CTA cluster sharing
    each block) keep the form above.
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
    values = v_dim if quantised_values_per_entry is None else quantised_values_per_entry
    # the sparse decode kernel dequantises each query's gathered entries (a dense or prefill pass: per KV block, no term)
    dequant = dequant_flops_per_value * tokens * attended * values \
        if topk and ratio and not prefill and not _zero(dequant_flops_per_value) else 0.0
    cost = Cost.of_flops(PRECISIONS[mma_dtype].peak, 2 * tokens * heads * attended * (qk_dim + v_dim),
        fp32_flops=dequant,
        kv_bytes=kv_read, activation_bytes=tokens * heads * (qk_dim + v_dim) * ACT_BYTES, launches=1)
    # Decode CTAs: a query gathering its own top-k selection runs one or two tokens per CTA (MegaAttn); a dense
    # pass over a whole cache (no top-k: MLA, full attention) splits the KV over CTAs and fills the GPU
    # (split-KV flash decoding, as FlashMLA), as prefill does.
    dense = bool(ratio) and not topk
    ctas = None if prefill or dense else sceil(tokens / tokens_per_cta)
    # a dense decode pass splits the KV when its (sequence, query tile) groups are too few, then reduces the splits
    groups = seqs * sceil(q_per_seq * heads / FLASH_QUERY_TILE) if dense and not prefill else None
    gather = entries_in_flight_per_cta * entry_bytes if ctas is not None else None
    if persistent_sms is not None and ctas is not None and topk and heads <= FLASHMLA_HEADS_PER_CTA:
        # (more heads: a cluster of CTAs shares each block's gather and dequantisation, a chain not measured here)
        ctas, longest, splits, split = flashmla_sm90_schedule(seqs, q_per_seq, heads, topk, window, persistent_sms)
        # each CTA ends by storing its last request's output tile, 64 heads x v_dim, and waits for it (splitkv_mla.cuh
        # @ 9241ae3, store_o then cute::tma_store_wait<0>, lines 335-360): FP32 partial outputs where requests split
        # (o_accum), BF16 outputs where none does; the CTAs (at most one per SM) finish together.
        # The combine (csrc/smxx/decode/combine/combine.cu @ 9241ae3, lines 36-37, 68, 78 and 130-145) loads a
        # request's split count, the splits' LSEs, the first partial output, then each further split's, one after another
        tail = smin(ctas, persistent_sms) * FLASHMLA_HEADS_PER_CTA * v_dim * (ACT_BYTES + split * (4 - ACT_BYTES))
        return Kernel("attention", cost, ctas=ctas, dependent_loads=2, split_kv_groups=1,
                      in_flight_bytes_per_cta=entries_in_flight_per_cta * entry_bytes, serial_steps=longest,
                      step_cycles=block_cycles, reduce_loads=2 + splits, tail_store_bytes=tail)
    return Kernel("attention", cost, ctas=ctas, dependent_loads=2 if topk else 1, split_kv_groups=groups,
                  in_flight_bytes_per_cta=gather)


# The lightning indexer's MQA logits as DeepGEMM runs them (github.com/deepseek-ai/DeepGEMM @ 54e2261,
# csrc/apis/attention.hpp fp8_fp4_mqa_logits and fp8_fp4_paged_mqa_logits, csrc/jit_kernels/impls/sm100_mqa_logits.hpp,
# deep_gemm/include/deep_gemm/scheduler/sm100_mqa_logits.cuh and sm100_paged_mqa_logits.cuh):
MQA_LOGITS_QUERY_HEAD_ROWS = 128   # block_qh = 128: a query block holds 128 / heads tokens ("keeps UMMA_N = 128")
MQA_LOGITS_SPLIT_KV = 256          # block_kv / split_kv = 256 keys per pipeline stage (2 math warpgroups x UMMA_M 128)
MQA_LOGITS_KV_STAGES = {"fp4": 10, "fp8": 5}   # num_kv_stages: "FP4 10 stages, FP8 5"


def indexer_logits(tokens, seqs, q_per_seq, context, heads, head_dim, ratio, key_bytes, dtype: str,
                   prefill: bool, epilogue_flops_per_head=0.0) -> Kernel:
    """The indexer's MQA logits (DeepGEMM's kernels, constants above): every query scores every compressed entry it
    can see, over `heads` x `head_dim` (FP4 in V4.1), and writes scores for the top-k that follows.

    Query blocks of 128 / `heads` tokens (one UMMA of N = 128 query-head rows); each block walks its own key range
    in splits of 256 keys, and its MMAs and epilogue run over every key it walks (the causal mask
    applies only when the scores are written; the MMA FLOPs counted are its valid tokens' rows). Prefill (non-paged): a persistent grid of one CTA per SM takes the
    blocks round-robin (`current_q_block_idx += kNumSMs`), so with fewer blocks than SMs the other SMs stay idle; a
    block's keys run to its last token's end, on average the entries its tokens see plus half a block. Decode
    (paged): a request's next-n tokens make ceil(next_n / block) blocks, each over the request's whole context, and
    the metadata kernel spreads the (block, split) work over every SM.

    Every block re-reads its keys: from HBM once per sequence (a request's blocks walk one chunk of splits after
    another, and consecutive SMs take neighbouring blocks of one sequence), and from L2 the other times
    (`Cost.l2_bytes`): blocks x keys per block x key bytes, which grows as new tokens x context.

    Each (query, entry, head) product then takes `epilogue_flops_per_head` FP32 operations on CUDA cores (ReLU,
    head weight, sum over heads): on Blackwell's FP4 rate more time than the MMA itself."""
    block_q = smax(MQA_LOGITS_QUERY_HEAD_ROWS / smax(heads, 1), 1)   # (no heads on this rank: no work, one-token blocks)
    blocks_per_seq = sceil(q_per_seq / block_q)
    entries = visible_positions(context, q_per_seq, prefill) / ratio   # what each query's scores cover
    keys_per_seq = (context + q_per_seq) / ratio
    # keys one block walks: prefill, its last token's visible entries (half a block past the mean query's); decode,
    # the request's whole context (the walk's last split rounds up to 256 keys: at most 255 more a block, left out)
    walked = (visible_positions(context, q_per_seq, True) + block_q / 2) / ratio if prefill else keys_per_seq
    blocks = seqs * blocks_per_seq
    # (a column times a row's bytes: one pass over the grid; whole numbers, exact in any order)
    reads = blocks * (walked * key_bytes)
    once = seqs * (keys_per_seq * key_bytes)   # never more than the reads: each block walks at least its last keys
    cost = Cost.of_flops(PRECISIONS[dtype].peak, 2 * tokens * heads * head_dim * walked,
        fp32_flops=epilogue_flops_per_head * tokens * heads * walked,
        kv_bytes=once, l2_bytes=reads - once, activation_bytes=tokens * LOGIT_BYTES * entries, launches=1)
    in_flight = MQA_LOGITS_KV_STAGES.get(dtype, MQA_LOGITS_KV_STAGES["fp8"]) * MQA_LOGITS_SPLIT_KV * key_bytes
    return Kernel("attention", cost, ctas=blocks if prefill else None, in_flight_bytes_per_cta=in_flight)


# The indexer's top-k as vLLM runs it (github.com/vllm-project/vllm @ 00e831b25f769201663e96756402564e9acea7ba,
# csrc/sampler.cu: topKPerRowJob / processHistogramStep, top_k_per_row_prefill / _decode): one CTA of 512 threads per
# query row; a radix select in steps (the FP16 form's top 11 bits, then 11, 11, 10 bits of the FP32 score), each step
# one pass that builds a histogram of the row and a second that collects the scores above the threshold bin; the
# select stops once the threshold bin holds at most kNumFinalItems = 2048 scores, which it sorts in shared memory.
# Prefill launches the rows past kSortingAlgorithmThreshold (12,288) as a second kernel (radix sort of the final
# items); decode splits a row of kSplitWorkThreshold (200,000) scores or more over 10 CTAs, then merges their top-k in
# a second kernel (10 x top-k scores and indices per row).
TOPK_READS_PER_STEP = 2
TOPK_PREFILL_ROWS_PER_LAUNCH = 12288
TOPK_SPLIT_SCORES = 200000
TOPK_SPLIT_BLOCKS = 10


def indexer_select(tokens, q_per_seq, context, ratio, k, prefill: bool, steps=1) -> Kernel:
    """DeepSelect over the indexer's scores: the top `k` of the compressed entries each query sees, as vLLM's top-k
    per row runs it (constants above). Each of its `steps` radix steps reads the row twice: the first read from HBM,
    the second from L2 (the same CTA read the row just before: Cost.l2_bytes). `steps`: 1 where the first step's
    threshold bin holds at most 2048 scores (ASSUMPTION: it depends on how the scores spread, range 1-4)."""
    candidates = visible_positions(context, q_per_seq, prefill) / ratio
    row = tokens * LOGIT_BYTES * candidates
    reads = TOPK_READS_PER_STEP * steps
    out = tokens * k * 4
    if prefill:
        launches = sstep(tokens, (TOPK_PREFILL_ROWS_PER_LAUNCH,), (1, 2))
        return Kernel("stream", Cost(activation_bytes=row + out, l2_bytes=sscale(row, reads - 1), launches=launches),
                      ctas=tokens)
    split = sstep(candidates, (TOPK_SPLIT_SCORES - 1,), (0, 1))   # 1 where a row is split over 10 CTAs and merged
    # the partial top-k (scores + indices) out and back in (whole numbers: exact in any order; the batch's factor made
    # before the context's split meets it)
    # (no split anywhere: no merge term to add, as sadd leaves out a plain 0)
    merge = 0.0 if _zero(split) else split * (tokens * (TOPK_SPLIT_BLOCKS * k * 8 * 2))
    return Kernel("stream", Cost(activation_bytes=sadd(row + out, merge), l2_bytes=sscale(row, reads - 1),
                                 launches=1 + split),
                  ctas=tokens * (1 + split * (TOPK_SPLIT_BLOCKS - 1)))


def topk_select(tokens, candidates, k, passes=1) -> Kernel:
    """DeepSelect: the top `k` of `candidates` FP32 scores per token, read `passes` times, indices written."""
    return Kernel("stream", Cost(activation_bytes=tokens * (LOGIT_BYTES * passes) * candidates + tokens * k * 4,
                                 launches=1))
