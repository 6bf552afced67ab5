"""Parallel layouts: dep<N> and tp<N>, parsed and checked against a model."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubinperf.errors import SpecError

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


def parse_layout(text: str) -> Layout:
    m = re.fullmatch(r"(dep|tp)(\d+)", text.strip().lower())
    if not m:
        raise SpecError(f"unknown layout '{text}' (expected dep<N> or tp<N>, e.g. dep32, tp8)")
    n = int(m.group(2))
    if n < 1:
        raise SpecError(f"layout '{text}': expected at least 1 rank")
    return Layout(m.group(1), n)


def check_layout(layout: Layout, model, hw) -> None:
    """A layout must divide the model's experts (DEP) or heads and expert width (TP), and fit the NVLink domain."""
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
    if layout.ranks > hw.nvlink_domain_size:
        fit = layouts_that_fit(model, hw, layout.kind)
        raise SpecError(f"{where}: {layout.ranks} ranks exceed the {hw.name} NVLink domain of {hw.nvlink_domain_size} GPUs"
                        + (f" ({layout.kind} layouts that fit: {', '.join(fit)})" if fit else ""))


def layouts_that_fit(model, hw, kind: str) -> list[str]:
    """Names of the `kind` layouts (dep or tp) that divide the model and fit the rack's NVLink domain."""
    out = []
    for n in range(1, min(hw.nvlink_domain_size, 4096) + 1):
        try:
            check_layout(Layout(kind, n), model, hw)
        except SpecError:
            continue
        out.append(f"{kind}{n}")
    return out
