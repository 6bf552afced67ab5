"""Hardware spec: one GPU of a system, its memory, links and host: silicon only.

Software facts (kernel tiles, pipelines, tuned-kernel efficiencies, CPU step costs, EPLB) are
the stack's (rubinperf/specs/stack.py); the file names its default stack (`default_stack`).

Datasheet peaks and achievable fractions are separate fields; every table has a source.
All values are SI: FLOP/s, bytes, bytes/s, seconds, watts, US dollars.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rubinperf.errors import SpecError
from rubinperf.specs.loader import load_spec_file, resolve_path, spec_field_of
from rubinperf.specs.wide import wide


_field = spec_field_of("hardware")   # a hardware field (marked as the hardware's in a Platform)


@wide
@dataclass(frozen=True, kw_only=True, eq=False, repr=False, init=False)
class Hardware:
    name: str
    description: str
    default_stack: str  # the stack (stacks/<name>.toml) this rack is evaluated with unless --stack says otherwise
    # [compute] dense datasheet peaks
    fp4_dense_flops_per_s: float = _field("compute", "FLOP/s")
    fp8_dense_flops_per_s: float = _field("compute", "FLOP/s")
    fp8_fp4_dense_flops_per_s: float = _field("compute", "FLOP/s", doc="mixed FP8 activations x FP4 weights")
    bf16_dense_flops_per_s: float = _field("compute", "FLOP/s")
    fp32_dense_flops_per_s: float = _field("compute", "FLOP/s")
    sm_count: int = _field("compute", "SMs", doc="SMs the serving kernels schedule on")
    sm_clock_hz: float = _field("compute", "Hz", doc="SM clock under load (boost): turns a kernel's fixed cycles into time")
    shared_memory_per_sm_bytes: float = _field("compute", "bytes", typical=(1e4, 1e6), doc="shared memory one SM's pipeline stages can use")
    preview: bool = _field("compute", positive=False, doc="true when NVIDIA has only previewed the figures")
    # [memory] HBM
    hbm_capacity_bytes: float = _field("memory", "bytes", typical=(1e10, 1e12))
    hbm_bandwidth_bytes_per_s: float = _field("memory", "B/s")
    memory_domains: int = _field("memory")
    hbm_local_bandwidth_factor: float = _field("memory", at_most=1.0, doc="fraction of peak when SMs read their own domain")
    hbm_interleaved_bandwidth_factor: float = _field("memory", at_most=1.0, doc="fraction of peak for interleaved memory")
    hbm_remote_bandwidth_factor: float = _field("memory", at_most=1.0, doc="fraction of peak across domains")
    hbm_latency_s: float = _field("memory", "s", doc="one dependent HBM load (pointer chase), L2 missed")
    l2_bytes_per_clock_per_sm: float = _field("memory", "bytes", typical=(8, 256), default=47.4, doc="bytes the L2 delivers per SM clock per SM (the L2's read rate over the SMs): a kernel whose CTAs re-read one operand from L2 (Cost.l2_bytes) loads at most this. Default: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), 'A100 L2 cache read bandwidth is 5120 Bytes/clk' over its 108 SMs = 47.4; ASSUMED per SM for Hopper, Blackwell and Rubin (not published for them), range 32-96 (2/3x to 2x); the roofline never takes the L2 slower than the HBM peak per SM")
    # [nvlink] scale-up
    nvlink_bandwidth_bytes_per_s: float = _field("nvlink", "B/s", doc="per GPU, one direction")
    nvlink_latency_s: float = _field("nvlink", "s", doc="per message")
    nvlink_domain_size: int = _field("nvlink", "GPUs")
    gpus_per_tray: int = _field("nvlink", "GPUs")
    cross_tray_latency_s: float = _field("nvlink", "s", positive=False, doc="extra latency of a cross-tray message")
    nvlink_multicast: bool = _field("nvlink", doc="the NVLink switches multicast and reduce in the switch (NVLS: NVSwitch 3 and later, HGX H100/H200/B200 and the NVL72 racks): the multicast all-reduce can run; false: it falls to the stack's next algorithm")
    # [scale_out] NIC
    scale_out_bandwidth_bytes_per_s: float = _field("scale_out", "B/s")
    scale_out_latency_s: float = _field("scale_out", "s", doc="one RDMA message, GPU to GPU (per-message latency)")
    max_nvlink_domains: int = _field("scale_out", "domains", doc="most NVLink domains one engine instance may span over the NIC (1: NVLink only); GPUs = nvlink_domain_size x this")
    # [host] CPU memory
    host_memory_capacity_bytes: float = _field("host", "bytes", typical=(1e10, 1e13), doc="per GPU")
    host_memory_bandwidth_bytes_per_s: float = _field("host", "B/s", doc="per GPU")
    c2c_bandwidth_bytes_per_s: float = _field("host", "B/s", doc="CPU-GPU link, per GPU")
    # [economics]
    gpu_power_w: float = _field("economics", "W")
    price_usd_per_gpu_hour: float = _field("economics", "USD/GPU-hour")
    # [kernel] silicon limits a kernel of any library meets: bytes in flight with ordinary loads, and a
    # kernel boundary inside a CUDA graph replay (the GPU front end works through the graph with no host
    # code in the way, so every stack pays the same). Tiles, pipelines, split-K, overlaps and the
    # launch of a lone kernel from a framework (host code: PyTorch dispatch) are the stack's
    stream_bytes_in_flight_per_sm: float = _field("kernel", "bytes", typical=(1e3, 1e6), doc="most bytes one SM keeps in flight with ordinary loads (streaming, gathers)")
    kernel_launch_graph_s: float = _field("kernel", "s", doc="a kernel boundary inside a CUDA graph replay")
    kernel_launch_stream_s: float = _field("kernel", "s", doc="the gap between two kernels issued from the host into one stream, no graph (the GPU's share of a do_bench figure beyond the kernel); at least the graph boundary")
    # [efficiency] fractions of peak any competent kernel reaches on this silicon (the memory system, the
    # links, CUDA cores); the tuned kernels' fractions are the stack's
    vector_compute_efficiency: float = _field("efficiency", at_most=1.0, doc="CUDA-core rate of norms, mixing, selection")
    hbm_stream_efficiency: float = _field("efficiency", at_most=1.0, doc="HBM rate a kernel with enough bytes in flight reaches")
    nvlink_efficiency: float = _field("efficiency", at_most=1.0)
    scale_out_efficiency: float = _field("efficiency", at_most=1.0)
    host_efficiency: float = _field("efficiency", at_most=1.0)
    sources: dict = dataclasses.field(default_factory=dict, compare=False)
    path: str = dataclasses.field(default="", compare=False)
    # [ranges]: an assumed field's range as data, {field: (low, high)} (rubinperf.specs.loader.check_ranges)
    ranges: dict = dataclasses.field(default_factory=dict, compare=False)

    def validate(self) -> None:
        if self.memory_domains > 1 and not (
            self.hbm_remote_bandwidth_factor <= self.hbm_interleaved_bandwidth_factor <= self.hbm_local_bandwidth_factor
        ):
            raise SpecError(f"{self.path}: memory: expected remote <= interleaved <= local bandwidth factor")
        for key in ("stream_bytes_in_flight_per_sm",):
            if getattr(self, key) > self.shared_memory_per_sm_bytes * 2:
                raise SpecError(f"{self.path}: kernel.{key}: expected at most twice shared_memory_per_sm_bytes "
                                f"({self.shared_memory_per_sm_bytes:g}): an SM cannot keep more bytes in flight")
        if self.kernel_launch_stream_s < self.kernel_launch_graph_s:
            raise SpecError(f"{self.path}: kernel.kernel_launch_stream_s: expected at least kernel_launch_graph_s "
                            f"({self.kernel_launch_graph_s:g} s): a graph replay never starts a kernel later than a stream")
        if self.gpus_per_tray > self.nvlink_domain_size:
            raise SpecError(f"{self.path}: nvlink.gpus_per_tray: expected at most nvlink_domain_size ({self.nvlink_domain_size})")

    def peak_flops(self, precision: str):
        if precision == "tf32":   # TF32 MMAs run at half the BF16 rate on Hopper and Blackwell (NVIDIA datasheets:
            # H100 SXM 494.7 vs 989.4 TFLOPS dense, B200 1.1 vs 2.25 PFLOPS dense); ASSUMED so on Rubin
            return self.bf16_dense_flops_per_s / 2
        return getattr(self, f"{precision}_dense_flops_per_s")



def load_hardware(name_or_path: str) -> Hardware:
    """Load a bundled hardware spec by name, or a user's TOML file by path."""
    path = resolve_path(name_or_path, "hardware")
    return load_spec_file(Hardware, path)
