"""What-if (not rubinperf code): trtllm-bench's finite dataset -- N requests sent at once, fixed ISL/OSL, in-flight
batching, whole prompts (no chunking) inside a max_num_tokens budget, running batch capped by max batch and the KV
cache (GUARANTEED_NO_EVICT: ISL+OSL reserved per request) -- stepped one iteration at a time with rubinperf's own
step times, against the validate row's steady-state closed loop.
Runs in rubinperf's venv (imports rubinperf; changes nothing in it):
    PYTHONPATH=. python scripts/gpt_oss_waves_whatif.py [--kv-window full] [--cap N] [--pad]
        [--aic-moe balanced|power_law_1.2] [--attn-scale X] [--only ID-PART]
The rows: validation/published.toml's trtllm-gpt-oss-* points. Every option is a what-if:
--kv-window full  window layers hold the whole sequence in the KV cache (attention still reads 128 tokens)
--cap N           the running-batch limit instead of rubinperf's KV capacity
--pad             decode-only steps padded to the page's CUDA-graph sizes (non-attention ops at the padded batch)
--aic-moe         the H200 routed experts replaced by aiconfigurator 0.12.0's measured W4A16 MXFP4 rows
--attn-scale      the attention ops multiplied (aiconfigurator / rubinperf at the row's batch: H200 1.45, Blackwell 1.6)"""
import argparse, dataclasses, math, sys
import numpy as np
from rubinperf.analysis.validate import load_points, _sets
from rubinperf.specs.select import load_specs
from rubinperf.specs.layout import parse_layout
from rubinperf.specs.workload import load_workload
from rubinperf.step.capacity import capacity
from rubinperf.step.point import make_point
from rubinperf.step.timing import step

ap = argparse.ArgumentParser()
ap.add_argument("--points", default="validation/published.toml")
ap.add_argument("--kv-window", default="window", help="window: window layers hold 128 tokens; full: the whole sequence")
ap.add_argument("--cap", type=int, default=0, help="override the KV-limited batch")
ap.add_argument("--set", action="append", default=[])
ap.add_argument("--aic-moe", default="", help="H200 only: routed experts from aiconfigurator 0.12.0's H200 W4A16 MXFP4 rows (balanced|power_law_1.2)")
ap.add_argument("--attn-scale", type=float, default=1.0, help="multiply the attention ops' time")
ap.add_argument("--only", default="")
ap.add_argument("--pad", action="store_true", help="CUDA-graph padding of decode-only steps to the page's captured sizes")
a = ap.parse_args()
# aiconfigurator 0.12.0 systems/data/h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, w4a16_mxfp4, 128 experts, top-4,
# hidden 2880, inter 2880, TP1 EP1: ms per MoE layer at each token count
TOK = [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
       8192, 12288, 16384]
AIC = {"balanced": [0.0787, 0.0926, 0.1247, 0.2042, 0.3417, 0.6140, 0.6170, 0.6208, 0.6174, 0.6159, 0.6188, 0.6200,
                    0.6196, 0.6234, 0.7221, 0.7399, 0.7410, 0.9950, 1.0007, 1.0462, 1.0730, 2.1536, 2.2257, 4.1753,
                    4.3015, 6.4154, 8.6088],
       "power_law_1.2": [0.0773, 0.0915, 0.1237, 0.1932, 0.2624, 0.3161, 0.4501, 0.4717, 0.4840, 0.5050, 0.5391, 0.5751,
                         0.6112, 0.6800, 0.7424, 0.7855, 0.8504, 1.1359, 1.2115, 1.4782, 1.7314, 3.2085, 3.7181, 4.7975,
                         5.7635, 7.8535, 10.0100]}
for p in load_points(a.points):
    if not p.id.startswith("trtllm-gpt-oss") or (a.only and a.only not in p.id):
        continue
    sets = list(p.set) + _sets(p.run_with) + a.set
    m, (hw,) = load_specs(p.model, [p.hardware], sets=sets, stacks=[p.stack])
    lay = parse_layout(p.layout)
    reserve = load_workload(p.workload or "chat-8k1k").runtime_reserve_bytes
    L = p.input_tokens + p.output_tokens
    cap = capacity(m, hw, lay, "decode", context_tokens=L, tokens_per_request=1, logits_per_request=1, reserve_bytes=reserve)
    per_req = cap.bytes_per_request
    if a.kv_window == "full":   # every layer keeps the whole sequence (no VSWA in the KV manager)
        m2, _ = load_specs(p.model, [p.hardware], sets=sets + [f"model.sliding_window_tokens={L}"], stacks=[p.stack])
        per_req = capacity(m2, hw, lay, "decode", context_tokens=L, tokens_per_request=1, logits_per_request=1,
                           reserve_bytes=reserve).bytes_per_request
    fits = math.floor(max(0.0, cap.free_bytes) * (p.kv_memory_fraction or 1.0) / per_req)
    B_cap = min(int(p.batch), fits) if not a.cap else a.cap
    n = int(p.concurrency) // lay.dp   # requests per attention-DP rank (split evenly)
    budget = int(hw.max_num_batched_tokens)
    ctx = p.input_tokens + p.output_tokens / 2
    point = make_point(m, hw, lay, phase="decode", batch=1, context=ctx, draft_tokens=0, acceptance=1.0)
    SIZES = [s_ for s_ in [1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192] if s_ <= int(p.batch)]
    import bisect
    def padded(b):
        i = bisect.bisect_left(SIZES, b)
        return SIZES[i] if (a.pad and i < len(SIZES)) else b
    top = max(B_cap, padded(B_cap))
    grid = np.unique(np.concatenate([np.geomspace(1, top, 96).round(), np.arange(16, top + 1, 16), [B_cap, top]]))
    Bs = np.arange(1, top + 1, dtype=float)
    def part(res, name):
        return sum(np.broadcast_to(np.asarray(o.expected_s, float), grid.shape) for o in res.ops if o.op.name.startswith(name))

    def interp(res, k=0):
        tot = np.broadcast_to(np.asarray(res.expected_s, float), grid.shape).copy()
        tot = tot + (a.attn_scale - 1) * part(res, "attention")
        if a.aic_moe:
            tokens = grid + k * p.input_tokens
            tot = tot - part(res, "routed experts") + m.num_layers * 1e-3 * np.interp(tokens, TOK, AIC[a.aic_moe])
        return np.interp(Bs, grid, tot)
    r0 = step(m, hw, lay, dataclasses.replace(point, batch=grid))
    table = {0: interp(r0)}
    attn0 = np.interp(Bs, grid, a.attn_scale * part(r0, "attention"))
    kmax = max(1, (budget - 1) // p.input_tokens + 1)
    for k in range(1, kmax + 1):
        r = step(m, hw, lay, dataclasses.replace(point, batch=grid, chunk_tokens=k * p.input_tokens,
                                                 chunk_seqs=float(k), chunk_context=0.0))
        table[k] = np.maximum(interp(r, k), table[0])
    pf_only = {k: float(table[k][0]) for k in range(1, kmax + 1)}   # a prompt step with one decode row: close enough

    def t(b, k):
        if b == 0:
            return pf_only[k] if k else 0.0
        if k == 0 and padded(b) != b:
            pb = padded(b)
            return float(table[0][pb - 1] - attn0[pb - 1] + attn0[b - 1])
        return float(table[k][b - 1])

    pending, running, T, steps, out, busy = n, [], 0.0, 0, 0, []
    while pending > 0 or running:
        b = len(running)
        k = 0
        while k < pending and b + k < B_cap and b + (k + 1) * p.input_tokens <= max(budget, p.input_tokens + b):
            k += 1
        if b == 0 and k == 0:
            raise SystemExit(f'stuck: pending {pending} B_cap {B_cap} budget {budget}')
        T += t(b, k)
        steps += 1
        busy.append(b)
        running = [r - 1 for r in running if r > 1] + [p.output_tokens - 1] * k   # context step emits token 1
        out += b + k
        pending -= k
    tok = n * p.output_tokens
    tput = tok / T / lay.tp if lay.kind != "dep" else tok / T
    print(f"{p.id}: batch cap {B_cap} (KV fits {fits}, {a.kv_window} window KV), {n} req/rank, {steps} steps, "
          f"{T:.1f} s, mean running batch {np.mean(busy):.0f}: {tput:,.0f} tok/s/GPU -> ratio {tput / p.published:.2f}"
          f" (published {p.published:,.0f}; decode step at cap {1e3 * t(B_cap, 0):.1f} ms)")
