"""Number formats: storage bytes per element including block scales, and which peak they use."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    bits: int             # bits of one value
    scale_bytes: int      # bytes of one block scale (0 = none)
    block_elements: int   # values sharing one scale
    peak: str             # which `<peak>_dense_flops_per_s` of the hardware a same-format MMA uses
    note: str

    @property
    def bytes_per_element(self) -> float:
        scales = self.scale_bytes / self.block_elements if self.scale_bytes else 0.0
        return self.bits / 8 + scales


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp4", 4, 1, 32, "fp4", "e2m1 values, one ue8m0 scale per 32 (~4.25 bits), as DeepSeek V4 experts"),
        Precision("nvfp4", 4, 1, 16, "fp4", "e2m1 values, one e4m3 scale per 16 (4.5 bits; the per-tensor FP32 scale "
                  "is not counted), NVIDIA's NVFP4 (NVIDIA technical blog, 'Introducing NVFP4', June 2025)"),
        Precision("fp8", 8, 4, 128 * 128, "fp8", "e4m3 values, one FP32 scale per 128x128 block"),
        Precision("bf16", 16, 0, 1, "bf16", "bfloat16"),
        Precision("fp32", 32, 0, 1, "fp32", "float32"),
    )
}

# Bytes of the formats the graph moves between kernels (no block scales): BF16 activations, FP32 residual routes
# (mHC) and logits.
ACT_BYTES = PRECISIONS["bf16"].bits // 8
RESIDUAL_BYTES = PRECISIONS["fp32"].bits // 8
LOGIT_BYTES = PRECISIONS["fp32"].bits // 8

# Mixed-operand MMAs that run at a rate of their own.
MIXED_PEAKS = {frozenset({"fp8", "fp4"}): "fp8_fp4"}


def get_precision(name: str) -> Precision:
    from rubinperf.errors import SpecError

    try:
        return PRECISIONS[name]
    except KeyError:
        raise SpecError(f"unknown dtype '{name}' (known: {', '.join(PRECISIONS)})") from None


def mma_peak(a: str, b: str) -> str:
    """The peak an MMA of operands in formats `a` and `b` runs at: their own, or the slower one's."""
    if a == b:
        return PRECISIONS[a].peak
    mixed = MIXED_PEAKS.get(frozenset({a, b}))
    if mixed:
        return mixed
    return max(PRECISIONS[a], PRECISIONS[b], key=lambda p: p.bits).peak
