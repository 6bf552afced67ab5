"""Collectives over the NVLink domain, and across domains over the scale-out NIC.

Model: time = collective floor + hops x per-message latency + bytes / link bandwidth.
A group wider than one tray pays the cross-tray latency on each hop.

A group of n ranks wider than one NVLink domain of d GPUs (D = n / d domains) splits its
bytes between the NVLink and the NIC (bytes sent per GPU; `gpus_per_domain` None: one domain):
- all-to-all, direct: of a rank's bytes, (d - 1)/n go to its own domain over NVLink and (n - d)/n
  (the remote fraction) over the NIC; hierarchical (DeepEP normal mode): the same NIC bytes, sent
  to the GPU of the same local index in each remote domain, which forwards (d - 1)/d of them over
  NVLink.
- all-reduce, hierarchical (reduce-scatter in the domain, all-reduce of each 1/d shard across the
  domains, all-gather in the domain): NVLink 2(d - 1)/d x bytes, NIC 2(D - 1)/D x bytes / d.
- all-gather, hierarchical (across domains among GPUs of one local index, then in the domain):
  NIC (D - 1)/n x the gathered bytes, NVLink (d - 1)/d x them; together (n - 1)/n, as in one domain.
Latency rounds across domains: one RDMA message per round, plus one NVLink message per round of
the in-domain steps of a hierarchical collective.
"""

from __future__ import annotations

from rubinperf.kernels.cost import Cost, Kernel, kept_kernels
from rubinperf.kernels.moe import _gt, spans_domains
from rubinperf.specs.precision import PRECISIONS
from rubinperf.specs.stack import ALLREDUCE_ALGORITHMS  # noqa: F401  (the names all_reduce_as knows)


def all_to_all(bytes_per_rank, ranks, gpus_per_tray=None, hops=1, gpus_per_domain=None, hierarchical=False) -> Kernel:
    """Each rank sends (n-1)/n of its `bytes_per_rank` to the others in one round (EP dispatch/combine)."""
    if not spans_domains(ranks, gpus_per_domain):
        return _collective(bytes_per_rank * (ranks - 1) / ranks, hops, ranks, gpus_per_tray)
    d = gpus_per_domain
    nic = bytes_per_rank * (ranks - d) / ranks
    nvlink = bytes_per_rank * (d - 1) / ranks + (nic * (d - 1) / d if hierarchical else 0.0)
    return _across(nvlink, nic, hops, hops if hierarchical else 0)


def all_reduce(nbytes, ranks, gpus_per_tray=None, gpus_per_domain=None) -> Kernel:
    """Reduce-scatter then all-gather: 2(n-1)/n x bytes sent per rank, two latency rounds."""
    if not spans_domains(ranks, gpus_per_domain):
        return _collective(2 * nbytes * (ranks - 1) / ranks, 2, ranks, gpus_per_tray)
    d = gpus_per_domain
    domains = ranks / d
    return _across(2 * nbytes * (d - 1) / d, 2 * nbytes * (domains - 1) / domains / d, 2, 2)


def all_reduce_one_shot(nbytes, ranks, gpus_per_tray=None, fused=True) -> Kernel:
    """One-shot all-reduce: each rank reads (or is sent) the (n-1) other partials whole and sums them, in one latency
    round. Bytes: the (n-1) x bytes a rank receives (the busier direction). `fused`: run from the preceding GEMM's
    epilogue (Lamport mailbox over NVLink multicast), with no kernel launch and no collective set-up of its own;
    false: a collective kernel of its own (TensorRT-LLM's ONESHOT, vLLM's and SGLang's one-stage custom all-reduce)."""
    cross = 1 if (gpus_per_tray is not None and _gt(ranks, gpus_per_tray)) else 0
    return Kernel("collective", Cost(nvlink_bytes=nbytes * (ranks - 1), nvlink_hops=1, cross_tray_hops=cross,
                                     collectives=0 if fused else 1), dependent_loads=0)


def all_reduce_ring(nbytes, ranks, gpus_per_tray=None) -> Kernel:
    """NCCL's ring all-reduce: the reduce-scatter + all-gather bytes, 2(n-1)/n x bytes sent per rank, over 2(n-1)
    serial steps of one message latency each (a pipelined ring pays each step's latency once)."""
    return _collective(2 * nbytes * (ranks - 1) / ranks, 2 * (ranks - 1), ranks, gpus_per_tray)


def all_reduce_multicast(nbytes, ranks, gpus_per_tray=None) -> Kernel:
    """All-reduce through NVSwitch multicast (NCCL's NVLS, PyTorch's symmetric-memory multimem all-reduce): each rank
    pulls its 1/n shard reduced by the switch (multimem.ld_reduce: the switch reads that shard of every rank) and
    multicasts the sum (multimem.st): a rank sends bytes (its whole partial, shard by shard) + bytes/n and receives
    bytes/n + bytes, (n+1)/n x bytes each way against the two-shot's 2(n-1)/n; two latency rounds."""
    return _collective(nbytes * (ranks + 1) / ranks, 2, ranks, gpus_per_tray)


NEEDS_MULTICAST = ("multicast",)


def switch_row(switch_bytes, algorithms, ranks=None, switch_ranks=()) -> tuple:
    """The switch points that hold for a TP all-reduce over `ranks` GPUs: the row of allreduce_switch_bytes of the
    first allreduce_switch_ranks entry >= ranks (past the last, the last); all of them where there are no rows."""
    if not switch_ranks:
        return tuple(switch_bytes)
    per = len(algorithms) - 1
    i = next((j for j, r in enumerate(switch_ranks) if ranks is not None and _ge(r, ranks)), len(switch_ranks) - 1)
    return tuple(switch_bytes[i * per:(i + 1) * per])


def _ge(a, b) -> bool:
    try:
        return bool(a >= b)
    except TypeError:   # a symbolic rank count: the last row
        return False


def all_reduce_algorithm(nbytes, algorithms, switch_bytes, multicast: bool = True):
    """The algorithm a library picks for a message of `nbytes`: algorithms[i] for switch_bytes[i-1] <= nbytes <
    switch_bytes[i] (the stack's [collective] lists, sizes ascending); where the hardware has no NVLink multicast, a
    multicast algorithm falls to the next one in the list. A number gives a name; a numpy array gives an array of
    indices into `algorithms`."""
    allowed = [a for a in algorithms if multicast or a not in NEEDS_MULTICAST]
    if type(nbytes).__module__ == "numpy":
        import numpy as np

        idx = np.searchsorted(np.asarray(switch_bytes, dtype=float), nbytes, side="right")
        return np.asarray([algorithms.index(_allowed_from(algorithms, i, allowed)) for i in range(len(algorithms))])[idx]
    i = sum(1 for s in switch_bytes if nbytes >= s)
    return _allowed_from(algorithms, i, allowed)


def _allowed_from(algorithms, i, allowed):
    for a in algorithms[i:]:
        if a in allowed:
            return a
    return allowed[-1] if allowed else "ring"


def all_reduce_as(algorithm: str, nbytes, ranks, gpus_per_tray=None, fused_one_shot=False) -> Kernel:
    """The Kernel of one named all-reduce algorithm (ALLREDUCE_ALGORITHMS) in one NVLink domain."""
    if algorithm == "one-shot":
        return all_reduce_one_shot(nbytes, ranks, gpus_per_tray, fused=fused_one_shot)
    if algorithm == "two-shot":
        return all_reduce(nbytes, ranks, gpus_per_tray)
    if algorithm == "multicast":
        return all_reduce_multicast(nbytes, ranks, gpus_per_tray)
    if algorithm == "ring":
        return all_reduce_ring(nbytes, ranks, gpus_per_tray)
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}")


@kept_kernels
def all_reduce_by_size(nbytes, ranks, algorithms, switch_bytes, gpus_per_tray=None, multicast: bool = True,
                       fused_one_shot: bool = False, at: dict | None = None, switch_ranks=()) -> tuple[Kernel, str]:
    """The all-reduce a library runs for a message of `nbytes` (all_reduce_algorithm), and its name. Over a numpy
    array of sizes, each element's algorithm (the Cost's fields chosen element by element; the name lists the
    algorithms used, by size). A symbolic size is evaluated at `at` (symbol name -> number: the values the symbols
    stand for) to choose; without them, the list's last (the large-message algorithm) is taken. `switch_ranks`: the
    TP sizes of switch_bytes' rows (switch_row)."""
    switch_bytes = switch_row(switch_bytes, algorithms, ranks, switch_ranks)
    if type(nbytes).__module__ == "numpy" and getattr(nbytes, "ndim", 0) > 0:
        import numpy as np

        idx = all_reduce_algorithm(nbytes, algorithms, switch_bytes, multicast)
        used = [algorithms[i] for i in np.flatnonzero(np.bincount(np.ravel(idx), minlength=len(algorithms)))]
        if len(used) == 1:
            return all_reduce_as(used[0], nbytes, ranks, gpus_per_tray, fused_one_shot), used[0]
        kernels = [all_reduce_as(a, nbytes, ranks, gpus_per_tray, fused_one_shot).cost for a in algorithms]
        fields = {}
        for name in kernels[0].__dict__:
            given = [getattr(c, name) for c in kernels]
            if all(type(v) in (int, float) and v == given[0] for v in given):   # one number for every algorithm (a
                fields[name] = float(given[0])   # field none of them uses: 0): the value np.choose gives everywhere
                continue
            values = [np.broadcast_to(np.asarray(v, dtype=float), np.shape(nbytes)) for v in given]
            fields[name] = np.choose(idx, values)
        return Kernel("collective", Cost(**fields), dependent_loads=0), "/".join(used)
    if type(nbytes) not in (int, float) and hasattr(type(nbytes), "free_symbols"):
        names = {s.name for s in nbytes.free_symbols}
        if at and names <= set(at):
            value = float(nbytes.xreplace({s: at[s.name] for s in nbytes.free_symbols}))
            name = all_reduce_algorithm(value, algorithms, switch_bytes, multicast)
        else:
            name = algorithms[-1]
    else:
        name = all_reduce_algorithm(float(nbytes), algorithms, switch_bytes, multicast)
    return all_reduce_as(name, nbytes, ranks, gpus_per_tray, fused_one_shot), name


def all_gather(nbytes_out, ranks, gpus_per_tray=None, gpus_per_domain=None) -> Kernel:
    """Each rank receives (n-1)/n of the gathered `nbytes_out`; one latency round."""
    if not spans_domains(ranks, gpus_per_domain):
        return _collective(nbytes_out * (ranks - 1) / ranks, 1, ranks, gpus_per_tray)
    d = gpus_per_domain
    return _across(nbytes_out * (d - 1) / d, nbytes_out * (ranks / d - 1) / ranks, 1, 1)


def reduce_scatter(nbytes_in, ranks, gpus_per_tray=None, gpus_per_domain=None) -> Kernel:
    """Each rank sends (n-1)/n of its `nbytes_in` (partial sums for every rank) and keeps the sum of its 1/n
    share: the bytes and rounds of an all-gather of `nbytes_in`, in the other direction."""
    return all_gather(nbytes_in, ranks, gpus_per_tray, gpus_per_domain)


def ep_all_gather_exchange(tokens, ranks, hidden, dtype: str = "bf16", gpus_per_tray=None,
                           gpus_per_domain=None) -> tuple[Kernel, Kernel]:
    """The EP exchange of an MoE layer done with all-gather and reduce-scatter (vLLM's default all2all backend,
    `allgather_reducescatter`): every rank gathers the hidden states of all ranks' `tokens` (ranks x tokens x
    hidden values), runs its local experts on those routed to them, and a reduce-scatter sums the experts'
    outputs back to each token's rank. Unlike a dispatch, a rank receives every token whether or not its
    experts are picked: the bytes per rank grow with the ranks. Returns the two collectives."""
    nbytes = ranks * tokens * hidden * PRECISIONS[dtype].bytes_per_element
    return (all_gather(nbytes, ranks, gpus_per_tray, gpus_per_domain),
            reduce_scatter(nbytes, ranks, gpus_per_tray, gpus_per_domain))


def _collective(sent_bytes, hops, ranks, gpus_per_tray) -> Kernel:
    cross = hops if (gpus_per_tray is not None and _gt(ranks, gpus_per_tray)) else 0
    return Kernel("collective", Cost(nvlink_bytes=sent_bytes, nvlink_hops=hops, cross_tray_hops=cross, collectives=1),
                  dependent_loads=0)


def _across(nvlink_bytes, nic_bytes, nic_hops, nvlink_hops) -> Kernel:
    return Kernel("collective", Cost(nvlink_bytes=nvlink_bytes, nvlink_hops=nvlink_hops, scale_out_bytes=nic_bytes,
                                     scale_out_hops=nic_hops, collectives=1), dependent_loads=0)
