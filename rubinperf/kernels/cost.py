"""Cost of a kernel (what it does) and KernelTime (how long it takes on some hardware).

A Cost is additive and scalable: FLOPs per MMA rate, HBM bytes by kind, host and
link traffic, and fixed counts (launches, collectives, latency hops). Values may be
numbers, numpy arrays or sympy expressions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from dataclasses import dataclass
from typing import Any

from rubinperf import mathops
from rubinperf.mathops import FieldArithmetic, dict_init, sadd

PEAKS = ("fp4", "fp8", "fp8_fp4", "bf16", "tf32", "fp32")
_NUMBERS = (int, float)
BYTE_KINDS = ("weight_bytes", "activation_bytes", "kv_bytes", "table_bytes")


@dict_init
@dataclass(frozen=True, init=False)
class Cost(FieldArithmetic):
    fp4_flops: Any = 0.0
    fp8_flops: Any = 0.0
    fp8_fp4_flops: Any = 0.0
    bf16_flops: Any = 0.0
    tf32_flops: Any = 0.0         # TF32 tensor-core FLOPs (FP32 operands on the MMA: mHC's pre-norm GEMM)
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
    l2_bytes: Any = 0.0           # bytes SMs re-read from L2 beyond the HBM bytes (operands other CTAs already
                                  # brought in: the indexer's keys, read once per query block); not HBM traffic

    @classmethod
    def _of_fields(cls, values) -> "Cost":
        """A Cost of these field values, in field order (FieldArithmetic's sums and products)."""
        return Cost(*values)

    @property
    def flops(self):
        return sum(getattr(self, f"{p}_flops") for p in PEAKS)

    @property
    def hbm_bytes(self):
        return sadd(self.weight_bytes, self.activation_bytes, self.kv_bytes, self.table_bytes)

    @property
    def bytes(self):
        """Every byte the kernel moves through a memory: HBM plus host memory."""
        return self.hbm_bytes + self.host_bytes

    def map(self, fn) -> "Cost":
        """The same Cost with `fn` applied to every field (one element of a sweep's arrays)."""
        return Cost(**{f: fn(v) for f, v in self.__dict__.items()})

    @staticmethod
    def total(costs) -> "Cost":
        """The sum of an iterable of Costs (zero for none)."""
        return sum(costs, Cost())

    @staticmethod
    def of_flops(peak: str, flops, **others) -> "Cost":
        """`flops` at the `peak` rate, and `others` fields: the sum Cost(peak flops) + Cost(**others), made at once
        (a plain number becomes a float, as added to the other's 0.0)."""
        others[f"{peak}_flops"] = flops + others[f"{peak}_flops"] if f"{peak}_flops" in others else flops
        return Cost(**{f: v + 0.0 if type(v) in _NUMBERS else v for f, v in others.items()})


_COST_FIELDS = tuple(f.name for f in dataclasses.fields(Cost))


# Kernel families: each selects the efficiency and the overlap rule the roofline applies.
FAMILIES = {
    "gemm": "dense GEMM: tiles of mma_tile_rows x mma_tile_cols, split-K, weights streamed by TMA pipelines",
    "grouped_gemm": "one GEMM per touched expert in one launch; rows padded per group",
    "fused_moe": "MegaMoE: EP dispatch, expert GEMMs and combine in one kernel (DeepGEMM's blocks, stages and pulls); "
                 "the exchange overlaps the GEMMs as rows grow",
    "attention": "attention and the indexer's logits: a chain of index loads and KV gathers, then MMA per block",
    "stream": "norms, mixing, selection, copies: bytes in, bytes out, a few CUDA-core FLOPs",
    "lookup": "table gathers (Engram) from HBM, host memory or peers",
    "collective": "a collective over the NVLink domain: set-up, per-message round trips, link bytes",
    "host": "the host's work for a step (scheduling, DP synchronisation): overlaps the GPU",
}


@dict_init
@dataclass(frozen=True, init=False)
class Kernel:
    """One kernel launch (or one fused kernel) of a family: its Cost and how its work spreads over SMs.

    An MMA kernel gives its problem, `groups` independent [rows x k] @ [k x n] GEMMs (rows
    per group), from which the roofline derives tiles, padding, split-K, CTAs and waves.
    Other kernels give the CTAs they launch (`ctas`; None: enough to fill every SM).
    `dependent_loads` counts the HBM round trips in a chain before the kernel's work
    streams (1 for a GEMM's first stage; 2 for an index load then a gather); `drain_loads` those
    after it, until its last stores are acknowledged and the grid can end (1; 0 for a probe that
    writes nothing). A fused
    kernel gives the `rows` flowing through its phases (its overlap grows with them). A
    kernel that states its own bytes in flight per CTA (a probe) keeps every CTA's in flight.
    """

    family: str
    cost: Cost
    groups: Any = None
    rows: Any = None
    n: Any = None
    k: Any = None
    ctas: Any = None
    dependent_loads: Any = 1
    drain_loads: Any = 1   # round trips of its last stores before the grid completes (0: a kernel that writes nothing)
    fused_rows: Any = None
    in_flight_bytes_per_cta: Any = None   # None: the hardware's per-SM figure for the family
    # An MMA kernel whose implementation picks its own tiles (a library's dispatch): rows and columns of
    # one CTA's tile, the M tiles of each group rounded up to a multiple (a thread-block cluster along M),
    # and the CTAs of a persistent grid. None: the stack's mma_tile_rows / mma_tile_cols, no rounding,
    # one CTA per tile.
    tile_rows: Any = None
    tile_cols: Any = None
    m_tile_multiple: Any = None
    max_ctas: Any = None
    # A kernel of unequal CTAs (causal prefill attention): the longest CTA's share of the work. None: equal CTAs.
    critical_share: Any = None
    # A non-MMA-family kernel that runs more MMA work than its useful FLOPs (causal attention computing the key blocks
    # its diagonal crosses in full, masked): computed / useful, a padding of its compute time. None: 1.
    work_padding: Any = None
    # A split-KV decode kernel: its CTAs before any split of the KV (sequences x KV heads x query tiles). With fewer
    # than the SMs it splits the KV over more CTAs, and a second kernel reduces their partial outputs. None: no split.
    split_kv_groups: Any = None
    # An MMA kernel whose weights are narrower than its activations and widened to their format in its main loop
    # before the MMA (W4A16: FP4 experts dequantised to BF16): it runs at a rate of its own
    # (roofline.efficiency_field).
    dequantises_weights: bool = False
    # A kernel whose messages (`Cost.nvlink_hops`) are independent items spread over its SMs, this many round-trip
    # chains per SM at once (MegaMoE's dispatch warps pulling tokens): the serial round trips are the hops over
    # lanes x SMs. None: the hops are serial, as a collective's.
    hop_lanes_per_sm: Any = None
    # Of those, the round trips of one item, one after another on its lane (MegaMoE: pulls per token x round trips per
    # pull; a dispatch warp issues a token's chunk loads one at a time, each waited before the next, then loads its
    # top-k weight: DeepGEMM @ 54e2261, deep_gemm/include/deep_gemm/impls/sm100_fp8_fp4_mega_moe.cuh lines 538-557
    # and 581-586): however many lanes there are, the chain takes at least one item's. None: no such floor.
    hops_per_item: Any = None
    # A fused kernel of two GEMMs one after the other over the same rows (MegaMoE: linear 1 over n columns and k deep,
    # then linear 2 over second_n columns and second_k deep): their blocks share one round-robin list over the SMs
    # (roofline._two_phase). None: one GEMM.
    second_n: Any = None
    second_k: Any = None
    # Rows the MMA pads a block's valid rows to, where it shrinks to them (MegaMoE's UMMA N follows the block's valid
    # tokens, aligned to 16). None: whole tiles of tile_rows.
    pad_rows: Any = None
    # Bytes of one output value an MMA kernel's epilogue writes tile by tile (a GEMM's output, groups x rows x n values:
    # each block's accumulators converted, staged in shared memory and stored by TMA). Where the library waits for a
    # block's store before the next block's MMAs, the store adds to the MMAs' time (roofline.epilogue_store,
    # mma_epilogue_exposed). None: no output tile store.
    out_bytes_per_element: Any = None
    # A kernel whose CTAs each run this many main-loop steps one after another, each waiting for the last (DeepGEMM's SM90
    # TF32 pre-norm GEMM: its K blocks, one math warpgroup): the CTAs' waves x steps x the stack's cycles per step
    # (hc_prenorm_step_cycles) is a floor under its compute (roofline.serial_chain). None: no such chain.
    serial_steps: Any = None
    # SM cycles of one of those steps where the kernel states them (FlashMLA's SM90 sparse decode: one 64-entry block of
    # a CTA's chain, the stack's sparse_decode_block_cycles). None: the stack's hc_prenorm_step_cycles.
    step_cycles: Any = None
    # A split-KV kernel whose reduction reads its splits one after another (FlashMLA's combine: a warp per head loops over
    # its request's splits, each split's partial output loaded after the last was summed): the reduction's dependent
    # loads. None: REDUCE_DEPENDENT_LOADS (roofline.launch_parts).
    reduce_loads: Any = None
    # Of a kernel with a serial chain (serial_steps), the bytes its CTAs store together at the chain's end and wait for
    # before they finish (FlashMLA's SM90 sparse decode: each CTA's last output tile, tma_store_wait<0>): they add to
    # the chain at the HBM write rate (roofline.serial_chain). None: no such store.
    tail_store_bytes: Any = None

    @property
    def store_bytes(self):
        """HBM bytes of the output tiles the epilogue stores: groups x rows x n x out_bytes_per_element."""
        return self.groups * self.rows * self.n * self.out_bytes_per_element

    @property
    def is_mma(self) -> bool:
        return self.rows is not None

    def plus(self, extra: Cost) -> "Kernel":
        """The same kernel doing `extra` work in its epilogue (a fused KV insert, a top-k of its scores)."""
        return dataclasses.replace(self, cost=self.cost + extra)

    def map(self, fn) -> "Kernel":
        """The same kernel with `fn` applied to its cost's fields and its shape fields (one element of a sweep)."""
        return dataclasses.replace(self, cost=self.cost.map(fn), **{f: fn(getattr(self, f)) for f in KERNEL_SHAPE_FIELDS})


def stacked(kernels: list) -> Kernel:
    """Kernels of one family, one set of given shape fields and one value of each yes/no field (`group_key`) as one
    Kernel over numpy arrays (element i: kernel i), so that the roofline times them all at once (a calibration fit)."""
    import numpy as np

    first = kernels[0]
    # Each distinct kernel object's values are read once (kept_kernels gives equal calls one object: a third of a
    # calibration table's kernels repeat), then taken for each of its places.
    seen: dict = {}
    where = [seen.setdefault(id(k), len(seen)) for k in kernels]
    distinct = list({id(k): k for k in kernels}.values())
    at = np.array(where, dtype=np.intp)
    costs = np.array([_cost_values(k.cost) for k in distinct], dtype=float).reshape(len(distinct),
                                                                                  len(_COST_FIELDS))[at]
    cost = Cost(**{f: costs[:, j].copy() for j, f in enumerate(_COST_FIELDS)})
    given = _shape_values(first)
    numeric = [j for j, v in enumerate(given) if not _discrete(v)]   # (the group's kernels give the same fields)
    shape = {f: v for f, v in zip(KERNEL_SHAPE_FIELDS, given)}
    if numeric:   # each numeric field's values as floats (as numpy makes them), a column of one array
        pick = operator.itemgetter(*numeric)
        values = np.array([pick(_shape_values(k)) for k in distinct], dtype=float).reshape(len(distinct),
                                                                                           len(numeric))[at]
        shape.update({KERNEL_SHAPE_FIELDS[j]: values[:, i].copy() for i, j in enumerate(numeric)})
    return Kernel(first.family, cost, **shape)


def concatenated(parts: list, order) -> Kernel:
    """One Kernel whose numeric fields are the parts' (count, Kernel) fields as float64 columns (a number repeated
    count times), concatenated and taken in `order`; its yes/no and None fields those of the first part: stacked()'s
    Kernel where the parts are kernels over columns (a calibration fit's rows built a column at a time)."""
    import numpy as np

    first = parts[0][1]
    numeric = [f for f in KERNEL_SHAPE_FIELDS if not _discrete(getattr(first, f))]
    blocks = []
    for n, k in parts:
        block = np.empty((len(_COST_FIELDS) + len(numeric), n))
        for j, v in enumerate((*_cost_values(k.cost), *(getattr(k, f) for f in numeric))):
            block[j] = v   # (an int64 column or a Python int made a float64 as np.array(..., dtype=float) makes it)
        blocks.append(block)
    block = np.concatenate(blocks, axis=1)[:, order] if len(blocks) > 1 else blocks[0][:, order]
    cost = Cost(**{f: block[j] for j, f in enumerate(_COST_FIELDS)})
    shape = {f: getattr(first, f) for f in KERNEL_SHAPE_FIELDS}
    shape.update({f: block[len(_COST_FIELDS) + j] for j, f in enumerate(numeric)})
    return Kernel(first.family, cost, **shape)


def _discrete(value) -> bool:
    return value is None or isinstance(value, bool)


def group_key(k: Kernel) -> tuple:
    """What kernels stacked into one must share: their family, which shape fields they give, and each yes/no field."""
    return (k.family, *[v if v.__class__ is bool else v is None for v in _shape_values(k)])


# A Kernel's fields other than its family and cost: how its work spreads (numbers, arrays or symbols, or None).
KERNEL_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(Kernel) if f.name not in ("family", "cost"))
_shape_values = operator.attrgetter(*KERNEL_SHAPE_FIELDS)   # a Kernel's shape fields, in order, as one tuple
_cost_values = operator.attrgetter(*_COST_FIELDS)            # a Cost's fields, in order


# ---------------------------------------------------------------- kernels made once per set of plain arguments

_PLAIN_ARGS = frozenset((int, str, bool, type(None)))
KERNELS_KEPT = 4096   # per constructor: past it, its kept kernels are dropped and made again as asked


def _plain_key(args: tuple, kwargs: dict):
    """A key of a call's arguments where every one is a plain number, string, yes/no or None, each with its type (1 is
    not 1.0, nor True; _plain_value_key); None where one is not (an array, a symbol, a tuple or dict: those go to
    _array_call) or is a float that equal numbers would not stand for bit for bit (-0.0, nan)."""
    # (the values and their types side by side: equal keys are equal values of the same types, as a tuple of each
    # value's _plain_value_key would be, made without a call per value)
    values = (*args, *kwargs.values()) if kwargs else args
    types = tuple(map(type, values))
    if not _KEY_TYPES.issuperset(types):
        return None
    if float in types and not all(map(_stands_for_itself, (v for v in values if type(v) is float))):
        return None
    return (values, types, tuple(kwargs)) if kwargs else (values, types)


_KEY_TYPES = _PLAIN_ARGS | {float}


def _stands_for_itself(v: float) -> bool:
    """A float that the numbers equal to it stand for bit for bit: not a nan, not -0.0."""
    return v == v and not (v == 0 and math.copysign(1.0, v) < 0)


def kept_kernels(fn):
    """Decorator for a kernel constructor, a pure function of its arguments returning frozen Kernels: a call with the
    same plain arguments (_plain_key) as an earlier one takes the Kernel that call made (a step graph makes the same
    GEMMs, quantisations and norms for layer after layer, step after step); a call whose arguments are plain or small
    numpy arrays (a grid's batch column: _array_call_key) takes the Kernel an earlier call with the same arguments, bit
    for bit, made since forget_array_kernels (the layouts of one rack's grid sweep make their dense GEMMs, norms and
    quantisations over the same token column: 55 distinct calls of 235); symbols make their own."""
    made: dict = {}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        key = _plain_key(args, kwargs)
        if key is None:
            return _array_call(fn, args, kwargs)
        hit = made.get(key)
        if hit is None:
            if len(made) >= KERNELS_KEPT:
                made.clear()
            hit = made[key] = fn(*args, **kwargs)
        return hit

    call.forget = made.clear
    return call


# Kernels made by kept_kernels' constructors from arguments among which are numpy arrays of at most ARRAY_KEY_ELEMENTS
# elements: {(constructor, _array_call_key, mathops._HELD_ROWS): [(the arrays' bytes, Kernel)]}, while they and their
# kernels' arrays hold at most ARRAY_KERNELS_BYTES (a grid sweep's graphs over 1,024 batches: 55 kernels, about 2 MB),
# until forget_array_kernels (step.grid.forget_graphs).
_ARRAY_KERNELS: dict = {}
_ARRAY_KERNELS_BYTES = [0]
ARRAY_KERNELS_BYTES = 8 * 2**20
ARRAY_KEY_ELEMENTS = 1 << 14


def forget_array_kernels() -> None:
    """Drop the kernels kept for calls with array arguments."""
    _ARRAY_KERNELS.clear()
    _ARRAY_KERNELS_BYTES[0] = 0


def _array_call(fn, args: tuple, kwargs: dict):
    """fn(*args, **kwargs), or the Kernel an earlier call of fn made from the same arguments, bit for bit (numbers as
    _plain_key keys them, numpy arrays by their type, shape and bytes)."""
    key, arrays = _array_call_key(args, kwargs)
    if key is None:
        return fn(*args, **kwargs)
    blobs = [a.tobytes() for a in arrays]
    key = (fn, key, mathops._HELD_ROWS)   # (inside mathops.held_roundings an array's ceil and floor differ: its own)
    bucket = _ARRAY_KERNELS.setdefault(key, [])
    for seen, kernel in bucket:
        if seen == blobs:
            return kernel
    kernel = fn(*args, **kwargs)
    size = sum(map(len, blobs)) + sum(map(_kernel_nbytes, kernel if type(kernel) is tuple else (kernel,)))
    if _ARRAY_KERNELS_BYTES[0] + size > ARRAY_KERNELS_BYTES:
        forget_array_kernels()
        bucket = _ARRAY_KERNELS.setdefault(key, [])
    bucket.append((blobs, kernel))
    _ARRAY_KERNELS_BYTES[0] += size
    return kernel


def _kernel_nbytes(k) -> int:
    """Bytes of the numpy values a Kernel holds (its cost and shape fields); 0 for anything else (a name)."""
    if type(k) is not Kernel:
        return 0
    return sum(v.nbytes for v in (*k.cost.__dict__.values(), *_shape_values(k)) if type(v).__module__ == "numpy")


def _array_call_key(args: tuple, kwargs: dict):
    """(key, arrays) of a call whose arguments are plain (as _plain_key takes them) or numpy arrays (exactly
    numpy.ndarray, of numbers, at most ARRAY_KEY_ELEMENTS elements): the key holds each array's shape, type and first
    and last element, `arrays` the arrays, whose bytes tell equal calls apart. (None, None) for any other call."""
    key, arrays = [], []
    for v in (*args, *kwargs.values()):
        t = type(v)
        if t.__name__ == "ndarray" and t.__module__ == "numpy":
            if v.dtype.kind not in "fiub" or not 0 < v.size <= ARRAY_KEY_ELEMENTS:
                return None, None
            key.append((v.shape, v.dtype.str, v.item(0), v.item(-1)))
            arrays.append(v)
            continue
        plain = _plain_value_key(v)
        if plain is None:
            return None, None
        key.append(plain)
    return (tuple(key), tuple(kwargs)), arrays


def _plain_value_key(v):
    """_plain_key's key of one value, with tuples of such values and dicts of them (a stack's all-reduce lists, a
    point's symbol values) as tuples of their keys; None for anything else."""
    t = type(v)
    if t is float:
        return (t, v) if _stands_for_itself(v) else None
    if t in _PLAIN_ARGS:
        return (t, v)
    if t is tuple or t is dict:
        keys = tuple(_plain_value_key(x) for x in (v if t is tuple else (*v.keys(), *v.values())))
        return None if None in keys else (t, keys)
    return None
