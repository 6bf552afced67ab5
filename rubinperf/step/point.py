"""Operating points from user options: defaults, the default engine shapes, and checks.

Every check raises a SpecError naming the option, so the CLI can print one line.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rubinperf.errors import DoesNotFit, SpecError
from rubinperf.specs.defaults import DEFAULT_CONTEXT, DEFAULT_ENGINES
from rubinperf.specs.layout import Layout, check_layout
from rubinperf.specs.model import Model
from rubinperf.specs.wide import wide

if TYPE_CHECKING:   # for annotations only
    from rubinperf.specs.stack import Platform


@wide
@dataclass(frozen=True, eq=False, repr=False)
class Point:
    """One operating point of one engine."""

    phase: str                    # "decode" or "prefill"
    batch: object = 1             # requests (decode) or sequences (prefill) per rank
    context: object = 131072      # tokens already cached per request
    new_tokens: object = 32768    # prefill: new tokens per rank
    draft_tokens: object = None   # decode: k drafted tokens verified per step (None: the model's)
    acceptance: object = None     # decode: mean tokens emitted per verify step (None: the model's)
    engram_placement: str | None = None   # hbm | host | peer-hbm (None: the model's)
    balancedness: object = 0.94   # MoE: mean rank load / max rank load (target model)
    draft_balancedness: object = 0.89
    nvlink_domain_gpus: object = None   # GPUs per NVLink domain: wider DEP layouts exchange over the NIC too (None: one domain)
    ep_hierarchical: bool = False       # across domains: DeepEP normal (hierarchical) mode, else low-latency (direct RDMA)
    tp_allreduce_fused: bool = False    # the stack's TP path runs its all-reduces one-shot from the GEMM epilogues
    # The TP all-reduce by message size (stack [collective]): the algorithms, smallest messages first, the sizes where
    # each next one takes over, and whether the rack's switches multicast (hardware nvlink_multicast)
    allreduce_algorithms: tuple = ("two-shot",)
    allreduce_switch_bytes: tuple = ()
    allreduce_switch_ranks: tuple = ()  # the TP sizes of allreduce_switch_bytes' rows (empty: one row)
    nvlink_multicast: bool = True
    symbol_values: tuple = ()           # over symbols (explain): (name, value) of the point's symbols, where the
                                        # graph's structure depends on them (the all-reduce's algorithm by size)
    draft_ep_exchange: str = "all-to-all"   # DEP: the draft's MoE exchange (all-to-all as the target's, or all-gather)
    draft_first_pass: str = "one-per-request"   # decode: rows per request of the first draft forward
    draft_forwards: str = "sequential"  # decode: k sequential draft forwards, or one parallel block forward (DSpark's)
    # The stack's kernel set (stack [fusion]; these defaults are the fused vLLM set):
    mhc_kernels: str = "mega-mhc"       # an mHC sublayer boundary: one Mega-mHC kernel, or SGLang's four TileLang kernels
    tp_mhc_in_epilogue: bool = False    # TP path: mHC in the GEMM epilogues with the one-shot all-reduce (no kernel)
    moe_kernels: str = "megamoe"        # routed experts: one MegaMoE kernel, or GEMM1 + GEMM2 + finalize, or the
                                        # CUTLASS fused MoE's seven (on DEP with the EP dispatch and combine as kernels
                                        # of their own)
    tp_shared_expert_fused_below_rows: object = 0   # TP path: the shared expert inside the routed GEMMs below these rows
    rope_kv_insert_fused: bool = True   # query RoPE and KV insert in the projections' epilogues, or kernels of their own
    attention_mma_dtype: str = "bf16"   # attention's QK and PV MMA format (a quantised KV cache dequantised to it)
    sparse_entries_in_flight_per_cta: object = 128   # top-k entries one sparse decode CTA keeps in flight
    sparse_dequant_flops_per_value: object = 0.0   # CUDA-core work to dequantise one cached value (FP32 FLOP equivalents)
    # FlashMLA's SM90 sparse decode (stack sparse_decode_block_cycles): SM cycles of one CTA's 64-entry block and the
    # SMs its persistent split-KV grid spans (None: MegaAttn's one or two tokens per CTA)
    sparse_decode_block_cycles: object = 0.0
    sparse_decode_sms: object = None
    mla_prefill_form: str = "absorbed"  # an MLA model's prefill attention: absorbed (MQA over the latent) or
                                        # decompressed (MHA over up-projected keys and values)
    activation_quant_fused: bool = True   # FP8/FP4 activations of dense GEMMs quantised in other kernels, or a kernel each
    # MegaMoE's pipeline and dispatch as the stack's kernel has them (stack [kernel] megamoe_*; kernels/deepgemm.py)
    megamoe_smem_bytes: object = 232448.0
    megamoe_smem_weight_bytes_per_value: object = 1.0
    megamoe_pull_round_trips: object = 2
    # Aggregated serving: a chunk of pending prefill that shares a decode step (0: a pure decode step)
    chunk_tokens: object = 0      # prefill rows of the step, per rank
    chunk_seqs: object = 1        # sequences those rows belong to
    chunk_context: object = 0     # tokens cached before each chunk sequence's rows

    def k(self, m: Model):
        return m.draft_tokens if self.draft_tokens is None else self.draft_tokens

    def accepted(self, m: Model):
        return m.mean_accepted_tokens if self.acceptance is None else self.acceptance


MAX_BATCH = 1 << 20       # requests per rank: far beyond any HBM's KV capacity (as pareto --max-batch)
MAX_DRAFT_TOKENS = 64     # drafted tokens per verify step: real drafts verify a handful
DEFAULT_NEW_TOKENS = 32768

def stack_balancedness(hw: Platform, eplb: bool) -> tuple:
    """(target, draft) balancedness (mean rank load / max rank load) the stack's EPLB reaches, on or off."""
    pre = "eplb" if eplb else "no_eplb"
    return getattr(hw, f"{pre}_target_balancedness"), getattr(hw, f"{pre}_draft_balancedness")


def default_phase(layout: Layout) -> str:
    """The engine shape a layout usually serves: DEP2 prefills, everything else decodes."""
    return "prefill" if layout.kind == "dep" and layout.ranks <= 2 else "decode"


# Where the Engram tables live, per phase (docs/sources/vllm-deepseek-v4.1-flash.md): decode splits them
# over its DP ranks' HBM; prefill engines keep them off their own HBM (GB300: host memory; Rubin
# shards them over a peer group and reads over NVLink, --engram-placement peer-hbm).
ENGRAM_PLACEMENT = {"decode": "hbm", "prefill": "host"}


def _finite(name: str, value) -> None:
    """nan passes every `<` check and inf overflows the formulas: neither is an operating point."""
    if value is None:
        return
    try:
        ok = math.isfinite(value)
    except (TypeError, OverflowError):  # an int too large for a float
        ok = False
    if not ok:
        raise SpecError(f"--{name}: expected a finite number, got {value}")


def _count(v: float) -> str:
    return f"{v:,.0f}" if abs(v) < 1e15 else f"{v:.3g}"


def check_phase_options(layout: Layout, phase: str | None, new_tokens=None, draft_tokens=None, acceptance=None) -> None:
    """Options given on the command line for a step of the other phase are an error (they would be ignored)."""
    phase = phase or default_phase(layout)
    if phase == "prefill":
        for name, value in (("acceptance", acceptance), ("draft-tokens", draft_tokens)):
            if value is not None:
                raise SpecError(f"--{name}: applies to decode steps only, and this {layout.name} step is prefill")
    elif phase == "decode" and new_tokens is not None:
        raise SpecError(f"--new-tokens: applies to prefill steps only, and this {layout.name} step is decode")


def make_point(model, hw: Platform, layout: Layout, phase: str | None = None, batch=None, context=None, new_tokens=None,
               draft_tokens=None, acceptance=None, balancedness=None, eplb: bool = True,
               engram_placement: str | None = None) -> Point:
    check_layout(layout, model, hw)
    for name, value in (("batch", batch), ("context", context), ("new-tokens", new_tokens),
                        ("draft-tokens", draft_tokens), ("acceptance", acceptance), ("balancedness", balancedness)):
        _finite(name, value)
    phase = phase or default_phase(layout)
    if phase not in ("prefill", "decode"):
        raise SpecError(f"--phase: expected prefill or decode, got {phase!r}")

    asked_context = context
    context = DEFAULT_CONTEXT if context is None else context
    if context < 0:
        raise SpecError(f"--context: expected a non-negative token count, got {context}")
    if batch is None:
        batch = next((b for name, ph, b in DEFAULT_ENGINES if name == layout.name and ph == phase), 1)
    if not 1 <= batch <= MAX_BATCH:
        raise SpecError(f"--batch: expected between 1 and {MAX_BATCH:,} requests (decode) or sequences (prefill) "
                        f"per rank, got {batch:g}")
    new_tokens = DEFAULT_NEW_TOKENS if new_tokens is None else new_tokens
    if phase == "prefill":
        if new_tokens <= 0:
            raise SpecError(f"--new-tokens: expected a positive token count, got {new_tokens}")
        if new_tokens < batch:
            raise SpecError(f"--new-tokens: expected at least one new token per sequence (--batch {batch}), got {new_tokens}")
    per_seq = new_tokens / batch if phase == "prefill" else 0
    if asked_context is None and context + per_seq > model.max_context_tokens >= per_seq:
        # The default context leaves room for the step's new tokens in a model with a shorter window
        # (DeepSeek-V3's 128K: 96K cached + 32K new).
        context = model.max_context_tokens - per_seq
    if context + per_seq > model.max_context_tokens:
        if per_seq > model.max_context_tokens:  # the new tokens alone overflow: that option is the culprit
            raise DoesNotFit(f"--new-tokens: {_count(per_seq)} new tokens per sequence exceed {model.name}'s maximum "
                            f"context of {model.max_context_tokens:,} tokens")
        what = (f"{_count(context)} cached + {_count(per_seq)} new tokens (--new-tokens)" if per_seq
                else f"{_count(context)} tokens")
        raise DoesNotFit(f"--context: {what} exceed {model.name}'s maximum of {model.max_context_tokens:,}")
    k = model.draft_tokens if draft_tokens is None else draft_tokens
    if not 0 <= k <= MAX_DRAFT_TOKENS:
        raise SpecError(f"--draft-tokens: expected 0 to {MAX_DRAFT_TOKENS}, got {k}")
    if acceptance is None:
        acceptance = min(model.mean_accepted_tokens, k + 1)
    if not 1 <= acceptance <= k + 1:
        raise SpecError(f"--acceptance: expected between 1 and draft tokens + 1 = {k + 1}, got {acceptance}")
    bal, draft_bal = stack_balancedness(hw, eplb)
    if balancedness is not None:
        lowest = 1 / layout.ranks if layout.ep > 1 else 0.01
        if not lowest <= balancedness <= 1:
            why = (f"mean/max load over {layout.ranks} ranks is at least 1/{layout.ranks}" if layout.ep > 1
                   else "TP has no expert imbalance; the value is not used")
            raise SpecError(f"--balancedness: expected a value in [{lowest:.3g}, 1] for {layout.name} ({why}), got {balancedness:g}")
        bal = balancedness
    if layout.ep == 1:
        bal = draft_bal = 1.0  # every rank holds a slice of every expert (or all of them): no expert imbalance
    from rubinperf.specs.model import ENGRAM_PLACEMENTS

    placement = engram_placement or ENGRAM_PLACEMENT[phase]
    if placement not in ENGRAM_PLACEMENTS:
        raise SpecError(f"--engram-placement: expected one of {', '.join(ENGRAM_PLACEMENTS)}, got {placement!r}")
    return Point(phase=phase, batch=batch, context=context, new_tokens=new_tokens, draft_tokens=k,
                 acceptance=acceptance, balancedness=bal, draft_balancedness=draft_bal, engram_placement=placement,
                 **topology(hw, phase, layout))


def topology(hw: Platform, phase: str, layout: Layout | None = None) -> dict:
    """How the rack groups GPUs, how its stack's EP crosses NVLink domains, whether its TP path fuses the
    all-reduces into the GEMM epilogues, how the draft's MoE exchanges tokens and how many rows its first
    decode forward runs, as a Point carries them. The TP path's fields keep the Point's defaults on a layout
    that is no TP engine (they change nothing there, and equal points share one graph across stacks)."""
    tp_path = layout is None or layout.kind == "tp"
    reduces = layout is None or layout.tp > 1   # a layout with TP all-reduces (TP, TEP)
    return {"nvlink_domain_gpus": hw.nvlink_domain_size,
            **({name: getattr(hw, name, _POINT_DEFAULTS[name]) for name in _ALLREDUCE_FIELDS} if reduces else {}),
            "ep_hierarchical": bool(getattr(hw, f"ep_{phase}_hierarchical", False)),
            "sparse_decode_sms": hw.sm_count if getattr(hw, "sparse_decode_block_cycles", 0.0) else None,
            **{name: getattr(hw, name, _POINT_DEFAULTS[name]) if tp_path or name not in _TP_PATH_FIELDS
               else _POINT_DEFAULTS[name] for name in _STACK_POINT_FIELDS}}


# Point fields a stack sets under the same name (a rack without them keeps the Point's default).
_STACK_POINT_FIELDS = ("megamoe_smem_bytes", "megamoe_smem_weight_bytes_per_value", "megamoe_pull_round_trips",
                       "tp_allreduce_fused", "draft_ep_exchange", "draft_first_pass", "mhc_kernels", "tp_mhc_in_epilogue",
                       "moe_kernels", "tp_shared_expert_fused_below_rows", "rope_kv_insert_fused", "draft_forwards",
                       "attention_mma_dtype", "sparse_entries_in_flight_per_cta", "activation_quant_fused",
                       "sparse_dequant_flops_per_value", "mla_prefill_form", "sparse_decode_block_cycles")
_POINT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Point)}
# Fields (a stack's [collective], the hardware's multicast) only a layout with TP all-reduces reads.
_ALLREDUCE_FIELDS = ("allreduce_algorithms", "allreduce_switch_bytes", "allreduce_switch_ranks", "nvlink_multicast")
# Of those, the ones only a TP engine's graph reads (graph.py: the TP all-reduce, mHC in its epilogues, its shared
# expert inside its routed GEMMs).
_TP_PATH_FIELDS = ("tp_allreduce_fused", "tp_mhc_in_epilogue", "tp_shared_expert_fused_below_rows")
