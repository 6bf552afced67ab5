"""The generic kernels a user can ask for by name: one catalog for `kernel`, `explain` and `calibrate`.

Each kind names its shape options, its default dtype and how a dtype maps to the operands
(FP4 weights take FP8 activations; outputs are BF16, FP32 for FP32), and builds the Kernel
from the same functions the step uses. Shape values may be numbers, arrays or sympy symbols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rubinperf.kernels.cost import Kernel
from rubinperf.errors import SpecError


def activation_dtype(weight: str) -> str:
    """The activations a GEMM on `weight`-format weights takes: FP8 for FP4 weights (FP8 x FP4 MMA), else the same
    (NVFP4 weights take NVFP4 activations: W4A4 at the FP4 rate)."""
    return "fp8" if weight == "fp4" else weight


def output_dtype(dtype: str) -> str:
    return "fp32" if dtype == "fp32" else "bf16"


@dataclass(frozen=True)
class KernelKind:
    name: str
    shapes: tuple           # shape options, in the order the help lists them
    default_dtype: str | None
    summary: str
    build: Callable         # (shape, dtype, causal, ranks, gpus_per_tray) -> Kernel


def _gemm(s, d, causal, ranks, tray):
    from rubinperf.kernels import gemm

    return gemm(s["m"], s["n"], s["k"], weight=d, act=d, out=output_dtype(d))


def _grouped(s, d, causal, ranks, tray):
    from rubinperf.kernels import grouped_gemm

    return grouped_gemm(s["tokens"], s["groups"], s["n"], s["k"], weight=d, act=activation_dtype(d),
                        out=output_dtype(d), touched=s.get("touched"))


def _attention(s, d, causal, ranks, tray):
    from rubinperf.kernels import attention

    return attention(s["batch"], s["heads"], s["q_len"], s["kv_len"], s["head_dim"], dtype=d, kv_heads=s.get("kv_heads"),
                     causal=causal, v_head_dim=s.get("v_head_dim"), shared_kv=bool(s.get("shared_kv")))


def _copy(s, d, causal, ranks, tray):
    from rubinperf.kernels import copy

    return copy(s["bytes"])


def _all_reduce(s, d, causal, ranks, tray):
    from rubinperf.kernels import all_reduce

    return all_reduce(s["bytes"], ranks, gpus_per_tray=tray, gpus_per_domain=s.get("gpus_per_domain"))


def _all_to_all(s, d, causal, ranks, tray):
    from rubinperf.kernels import all_to_all

    return all_to_all(s["bytes"], ranks, gpus_per_tray=tray, gpus_per_domain=s.get("gpus_per_domain"),
                      hierarchical=bool(s.get("hierarchical")))


def _all_gather(s, d, causal, ranks, tray):
    from rubinperf.kernels import all_gather

    return all_gather(s["bytes"], ranks, gpus_per_tray=tray, gpus_per_domain=s.get("gpus_per_domain"))


# Collective kinds: `ranks` in the group; the shape may name `gpus_per_domain` (GPUs per NVLink domain:
# a wider group also crosses the scale-out NIC) and, for all-to-all, `hierarchical` (DeepEP normal mode).
COLLECTIVES = ("all-reduce", "all-to-all", "all-gather")


CATALOG: dict[str, KernelKind] = {k.name: k for k in (
    KernelKind("gemm", ("m", "n", "k"), "bf16", "dense GEMM [m, k] x [k, n]", _gemm),
    KernelKind("grouped-gemm", ("tokens", "groups", "n", "k"), "fp4",
               "grouped (MoE) GEMM: routed rows spread uniformly over experts", _grouped),
    KernelKind("attention", ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim"), "bf16",
               "flash attention (GQA/MQA when kv_heads < heads)", _attention),
    KernelKind("copy", ("bytes",), None, "device-to-device copy", _copy),
    KernelKind("all-reduce", ("bytes",), None, "all-reduce over the NVLink domain (hierarchical across domains)", _all_reduce),
    KernelKind("all-to-all", ("bytes",), None, "all-to-all over the NVLink domain (and the NIC across domains)", _all_to_all),
    KernelKind("all-gather", ("bytes",), None, "all-gather over the NVLink domain (hierarchical across domains)", _all_gather),
)}


def build(kind: str, shape: dict, dtype: str | None = None, causal: bool = False, ranks: int = 8,
          gpus_per_tray=None) -> Kernel:
    """The Kernel of a generic kind at `shape` (missing optional keys take their defaults)."""
    try:
        k = CATALOG[kind]
    except KeyError:
        raise SpecError(f"unknown kernel '{kind}' (known: {', '.join(CATALOG)})") from None
    return k.build(shape, dtype or k.default_dtype, causal, ranks, gpus_per_tray)
