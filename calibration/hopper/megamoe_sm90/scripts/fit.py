#!/usr/bin/env python3
"""Fit the SM90 Mega MoE's kineto time at 1-8 tokens on one GPU as a fixed part plus a stream over the experts touched.

usage: python3 fit.py RAW_CSV [RAW_CSV ...]

Per model (and both together, in bytes): time = a + b x weight_bytes and time = a + b x experts_touched over every ok
case with tokens <= 8 (the token sweep's random routings and the chosen-expert routings; checked or not), least squares; prints a, b,
the rate 1/b, and each row's residual. Standard library only."""
import csv
import sys


def lsq(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def main(paths):
    # every timed case: the swapAB path's multi-expert cases failed the check (README) but were timed all the same
    rows = [r for p in paths for r in csv.DictReader(open(p))
            if r['status'] in ('ok', 'check_failed') and int(r['tokens']) <= 8]
    groups = {}
    for r in rows:
        groups.setdefault(r['model'], []).append(r)
    groups['both'] = rows
    for name, rs in groups.items():
        t = [float(r['kineto_us']) for r in rs]
        for key, scale, unit in (('weight_bytes', 1e6, 'MB'), ('experts_touched', 1, 'expert')):
            if name == 'both' and key == 'experts_touched':
                continue
            x = [float(r[key]) / scale for r in rs]
            a, b = lsq(x, t)
            res = [ti - (a + b * xi) for xi, ti in zip(x, t)]
            rms = (sum(e * e for e in res) / len(res)) ** 0.5
            rate = f', {1 / b:.2f} TB/s' if key == 'weight_bytes' else ''
            print(f'{name:9s} t = {a:7.2f} us + {b:.4f} us/{unit} x {key}  ({len(rs)} rows{rate}; '
                  f'rms residual {rms:.2f} us, worst {max(res, key=abs):+.2f} us)')
            if key == 'weight_bytes' and name != 'both':
                for r, e in sorted(zip(rs, res), key=lambda z: float(z[0]['weight_bytes'])):
                    print(f"    {r['case_id']:28s} touched {r['experts_touched']:>3} pairs {r['pairs']:>3} "
                          f"t {float(r['kineto_us']):8.2f} us  residual {e:+7.2f} us ({e / float(r['kineto_us']):+.1%}) {r['status']}")


if __name__ == '__main__':
    main(sys.argv[1:])
