"""One call of DeepGEMM's SM100 Mega MoE at one token per rank (DeepSeek-V4-Flash, EP8, B200), stage by stage on each
SM, as its code orders the work (github.com/deepseek-ai/DeepGEMM @ 54e22612409371d6364144b69086735beb54e98b):

- the busiest rank's experts, one expert wave (all experts at once below one token per expert,
  heuristics/mega_moe.hpp lines 158-160); 32 linear-1 blocks (2 x 2048 / 128 rows, 4096 / 256 = 16 K steps) and 32
  linear-2 blocks (4096 / 128, 2048 / 256 = 8 K steps) an expert, handed out as one list, every kNumSMs-th block to an
  SM (scheduler/mega_moe.cuh lines 150-182);
- one ring of `stages` stages an SM across all its blocks (impls/sm100_fp8_fp4_mega_moe.cuh lines 295-302); the weight
  TMA warp issues a stage's load as soon as the stage is free (line 742), from the expert counts on (t = 0,
  scheduler lines 185-204), each landing `latency` later (x a uniform jitter);
- a stage is consumed (the MMA, `mma_s`) once its weights have landed, its block's tokens are there and the previous
  stage is consumed; linear-1 tokens are there at `tokens_s` (the NVLink barrier before the pulls, the pulls, the
  release and the A load); a linear-2 block's tokens at the last of its expert's linear-1 blocks' ends plus `handoff_s`
  (their epilogue: the top-k weight load, SwiGLU, the TMA store and its wait, the release; the acquire poll and the A
  load: kernel lines 682-691, 944-1131).

Prints the last MMA's time with and without the linear-1 -> linear-2 hand-off, by the busiest rank's expert count:
the hand-off shows where the list puts a linear-2 block right behind its expert's linear-1 blocks that run in their
second round on other SMs (docs/deepseek-kernels.md, Mega MoE). Standard library only; deterministic.
"""

from __future__ import annotations

import random

SMS, L1_BLOCKS, L1_STEPS, L2_STEPS = 148, 32, 16, 8


def last_mma(experts: int, stages: int = 5, latency: float = 2.9, tokens_s: float = 8.0, handoff_s: float = 2.5,
             mma_s: float = 0.02, jitter: float = 0.0, seed: int = 1) -> float:
    rnd = random.Random(seed)
    blocks = [("l1", e, L1_STEPS) for e in range(experts) for _ in range(L1_BLOCKS)]
    blocks += [("l2", e, L2_STEPS) for e in range(experts) for _ in range(L1_BLOCKS)]
    per_sm = [blocks[s::SMS] for s in range(SMS)]   # an SM's blocks: every SMS-th of the list, linear 1's first
    rings, l1_end = [], {}

    def run(ring, free, done, todo, ready):
        for phase, expert, steps in todo:
            for _ in range(steps):
                slot = ring % stages
                land = free[slot] + latency * (1 + jitter * (rnd.random() - 0.5))
                done = max(land, ready(expert), done) + mma_s
                free[slot], ring = done, ring + 1
            if phase == "l1":
                l1_end[expert] = max(l1_end.get(expert, 0.0), done)
        return ring, done

    for todo in per_sm:   # linear-1 blocks first: they wait on nothing but the tokens
        free = [0.0] * stages
        ring, done = run(0, free, 0.0, [b for b in todo if b[0] == "l1"], lambda e: tokens_s)
        rings.append((ring, free, done))
    ends = []
    for todo, (ring, free, done) in zip(per_sm, rings):
        ends.append(run(ring, free, done, [b for b in todo if b[0] == "l2"], lambda e: l1_end[e] + handoff_s)[1])
    return max(ends)


if __name__ == "__main__":
    print("busiest-rank experts | last MMA (us): no hand-off, with 2.5 us | in rounds (jitter 0) | jitter +-25%")
    for experts in range(5, 12):
        row = []
        for jitter in (0.0, 0.5):
            a, b = last_mma(experts, handoff_s=0.0, jitter=jitter), last_mma(experts, jitter=jitter)
            row.append(f"{a:5.1f} {b:5.1f} (+{b - a:.1f})")
        print(f"{experts:20d} | " + " | ".join(row))
