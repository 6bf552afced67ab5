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
    sm_count: int = spec_field("compute")
    preview: bool = spec_field("compute", positive=False, doc="true when NVIDIA has only previewed the figures")
    # [memory] HBM
    hbm_capacity_bytes: float = spec_field("memory", "bytes")
    hbm_bandwidth_bytes_per_s: float = spec_field("memory", "B/s")
    memory_domains: int = spec_field("memory")
    hbm_local_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak when SMs read their own domain")
    hbm_interleaved_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak for interleaved memory")
    hbm_remote_bandwidth_factor: float = spec_field("memory", at_most=1.0, doc="fraction of peak across domains")
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
    # [efficiency] achievable fractions and floors (measured or assumed)
    fp4_compute_efficiency: float = spec_field("efficiency", at_most=1.0)
    fp8_compute_efficiency: float = spec_field("efficiency", at_most=1.0)
    fp8_fp4_compute_efficiency: float = spec_field("efficiency", at_most=1.0)
    bf16_compute_efficiency: float = spec_field("efficiency", at_most=1.0)
    fp32_compute_efficiency: float = spec_field("efficiency", at_most=1.0)
    hbm_efficiency: float = spec_field("efficiency", at_most=1.0)
    nvlink_efficiency: float = spec_field("efficiency", at_most=1.0)
    scale_out_efficiency: float = spec_field("efficiency", at_most=1.0)
    host_efficiency: float = spec_field("efficiency", at_most=1.0)
    kernel_launch_floor_s: float = spec_field("efficiency", "s", doc="fixed cost of one kernel: launch, ramp, tail")
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
        if self.gpus_per_tray > self.nvlink_domain_size:
            raise SpecError(f"{self.path}: nvlink.gpus_per_tray: expected at most nvlink_domain_size ({self.nvlink_domain_size})")

    def peak_flops(self, precision: str):
        return getattr(self, f"{precision}_dense_flops_per_s")

    def compute_efficiency(self, precision: str):
        return getattr(self, f"{precision}_compute_efficiency")


def load_hardware(name_or_path: str) -> Hardware:
    """Load a bundled hardware spec by name, or a user's TOML file by path."""
    path = resolve_path(name_or_path, "hardware")
    return build_spec(Hardware, read_toml(path), path)
