"""Streaming kernels: device copy, elementwise passes (norms, mixing), mHC, table look-ups, KV inserts."""

from __future__ import annotations

import dataclasses

from rubinperf.kernels.cost import Cost, Kernel, kept_kernels
from rubinperf.mathops import sceil
from rubinperf.specs.precision import PRECISIONS


def copy(nbytes) -> Kernel:
    """Device-to-device copy of `nbytes`: read once, write once."""
    return Kernel("stream", Cost(activation_bytes=2 * nbytes, launches=1))


def empty(launches=1, drain_loads=1) -> Kernel:
    """Kernels that do no work: `launches` launches, each its start and fill only (an empty-kernel probe, a
    library's extra kernels behind the one a measured call times); `drain_loads` 0 for one that writes nothing."""
    return Kernel("stream", Cost(launches=launches), dependent_loads=0, drain_loads=drain_loads)


def stream_probe(nbytes, ctas, in_flight_bytes_per_cta) -> Kernel:
    """A read-only probe over `nbytes`: `ctas` CTAs, each keeping `in_flight_bytes_per_cta` in flight."""
    return Kernel("stream", Cost(activation_bytes=nbytes, launches=1), ctas=ctas,
                  in_flight_bytes_per_cta=in_flight_bytes_per_cta)


@kept_kernels
def elementwise(read_bytes, write_bytes, flops=0, weight_bytes=0, peak: str = "fp32", ctas=None) -> Kernel:
    """A streaming pass (RMSNorm, mHC mixing, SwiGLU, a sampler): bytes in and out, a few FLOPs per element.

    `ctas`: the CTAs a row-wise kernel launches (a norm runs one row per CTA); None: enough to fill the GPU."""
    return Kernel("stream", Cost.of_flops(peak, flops,
        activation_bytes=read_bytes + write_bytes, weight_bytes=weight_bytes, launches=1), ctas=ctas)


@kept_kernels
def activation_quant(rows, k, fmt: str, act_bytes=2) -> Kernel:
    """Quantisation of a GEMM's activations before it, as a kernel of its own: `rows` x `k` BF16 values read once,
    written once in `fmt` (its values and block scales: specs.precision's bytes per element), each scale block
    reduced in registers (one pass)."""
    return elementwise(read_bytes=rows * k * act_bytes, write_bytes=rows * k * PRECISIONS[fmt].bytes_per_element)


def mhc(tokens, routes, hidden, mix_rows, residual_bytes) -> Kernel:
    """Mega-mHC for one sublayer: read and write every residual route, mix (`mix_rows` x routes x
    hidden FP32 weights), RMSNorm. Its work (tokens and slices of the routes) spreads over every SM."""
    per_token = routes * hidden * residual_bytes
    mix = mix_rows * routes * hidden
    return elementwise(read_bytes=tokens * per_token, write_bytes=tokens * per_token,
                       flops=2 * tokens * mix + 4 * tokens * hidden, weight_bytes=mix * 4)


# DeepGEMM's TF32 pre-norm GEMM of HyperConnection (github.com/deepseek-ai/DeepGEMM @ 54e2261,
# csrc/jit_kernels/impls/sm100_tf32_hc_prenorm_gemm.hpp and sm90_tf32_hc_prenorm_gemm.hpp, tests/test_hyperconnection.py):
# A is the BF16 routes [m, routes x hidden], B the FP32 mixing weight [n, routes x hidden]; one CTA per
# (block of 64 tokens, K split): LaunchArgs(num_splits x ceil(m / 64)); block_n = align(n, 16) (the whole mixing width
# in one UMMA), block_k 64; each split writes its FP32 partial outputs and sums of squares, which the big-fuse sums.
HC_PRENORM_BLOCK_M = 64
HC_PRENORM_BLOCK_K = 64   # block_k = 64 (sm90_tf32_hc_prenorm_gemm.hpp; the SM100 one alike): the K values of one step
HC_PRENORM_N_ALIGN = 16
# num_stages: 12, fewer where they do not fit the shared memory (the SM90 and SM100 hosts alike: stages of a 64 x 64
# BF16 A tile and an align(n, 16) x 64 FP32 B tile; 12 of 16 KB at mHC's n = 24): a CTA's TMA loads in flight
HC_PRENORM_MAX_STAGES = 12
HC_PRENORM_SMEM_BYTES = 232448   # SM90ArchSpec / SM100ArchSpec::smem_capacity
# The K splits SGLang's TileLang mHC asks for: ASSUMED 16 (the split count DeepGEMM's own test times, and the
# big-fuse's default n_splits in public ports of those kernels), range 1-32.
HC_PRENORM_SPLITS = 16


def hc_prenorm_gemm(tokens, k, mix_rows, a_bytes=2, splits=HC_PRENORM_SPLITS) -> Kernel:
    """DeepGEMM's TF32 pre-norm GEMM (constants above): `tokens` x `k` routes (`a_bytes` per value: BF16, the type its
    interface takes) times the [mix_rows, k] FP32 weight on the tensor cores at the TF32 rate, over whole 64-token blocks
    and mix_rows aligned to 16; its cast-and-reduce threads square and sum each token's k values on CUDA cores (an
    FMA per value); `splits` partial outputs and sums of squares written. CTAs: splits x blocks of 64 tokens (a
    decode batch leaves most SMs idle). Each CTA runs its k / splits / 64 K blocks as one chain (`serial_steps`: on
    SM90 one math warpgroup loads, squares and feeds each block to its WGMMAs after waiting for the last block's;
    the stack's hc_prenorm_step_cycles prices a step)."""
    blocks = sceil(tokens / HC_PRENORM_BLOCK_M)
    n_pad = sceil(mix_rows / HC_PRENORM_N_ALIGN) * HC_PRENORM_N_ALIGN
    cost = Cost.of_flops("tf32", 2 * blocks * HC_PRENORM_BLOCK_M * n_pad * k, fp32_flops=2 * tokens * k,
                         activation_bytes=tokens * k * a_bytes + splits * tokens * (mix_rows + 1) * 4,
                         weight_bytes=mix_rows * k * 4, launches=1)
    stage = HC_PRENORM_BLOCK_M * HC_PRENORM_BLOCK_K * a_bytes + n_pad * HC_PRENORM_BLOCK_K * 4
    stages = min(HC_PRENORM_MAX_STAGES, (HC_PRENORM_SMEM_BYTES - HC_PRENORM_BLOCK_M * 128) // stage) \
        if type(n_pad) in (int, float) else HC_PRENORM_MAX_STAGES
    return Kernel("gemm", cost, ctas=splits * blocks, serial_steps=k / splits / HC_PRENORM_BLOCK_K,
                  in_flight_bytes_per_cta=stages * stage)


@kept_kernels
def mhc_split(tokens, routes, hidden, mix_rows, residual_bytes, act_bytes=2) -> tuple[Kernel, ...]:
    """One mHC sublayer boundary as SGLang's TileLang kernels run it (python/sglang/srt/layers/mhc.py, sgl-project/sglang),
    four launches instead of one Mega-mHC:

    - post: the new residual routes from the sublayer's output (comb x routes + post x output), one CTA per token;
    - pre GEMM + sum of squares: DeepGEMM's tf32_hc_prenorm_gemm (`hc_prenorm_gemm`: TF32 MMAs, split-K into
      HC_PRENORM_SPLITS partials);
    - pre big-fuse: sums the splits' partials, RMS scale, sigmoid gates, the Sinkhorn iterations on the routes x routes
      matrix (a serial loop inside this one kernel) and the route collapse into the layer input, one CTA per token;
    - RMSNorm of the layer input (a separate element-wise op in aiconfigurator 0.12.0's DeepSeek-V4 model,
      sdk/models/deepseek_v4.py: generation_attn_norm / generation_ffn_norm beside mhc_pre / mhc_post).

    The routes are read three times (post, GEMM, big-fuse) where Mega-mHC reads them once."""
    per_token = routes * hidden * residual_bytes
    row = hidden * act_bytes
    post = elementwise(read_bytes=tokens * (per_token + row), write_bytes=tokens * per_token,
                       flops=2 * tokens * routes * (routes + 1) * hidden, ctas=tokens)
    gemm = hc_prenorm_gemm(tokens, routes * hidden, mix_rows, a_bytes=residual_bytes)
    partials = HC_PRENORM_SPLITS * tokens * (mix_rows + 1) * 4
    fuse = elementwise(read_bytes=tokens * per_token + partials, write_bytes=tokens * row,
                       flops=2 * tokens * routes * hidden, ctas=tokens)
    norm = elementwise(read_bytes=tokens * row, write_bytes=tokens * row, flops=4 * tokens * hidden, ctas=tokens)
    return post, gemm, fuse, norm


def in_epilogue(kern: Kernel) -> Kernel:
    """`kern`'s work done in the epilogue of the GEMM before it (no launch, no fill of its own): its bytes and
    FLOPs stay, timed beside that GEMM's."""
    return dataclasses.replace(kern, cost=dataclasses.replace(kern.cost, launches=0), dependent_loads=0)


def rope(tokens, heads, rope_dim, act_bytes=2) -> Kernel:
    """Rotary embedding of the queries' `rope_dim` columns per head, as its own pass (read and write them)."""
    nbytes = tokens * heads * rope_dim * act_bytes
    return elementwise(read_bytes=nbytes, write_bytes=nbytes, flops=3 * tokens * heads * rope_dim)


def kv_insert_kernel(tokens, entry_bytes, ratio=1, index_key_bytes=0, read_bytes_per_token=0) -> Kernel:
    """The KV-cache insert as its own kernel: reads the projection's output (`read_bytes_per_token` per new token,
    the key's RoPE applied on the way) and writes the entries `kv_insert` counts."""
    return Kernel("stream", kv_insert(tokens, entry_bytes, ratio, index_key_bytes)
                  + Cost(activation_bytes=tokens * read_bytes_per_token, launches=1))


def table_lookup(lookups, row_bytes, where: str = "hbm", local_fraction=1, nic_fraction=0) -> Kernel:
    """Gather `lookups` rows of `row_bytes` from a table in HBM, host memory or peers' HBM.

    `where="hbm"` with `local_fraction` < 1: the table is split over ranks, and the other rows
    come from peers' HBM over NVLink (one round trip); a share `nic_fraction` of all rows lives in
    other NVLink domains and comes over the scale-out NIC instead (one RDMA round trip)."""
    nbytes = lookups * row_bytes
    if where == "host":
        return Kernel("lookup", Cost(host_bytes=nbytes, launches=1))
    if where == "peer-hbm":
        return Kernel("lookup", Cost(nvlink_bytes=nbytes, nvlink_hops=1, launches=1))
    remote = 1 - local_fraction - nic_fraction
    cost = Cost(table_bytes=nbytes * local_fraction, launches=1)
    if not (isinstance(remote, (int, float)) and remote == 0):
        cost = cost + Cost(nvlink_bytes=nbytes * remote, nvlink_hops=1)
    if not (isinstance(nic_fraction, (int, float)) and nic_fraction == 0):
        cost = cost + Cost(scale_out_bytes=nbytes * nic_fraction, scale_out_hops=1)
    return Kernel("lookup", cost)


def kv_insert(tokens, entry_bytes, ratio=1, index_key_bytes=0) -> Cost:
    """KV-cache entries (and index keys) written for `tokens` new tokens, one entry per `ratio` tokens of a
    compressed layer (0: uncompressed), fused into the projection that makes them."""
    return Cost(kv_bytes=tokens * (entry_bytes + index_key_bytes) / (ratio or 1))


def host_step() -> Kernel:
    """The host's scheduling work for one engine step (the scheduler's step, input preparation, sampling)."""
    return Kernel("host", Cost(steps=1), dependent_loads=0)


def dp_sync(dp_ranks) -> Kernel:
    """The DP synchronisation of one engine step over `dp_ranks` ranks: a host collective every rank waits for."""
    return Kernel("host", Cost(dp_sync_ranks=dp_ranks), dependent_loads=0)


def kv_transfer(nbytes, link: str = "nvlink") -> Kernel:
    """A prefilled KV cache of `nbytes` (per GPU) sent to another engine over `link` (nvlink or scale-out):
    link bytes and one message's latency, moved by copy engines (no kernel launch)."""
    if link == "nvlink":
        return Kernel("stream", Cost(nvlink_bytes=nbytes, nvlink_hops=1), dependent_loads=0)
    if link == "scale-out":
        return Kernel("stream", Cost(scale_out_bytes=nbytes, scale_out_hops=1), dependent_loads=0)
    raise ValueError(f"kv_transfer: link {link!r}: expected nvlink or scale-out")


def kv_load(nbytes, pool: str = "host") -> Kernel:
    """Cached prefix KV of `nbytes` (per GPU) loaded from a shared pool by copy engines (no kernel launch):
    host memory over C2C, peers' HBM over NVLink (streamed: no per-message latency), or local HBM."""
    if pool == "host":
        return Kernel("stream", Cost(host_bytes=nbytes), dependent_loads=0)
    if pool == "peer-hbm":
        return Kernel("stream", Cost(nvlink_bytes=nbytes), dependent_loads=0)
    if pool == "hbm":
        return Kernel("stream", Cost(kv_bytes=nbytes), dependent_loads=0)
    raise ValueError(f"kv_load: pool {pool!r}: expected host, peer-hbm or hbm")
