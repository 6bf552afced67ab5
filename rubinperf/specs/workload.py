"""Workload spec: the traffic one deployment serves, and the serving assumptions around it.

[workload] says what a turn looks like (mean input tokens, how many of them hit a cached
prefix, mean output tokens); [serving] holds the deployment's choices that the spec
files of the model and the rack do not fix (prefill engine shape and chunk, where cached
prefixes come from, which link carries KV to the decode pool, HBM held back from the
model). Every table has a source; values that are assumptions say so there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rubinperf.errors import SpecError
from rubinperf.specs.loader import build_spec, read_toml, resolve_path, spec_field

PREFIX_POOLS = ("host", "peer-hbm", "hbm")
KV_LINKS = ("nvlink", "scale-out")
ENGRAM_PLACEMENTS = ("hbm", "host", "peer-hbm")
MAX_CHUNK_TOKENS = 4 * 1024 * 1024


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # [workload] one turn of a session
    input_tokens_per_turn: float = spec_field("workload", "tokens", doc="mean prompt tokens per turn, cached prefix included")
    prefix_hit_rate: float = spec_field("workload", positive=False, at_most=1.0,
                                        doc="fraction of a turn's input found in the prefix cache")
    output_tokens_per_turn: float = spec_field("workload", "tokens", doc="mean generated tokens per turn")
    # [serving] deployment assumptions
    prefill_layout: str = spec_field("serving", doc="engine shape of the prefill pool (dep<N>, tp<N> or tep<N>)")
    prefill_tokens_per_rank: float = spec_field("serving", "tokens", at_most=MAX_CHUNK_TOKENS,
                                                doc="chunked-prefill token budget of one step, per rank (DEP) or per instance (TP)")
    prefix_pool: str = spec_field("serving", doc="where cached prefixes are loaded from: host (C2C), peer-hbm (NVLink) or hbm")
    kv_transfer_link: str = spec_field("serving", doc="link that carries a prefilled KV cache to the decode pool: nvlink or scale-out")
    runtime_reserve_bytes: float = spec_field("serving", "bytes", positive=False, typical=(1e8, 1e11),
                                              doc="HBM per GPU held back from weights and KV (runtime, comm buffers, graphs)")
    prefill_engram_placement: str = spec_field("serving", doc="Engram tables in the prefill pool: hbm (split over the instance), host (C2C) or peer-hbm (sharded over engram_peer_gpus, read over NVLink)")
    engram_peer_gpus: int = spec_field("serving", "GPUs", doc="peer-hbm placement: GPUs the tables are sharded over")
    # [workload], with a default (after the fields without one)
    turn_gap_s: float = spec_field("workload", "s", positive=False, typical=(0.1, 600.0), default=0.0,
                                   doc="seconds a session waits between a reply and its next turn (think or tool time; "
                                       "0: the next turn goes out at once): aggregated engines' clients think this long")
    sources: dict = dataclasses.field(default_factory=dict, compare=False)
    path: str = dataclasses.field(default="", compare=False)

    def validate(self) -> None:
        def bad(key, why):
            raise SpecError(f"{self.path}: {key}: {why}")

        if self.input_tokens_per_turn < 1:
            bad("workload.input_tokens_per_turn", f"expected at least 1 token, got {self.input_tokens_per_turn!r}")
        if self.output_tokens_per_turn < 1:
            bad("workload.output_tokens_per_turn", f"expected at least 1 token, got {self.output_tokens_per_turn!r}")
        if self.prefill_tokens_per_rank < 1:
            bad("serving.prefill_tokens_per_rank", f"expected at least 1 token, got {self.prefill_tokens_per_rank!r}")
        if self.prefix_pool not in PREFIX_POOLS:
            bad("serving.prefix_pool", f"expected one of {', '.join(PREFIX_POOLS)}, got {self.prefix_pool!r}")
        if self.kv_transfer_link not in KV_LINKS:
            bad("serving.kv_transfer_link", f"expected one of {', '.join(KV_LINKS)}, got {self.kv_transfer_link!r}")
        if self.prefill_engram_placement not in ENGRAM_PLACEMENTS:
            bad("serving.prefill_engram_placement",
                f"expected one of {', '.join(ENGRAM_PLACEMENTS)}, got {self.prefill_engram_placement!r}")
        from rubinperf.specs.layout import parse_layout

        try:
            parse_layout(self.prefill_layout)
        except SpecError as exc:
            bad("serving.prefill_layout", str(exc))

    # Token accounting of one turn (the vLLM posts count all three as throughput).
    @property
    def uncached_tokens_per_turn(self) -> float:
        """New prompt tokens the prefill pool computes; at least one (the last token is always computed)."""
        return max(self.input_tokens_per_turn * (1.0 - self.prefix_hit_rate), 1.0)

    @property
    def cached_tokens_per_turn(self) -> float:
        return self.input_tokens_per_turn - self.uncached_tokens_per_turn

    @property
    def tokens_per_turn(self) -> float:
        return self.input_tokens_per_turn + self.output_tokens_per_turn


def load_workload(name_or_path: str) -> Workload:
    """Load a bundled workload (examples/<name>.toml) by name, or a user's TOML file by path."""
    path = resolve_path(name_or_path, "workload")
    return build_spec(Workload, read_toml(path), path)
