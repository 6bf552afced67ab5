"""Per-request acceptance concentration nu from per-request speculative-decoding data.

Source: SpecDecode-Bench/simulator (github.com/SpecDecode-Bench/simulator @ 2fdccbd, the data of 'Speculative
Decoding: Performance or Illusion?', arXiv 2601.11580): data/llama3.1-8B/combined_{cnn,gsm8k,instructcoder,sharegpt}.jsonl,
EAGLE-3 drafts of Llama-3.1-8B-Instruct profiled in vLLM on H100 (the repository's `eagle3` proposer reads `acc_eagle`).
Each request holds, for every generated position, the tokens a verify step starting there emits (accepted drafts + the
bonus token) with unbounded drafting; the simulator's step emits min(that, k + 1).

    python scripts/acceptance_concentration.py --from-jsonl DIR    # rebuild calibration/acceptance/*.csv from the data
    python scripts/acceptance_concentration.py                      # nu per dataset and pooled, from the committed CSV

Per request i at k drafts: a_i = tokens / verify steps, f_i = (a_i - 1) / k, and the variance of one step's tokens
s_i^2. The Beta law of rubinperf/serving/interactivity.py is the law of a request's long-run accepted share, so the
sampling noise of a finite request, E[s_i^2 / n_i] / k^2, is taken off the variance of f_i between requests (method of
moments): nu = mu (1 - mu) / (var(f) - noise) - 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

DATASETS = ("cnn", "gsm8k", "instructcoder", "sharegpt")
CSV = Path(__file__).resolve().parent.parent / "calibration" / "acceptance" / "specdecode_bench_llama31_8b_eagle3.csv"
MIN_STEPS = 20   # requests with fewer verify steps are left out (their mean is mostly noise)


def steps_of(acc_len: list[int], k: int) -> list[int]:
    """Tokens each verify step emits over one request at k drafts: min(acc_len[position], k + 1), then move on."""
    pos, out = 0, []
    while pos < len(acc_len):
        a = min(acc_len[pos], k + 1)
        out.append(a)
        pos += a
    return out


def rows_from_jsonl(folder: Path, k: int) -> list[dict]:
    rows = []
    for d in DATASETS:
        for line in (folder / f"combined_{d}.jsonl").read_text().splitlines():
            r = json.loads(line)
            s = steps_of(r["acc_eagle"]["acc_len"], k)
            n, t = len(s), sum(s)
            rows.append({"dataset": d, "id": r["id"], "k": k, "steps": n, "tokens": t,
                         "sum_sq_tokens": sum(a * a for a in s)})
    return rows


def concentration(rows: list[dict]) -> tuple[float, float, int]:
    """(nu, mean tokens per step, requests) of these requests (MIN_STEPS verify steps or more)."""
    fs, noise = [], []
    for r in rows:
        n, t, sq, k = int(r["steps"]), int(r["tokens"]), int(r["sum_sq_tokens"]), int(r["k"])
        if n < MIN_STEPS:
            continue
        a = t / n
        fs.append((a - 1) / k)
        noise.append((sq / n - a * a) / n / k ** 2)
    mu = statistics.mean(fs)
    between = statistics.pvariance(fs) - statistics.mean(noise)
    return mu * (1 - mu) / between - 1, 1 + int(rows[0]["k"]) * mu, len(fs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-jsonl", type=Path, help="folder of the combined_*.jsonl files (rebuilds the CSV)")
    ap.add_argument("-k", type=int, default=5, help="drafted tokens per verify step (5: DSpark's)")
    args = ap.parse_args()
    if args.from_jsonl:
        rows = rows_from_jsonl(args.from_jsonl, args.k)
        with CSV.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    rows = [r for r in csv.DictReader(CSV.open())]
    for d in DATASETS:
        nu, a, n = concentration([r for r in rows if r["dataset"] == d])
        print(f"{d:14s} {n:4d} requests  mean {a:.3f} tokens/step  nu {nu:6.1f}")
    nu, a, n = concentration(rows)
    print(f"{'pooled':14s} {n:4d} requests  mean {a:.3f} tokens/step  nu {nu:6.1f}")


if __name__ == "__main__":
    main()
