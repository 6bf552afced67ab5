"""Parallel layouts: dep<N>, tp<N> and tep<N>, parsed and checked against a model.

- dep<N>: N ranks, each its own scheduler with data-parallel attention; the routed experts split N ways (EP-N),
  tokens exchanged by dispatch and combine.
- tp<N>: one instance over N GPUs: attention heads, dense and shared-expert columns and every routed expert's
  columns split N ways (TP-N), an all-reduce after each sublayer.
- tep<N> (also written tp<N>-ep<N>): one instance over N GPUs with tensor-parallel attention (as tp<N>) and
  expert-parallel MoE: each GPU holds N-th of the routed experts whole, as `vllm serve --tensor-parallel-size N
  --enable-expert-parallel` runs (EP size = TP x DP = N) and SGLang `--tp N --ep N`, TensorRT-LLM's TEP.
  With one data-parallel rank every GPU already holds every token after the attention all-reduce, so no token
  is dispatched: each GPU runs its own experts over the tokens routed to them and the MoE all-reduce sums the
  partial outputs (vLLM uses its all-to-all kernels only with data parallelism: FusedMoEParallelConfig.
  use_all2all_kernels = dp_size > 1 and use_ep, vllm/model_executor/layers/fused_moe/config.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubinperf.errors import SpecError

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform

LAYOUT_EXAMPLES = [
    ("dep2", "prefill engine: 2 ranks, data-parallel attention, experts split 2 ways (EP2)"),
    ("dep16", "Wide-EP decode: 16 ranks, data-parallel attention, EP16 dispatch/combine over NVLink"),
    ("dep32", "Wide-EP decode: 32 ranks, data-parallel attention, EP32 dispatch/combine over NVLink"),
    ("tp4", "low-latency decode on 4 GPUs: heads and every expert's columns split 4 ways"),
    ("tp8", "low-latency decode on 8 GPUs (two Rubin trays): heads and every expert's columns split 8 ways"),
    ("tep8", "8 GPUs: heads split 8 ways (TP8 attention), 1/8 of the experts whole on each GPU (EP8, no dispatch)"),
]
KINDS = ("dep", "tp", "tep")


@dataclass(frozen=True)
class Layout:
    kind: str     # "dep", "tp" or "tep"
    ranks: int

    @property
    def name(self) -> str:
        return f"{self.kind}{self.ranks}"

    @property
    def tp(self) -> int:
        """The tensor-parallel degree of attention, dense and shared-expert layers and the LM head."""
        return self.ranks if self.kind in ("tp", "tep") else 1

    @property
    def ep(self) -> int:
        """Ways the routed experts are split whole (expert parallelism)."""
        return self.ranks if self.kind in ("dep", "tep") else 1

    @property
    def expert_tp(self) -> int:
        """Ways each routed expert's columns are split (tensor-parallel experts: tp<N> only)."""
        return self.ranks if self.kind == "tp" else 1

    @property
    def dp(self) -> int:
        return self.ranks if self.kind == "dep" else 1

    def per_gpu(self, per_rank):
        """A quantity of one scheduler (a DEP rank, or a TP instance over all its GPUs) per GPU of the layout:
        per_rank x dp / ranks (a DEP rank is one GPU; a TP instance shares it over its TP GPUs)."""
        return per_rank * self.dp / self.ranks


def parse_layout(text: str) -> Layout:
    low = text.strip().lower()
    both = re.fullmatch(r"tp(\d+)-?ep(\d+)", low)
    if both:
        if both.group(1) != both.group(2):
            raise SpecError(f"layout '{text}': TP attention with EP experts spans the same GPUs: expected "
                            f"tp<N>-ep<N> with one N (e.g. tp8-ep8, or tep8)")
        low = f"tep{both.group(1)}"
    m = re.fullmatch(r"(dep|tep|tp)(\d+)", low)
    if not m:
        raise SpecError(f"unknown layout '{text}' (expected dep<N>, tp<N> or tep<N>, e.g. dep32, tp8, tep8)")
    n = int(m.group(2))
    if n < 1:
        raise SpecError(f"layout '{text}': expected at least 1 rank")
    return Layout(m.group(1), n)


def check_layout(layout: Layout, model, hw: Platform) -> None:
    """A layout must divide the model's experts (DEP, TEP), heads (TP, TEP) and expert width (TP), and fit the
    NVLink domain; a DEP layout may span whole NVLink domains of a cluster (up to max_nvlink_domains of them, over
    the NIC)."""
    where = f"layout {layout.name} for {model.name}"
    if layout.ep > 1 and model.num_routed_experts % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide {model.num_routed_experts} routed experts")
    if layout.ep > 1 and model.draft_layers and model.draft_routed_experts % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide the draft's {model.draft_routed_experts} experts")
    if layout.tp > 1 and model.num_heads % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide {model.num_heads} heads")
    if layout.expert_tp > 1 and model.moe_intermediate_size % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide the expert width {model.moe_intermediate_size}")
    d = hw.nvlink_domain_size
    if layout.ranks > d and (layout.kind != "dep" or max_ranks(hw) == d):
        fit = layouts_that_fit(model, hw, layout.kind)
        why = " (TP stays inside one NVLink domain)" if layout.kind != "dep" and max_ranks(hw) > d else ""
        raise SpecError(f"{where}: {layout.ranks} ranks exceed the {hw.name} NVLink domain of {d} GPUs{why}"
                        + (f" ({layout.kind} layouts that fit: {_short(fit)})" if fit else ""))
    if layout.ranks > max_ranks(hw):
        raise SpecError(f"{where}: {layout.ranks} ranks exceed the {hw.name} deployment of {hw.max_nvlink_domains} "
                        f"NVLink domains x {d} GPUs = {max_ranks(hw)} GPUs")
    if layout.ranks > d and layout.ranks % d:
        raise SpecError(f"{where}: {layout.ranks} ranks span NVLink domains of {d} GPUs: expected a multiple of {d} "
                        "(whole domains)")


def max_ranks(hw: Platform) -> int:
    """The most GPUs one engine instance may span: GPUs per NVLink domain x domains it may span over the NIC."""
    return hw.nvlink_domain_size * getattr(hw, "max_nvlink_domains", 1)


def domains_spanned(layout: Layout, hw: Platform) -> int:
    """NVLink domains an instance of `layout` occupies on `hw` (1 for any layout inside one domain)."""
    return max(1, -(-layout.ranks // hw.nvlink_domain_size))


def fits(layout: Layout, model, hw: Platform) -> bool:
    """check_layout as a yes or no."""
    try:
        check_layout(layout, model, hw)
    except SpecError:
        return False
    return True


def layouts_that_fit(model, hw: Platform, kind: str) -> list[str]:
    """Names of the `kind` layouts (dep, tp or tep) that divide the model and fit the rack's NVLink domain
    (DEP: or span whole domains of a cluster)."""
    widest = hw.nvlink_domain_size if kind != "dep" else max_ranks(hw)
    return [f"{kind}{n}" for n in range(1, min(widest, 4096) + 1) if fits(Layout(kind, n), model, hw)]


def _short(names: list[str], most: int = 12) -> str:
    return ", ".join(names) if len(names) <= most else ", ".join(names[:most]) + f", ... ({len(names)} in all)"
