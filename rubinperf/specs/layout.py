"""Parallel layouts: dep<N> and tp<N>, parsed and checked against a model."""

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
]


@dataclass(frozen=True)
class Layout:
    kind: str     # "dep" or "tp"
    ranks: int

    @property
    def name(self) -> str:
        return f"{self.kind}{self.ranks}"

    @property
    def tp(self) -> int:
        return self.ranks if self.kind == "tp" else 1

    @property
    def ep(self) -> int:
        return self.ranks if self.kind == "dep" else 1

    @property
    def dp(self) -> int:
        return self.ranks if self.kind == "dep" else 1

    def per_gpu(self, per_rank):
        """A quantity of one scheduler (a DEP rank, or a TP instance over all its GPUs) per GPU of the layout:
        per_rank x dp / ranks (a DEP rank is one GPU; a TP instance shares it over its TP GPUs)."""
        return per_rank * self.dp / self.ranks


def parse_layout(text: str) -> Layout:
    m = re.fullmatch(r"(dep|tp)(\d+)", text.strip().lower())
    if not m:
        raise SpecError(f"unknown layout '{text}' (expected dep<N> or tp<N>, e.g. dep32, tp8)")
    n = int(m.group(2))
    if n < 1:
        raise SpecError(f"layout '{text}': expected at least 1 rank")
    return Layout(m.group(1), n)


def check_layout(layout: Layout, model, hw: Platform) -> None:
    """A layout must divide the model's experts (DEP) or heads and expert width (TP), and fit the NVLink domain;
    a DEP layout may span whole NVLink domains of a cluster (up to max_nvlink_domains of them, over the NIC)."""
    where = f"layout {layout.name} for {model.name}"
    if layout.kind == "dep" and model.num_routed_experts % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide {model.num_routed_experts} routed experts")
    if layout.kind == "dep" and model.draft_layers and model.draft_routed_experts % layout.ranks:
        raise SpecError(f"{where}: {layout.ranks} ranks do not divide the draft's {model.draft_routed_experts} experts")
    if layout.kind == "tp":
        if model.num_heads % layout.ranks:
            raise SpecError(f"{where}: {layout.ranks} ranks do not divide {model.num_heads} heads")
        if model.moe_intermediate_size % layout.ranks:
            raise SpecError(f"{where}: {layout.ranks} ranks do not divide the expert width {model.moe_intermediate_size}")
    d = hw.nvlink_domain_size
    if layout.ranks > d and (layout.kind == "tp" or max_ranks(hw) == d):
        fit = layouts_that_fit(model, hw, layout.kind)
        why = " (TP stays inside one NVLink domain)" if layout.kind == "tp" and max_ranks(hw) > d else ""
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
    """Names of the `kind` layouts (dep or tp) that divide the model and fit the rack's NVLink domain
    (DEP: or span whole domains of a cluster)."""
    widest = hw.nvlink_domain_size if kind == "tp" else max_ranks(hw)
    return [f"{kind}{n}" for n in range(1, min(widest, 4096) + 1) if fits(Layout(kind, n), model, hw)]


def _short(names: list[str], most: int = 12) -> str:
    return ", ".join(names) if len(names) <= most else ", ".join(names[:most]) + f", ... ({len(names)} in all)"
