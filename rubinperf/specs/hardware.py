"""Hardware spec: one GPU of a system, its memory, links and host, plus measured efficiencies.

Datasheet peaks and achievable fractions are separate fields; every table has a source.
All values are SI: FLOP/s, bytes, bytes/s, seconds, watts, US dollars.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rubinperf.errors import SpecError
from rubinperf.specs.loader import build_spec, read_toml, resolve_path, spec_field


@dataclass(frozen=True)
class Hardware:
    name: str
    description: str
    # [compute] dense datasheet peaks
    fp4_dense_flops_per_s: float = spec_field("compute", "FLOP/s")
    fp8_dense_flops_per_s: float = spec_field("compute", "FLOP/s")
    fp8_fp4_dense_flops_per_s: float = spec_field("compute", "FLOP/s", doc="mixed FP8 activations x FP4 weights")
    bf16_dense_flops_per_s: float = spec_field("compute", "FLOP/s")
    fp32_dense_flops_per_s: float = spec_field("compute", "FLOP/s")
    sm_count: int = spec_field("compute", "SMs", doc="SMs the serving kernels schedule on")
    shared_memory_per_sm_bytes: float = spec_field("compute", "bytes", doc="shared memory one SM's pipeline stages can use")
    preview: bool = spec_field("compute", positive=False, doc="true when NVIDIA has only previewed the figures")
    # [memory] HBM
    hbm_capacity_bytes: float = spec_field("memory", "bytes")
    hbm_bandwidth_bytes_per_s: float = spec_field("memory", "B/s")
    memory_domains: int = spec_field("memory")
    hbm_local_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak when SMs read their own domain")
    hbm_interleaved_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak for interleaved memory")
    hbm_remote_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak across domains")
    hbm_latency_s: float = spec_field("memory", "s", doc="one dependent HBM load (pointer chase), L2 missed")
    # [nvlink] scale-up
    nvlink_bandwidth_bytes_per_s: float = spec_field("nvlink", "B/s", doc="per GPU, one direction")
    nvlink_latency_s: float = spec_field("nvlink", "s", doc="per message")
    nvlink_domain_size: int = spec_field("nvlink", "GPUs")
    gpus_per_tray: int = spec_field("nvlink", "GPUs")
    cross_tray_latency_s: float = spec_field("nvlink", "s", positive=False, doc="extra latency of a cross-tray message")
    # [scale_out] NIC
    scale_out_bandwidth_bytes_per_s: float = spec_field("scale_out", "B/s")
    scale_out_latency_s: float = spec_field("scale_out", "s")
    # [host] CPU memory
    host_memory_capacity_bytes: float = spec_field("host", "bytes", doc="per GPU")
    host_memory_bandwidth_bytes_per_s: float = spec_field("host", "B/s", doc="per GPU")
    c2c_bandwidth_bytes_per_s: float = spec_field("host", "B/s", doc="CPU-GPU link, per GPU")
    # [economics]
    gpu_power_w: float = spec_field("economics", "W")
    price_usd_per_gpu_hour: float = spec_field("economics", "USD/GPU-hour")
    # [kernel] how a real kernel of a shape approaches the roofline (tiles, bytes in flight, fixed costs)
    mma_tile_rows: int = spec_field("kernel", "rows", doc="activation rows of one MMA tile: rows are padded to a multiple")
    mma_tile_cols: int = spec_field("kernel", "columns", doc="weight columns (output) of one CTA's tile")
    split_k_max: int = spec_field("kernel", doc="most K splits a GEMM with too few tiles uses to fill the SMs (1: none)")
    split_k_min_depth: int = spec_field("kernel", "elements", doc="fewest K elements one split keeps")
    wave_quantization: float = spec_field("kernel", positive=False, at_most=1.0, doc="share of the last wave's idle SMs a GEMM pays for (1: whole waves; 0: a persistent or stream-K schedule balances them)")
    mma_bytes_in_flight_per_sm: float = spec_field("kernel", "bytes", doc="weight bytes one SM of a GEMM keeps in flight (stages x stage bytes)")
    stream_bytes_in_flight_per_sm: float = spec_field("kernel", "bytes", doc="most bytes one SM keeps in flight with ordinary loads (streaming, gathers)")
    kernel_launch_eager_s: float = spec_field("kernel", "s", doc="launch of a lone kernel from the host, to its first instruction")
    kernel_launch_graph_s: float = spec_field("kernel", "s", doc="a kernel boundary inside a CUDA graph replay")
    mma_prologue_s: float = spec_field("kernel", "s", positive=False, doc="set-up and drain of a tensor-core kernel (barriers, descriptors, epilogue), beyond its first HBM round trip")
    pdl_hidden_fraction: float = spec_field("kernel", positive=False, at_most=1.0, doc="share of a graph kernel's fill hidden under the previous kernel (programmatic dependent launch)")
    fused_overlap_rows: float = spec_field("kernel", "rows", doc="rows at which half of a fused kernel's smaller terms hide under the largest")
    # [efficiency] achievable fractions and floors (measured or assumed)
    mma_compute_efficiency: float = spec_field("efficiency", at_most=1.0, doc="tensor-core rate a large GEMM reaches")
    grouped_compute_efficiency: float = spec_field("efficiency", at_most=1.0, doc="tensor-core rate of a grouped (MoE) GEMM kernel")
    grouped_hbm_efficiency: float = spec_field("efficiency", at_most=1.0, doc="HBM rate a grouped (MoE) GEMM kernel streams expert weights at")
    attention_compute_efficiency: float = spec_field("efficiency", at_most=1.0, doc="tensor-core rate of attention and indexer logits")
    vector_compute_efficiency: float = spec_field("efficiency", at_most=1.0, doc="CUDA-core rate of norms, mixing, selection")
    hbm_stream_efficiency: float = spec_field("efficiency", at_most=1.0, doc="HBM rate a kernel with enough bytes in flight reaches")
    nvlink_efficiency: float = spec_field("efficiency", at_most=1.0)
    scale_out_efficiency: float = spec_field("efficiency", at_most=1.0)
    host_efficiency: float = spec_field("efficiency", at_most=1.0)
    collective_floor_s: float = spec_field("efficiency", "s", doc="fixed cost of one collective (sync, setup)")
    step_overhead_s: float = spec_field("efficiency", "s", positive=False, doc="CPU/scheduling cost of one engine step")
    dp_sync_per_rank_s: float = spec_field("efficiency", "s", positive=False, doc="DP synchronisation, added per rank of a data-parallel group")
    sources: dict = dataclasses.field(default_factory=dict, compare=False)
    path: str = dataclasses.field(default="", compare=False)

    def validate(self) -> None:
        if self.memory_domains > 1 and not (
            self.hbm_remote_bandwidth_factor <= self.hbm_interleaved_bandwidth_factor <= self.hbm_local_bandwidth_factor
        ):
            raise SpecError(f"{self.path}: memory: expected remote <= interleaved <= local bandwidth factor")
        if self.kernel_launch_graph_s > self.kernel_launch_eager_s:
            raise SpecError(f"{self.path}: kernel.kernel_launch_graph_s: expected at most kernel_launch_eager_s "
                            f"({self.kernel_launch_eager_s:g} s): a kernel in a graph is never slower to start than alone")
        for key in ("mma_bytes_in_flight_per_sm", "stream_bytes_in_flight_per_sm"):
            if getattr(self, key) > self.shared_memory_per_sm_bytes * 2:
                raise SpecError(f"{self.path}: kernel.{key}: expected at most twice shared_memory_per_sm_bytes "
                                f"({self.shared_memory_per_sm_bytes:g}): an SM cannot keep more bytes in flight")
        if self.gpus_per_tray > self.nvlink_domain_size:
            raise SpecError(f"{self.path}: nvlink.gpus_per_tray: expected at most nvlink_domain_size ({self.nvlink_domain_size})")

    def peak_flops(self, precision: str):
        return getattr(self, f"{precision}_dense_flops_per_s")



def load_hardware(name_or_path: str) -> Hardware:
    """Load a bundled hardware spec by name, or a user's TOML file by path."""
    path = resolve_path(name_or_path, "hardware")
    return build_spec(Hardware, read_toml(path), path)
