"""Cost of a kernel (what it does) and KernelTime (how long it takes on some hardware).

A Cost is additive and scalable: FLOPs per MMA rate, HBM bytes by kind, host and
link traffic, and fixed counts (launches, collectives, latency hops). Values may be
numbers, numpy arrays or sympy expressions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

PEAKS = ("fp4", "fp8", "fp8_fp4", "bf16", "fp32")
BYTE_KINDS = ("weight_bytes", "activation_bytes", "kv_bytes", "table_bytes")


@dataclass(frozen=True)
class Cost:
    fp4_flops: Any = 0.0
    fp8_flops: Any = 0.0
    fp8_fp4_flops: Any = 0.0
    bf16_flops: Any = 0.0
    fp32_flops: Any = 0.0
    weight_bytes: Any = 0.0       # HBM bytes of weights
    activation_bytes: Any = 0.0   # HBM bytes of activations (read + write)
    kv_bytes: Any = 0.0           # HBM bytes of KV cache and index keys
    table_bytes: Any = 0.0        # HBM bytes of look-up tables (Engram)
    host_bytes: Any = 0.0         # bytes read from host memory over C2C
    nvlink_bytes: Any = 0.0       # bytes sent per GPU over NVLink
    nvlink_hops: Any = 0.0        # serial per-message latencies on NVLink
    cross_tray_hops: Any = 0.0    # of those, how many cross a tray boundary
    scale_out_bytes: Any = 0.0    # bytes sent per GPU over the scale-out NIC
    scale_out_hops: Any = 0.0
    launches: Any = 0.0           # kernel launches (each pays the launch floor)
    collectives: Any = 0.0        # collectives (each pays the collective floor)
    steps: Any = 0.0              # engine steps (each pays the CPU/scheduling overhead)
    dp_sync_ranks: Any = 0.0      # ranks synchronised per step (each pays the DP sync cost)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def __radd__(self, other):
        if other == 0:
            return self
        return NotImplemented

    def __mul__(self, k) -> "Cost":
        return Cost(*(getattr(self, f.name) * k for f in dataclasses.fields(self)))

    __rmul__ = __mul__

    @property
    def flops(self):
        return sum(getattr(self, f"{p}_flops") for p in PEAKS)

    @property
    def hbm_bytes(self):
        return self.weight_bytes + self.activation_bytes + self.kv_bytes + self.table_bytes

    @property
    def bytes(self):
        """Every byte the kernel moves through a memory: HBM plus host memory."""
        return self.hbm_bytes + self.host_bytes

    @staticmethod
    def of_flops(peak: str, flops) -> "Cost":
        return Cost(**{f"{peak}_flops": flops})


BOUNDS = ("compute", "memory", "comm", "floor")


@dataclass(frozen=True)
class KernelTime:
    """Seconds. Expected = max(compute, memory, comm) + floor; SOL = max of the terms at datasheet peaks."""

    compute_s: Any
    memory_s: Any
    comm_s: Any
    floor_s: Any
    expected_s: Any
    sol_compute_s: Any
    sol_memory_s: Any
    sol_comm_s: Any
    sol_s: Any

    @property
    def bound(self) -> str:
        """Which term sets the expected time: compute, memory, comm or floor."""
        terms = [self.compute_s, self.memory_s, self.comm_s, self.floor_s]
        return BOUNDS[max(range(4), key=lambda i: float(terms[i]))]

    @property
    def fraction_of_roofline(self):
        """Speed-of-light time over expected time: 1.0 means the kernel runs at the roofline (and for no work)."""
        if isinstance(self.expected_s, (int, float)) and self.expected_s == 0:
            return 1.0
        return self.sol_s / self.expected_s

    def __add__(self, other: "KernelTime") -> "KernelTime":
        return KernelTime(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def __mul__(self, k) -> "KernelTime":
        return KernelTime(*(getattr(self, f.name) * k for f in dataclasses.fields(self)))

    __rmul__ = __mul__
