"""Stall samples of an `ncu --page source --print-source sass --csv` report (ncu_gemv.sh's *_sass.csv, or .csv.gz):
the totals by reason, then the instructions with the most samples.

  python3 experiments/proj/ncu_stalls.py REPORT.csv[.gz] [TOP]
"""

import collections
import csv
import gzip
import sys


def main():
    f, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows = list(csv.reader((gzip.open if f.endswith(".gz") else open)(f, "rt")))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    h = rows[hi]
    data = [r for r in rows[hi + 1:] if len(r) == len(h)]
    ix = {n: i for i, n in enumerate(h)}
    st = [n for n in h if n.startswith("stall_") and "Not Issued" not in n]
    tot = collections.Counter()
    for r in data:
        for n in st:
            tot[n] += int(r[ix[n]] or 0)
    T = sum(tot.values())
    print("samples", T)
    for n, v in tot.most_common(12):
        print(f"{n:28s} {v:8d} {100 * v / T:5.1f}%")
    ops = collections.defaultdict(lambda: [0, 0, 0, 0])  # warp instructions, thread instructions, predicated on, samples
    for r in data:
        w = r[1].split()
        op = (w[1] if w[0].startswith("@") else w[0]).split(".")[0]
        a = ops[op]
        for j, col in enumerate(("Instructions Executed", "Thread Instructions Executed",
                                 "Predicated-On Thread Instructions Executed", "Warp Stall Sampling (All Samples)")):
            a[j] += int(r[ix[col]] or 0)
    n_inst = sum(a[0] for a in ops.values())
    print("--- by opcode: warp instructions, predicated-on fraction of their threads, samples")
    for op, a in sorted(ops.items(), key=lambda x: -x[1][0])[:16]:
        print(f"{op:10s} {a[0]:10d} {100 * a[0] / n_inst:5.1f}%  pred-on {a[2] / max(a[1], 1):.2f}  samples {a[3]}")
    print("--- top instructions")
    samp = [(int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), k, r[1].strip(), {n: int(r[ix[n]] or 0) for n in st})
            for k, r in enumerate(data)]
    for s, k, src, d in sorted(samp, reverse=True)[:top]:
        two = sorted(d.items(), key=lambda x: -x[1])[:2]
        print(f"{k:5d} {s:7d} {100 * s / T:5.1f}% {src[:60]:60s} {two}")


if __name__ == "__main__":
    main()
