#!/usr/bin/env python3
"""Per-role stall split of a warp-specialized kernel from ncu's source page (CSV).

Usage: tools/ncu_roles.py ncu-src-K-csv.log [ROLE,ROLE,...]

The CSV is `ncu --import R.ncu-rep --page source --csv --print-source sass` of a report taken
with `--section SourceCounters --section WarpStateStats` (scripts/calls/lib.sh `ncu_ssd`,
`ncu_src_moe`). Each role's code ends with an unconditional EXIT, so the SASS is cut there
into regions, named in order by ROLE (default r0, r1, ...). For each region: its stall samples,
the top stall reasons, and the barrier waits attributed to the BAR.SYNC / SYNCS instruction
they sit behind (the named barrier's id), as a share of all barrier-stall samples.
Session 37 read SSD v5 / v6 this way (gpu/NOTES.md): for ssd5 / ssd6 / ssd7 the order is
row warpgroup 1, row warpgroup 0, state.
"""
import collections
import csv
import sys


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    rows = list(csv.reader(open(sys.argv[1])))
    head = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    h, data = rows[head], rows[head + 1:]
    ix = {n: i for i, n in enumerate(h)}
    stall = [n for n in h if n.startswith("stall_") and "Not Issued" not in n]
    base = int(data[0][ix["Address"]], 16)
    ins = [(int(r[ix["Address"]], 16) - base, r[ix["Source"]].strip(), r) for r in data]
    cuts = [off for off, src, _ in ins if src.split(";")[0].strip() == "EXIT"]
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else []
    name = lambda k: names[k] if k < len(names) else f"r{k}"
    role_of = lambda off: sum(off > c for c in cuts)
    agg = collections.defaultdict(collections.Counter)
    bar = collections.Counter()
    last_bar = "-"
    for off, src, r in ins:
        k = role_of(off)
        for n in stall:
            agg[k][n[6:]] += num(r[ix[n]])
        if "BAR." in src or "SYNCS" in src:
            last_bar = src.split(";")[0]
        b = num(r[ix["stall_barrier"]]) if "stall_barrier" in ix else 0.0
        if b:
            bar[(k, last_bar)] += b
    total_bar = sum(bar.values()) or 1.0
    for k in sorted(agg):
        t = sum(agg[k].values())
        if t == 0:
            continue
        top = ", ".join(f"{s} {100 * v / t:.0f}%" for s, v in agg[k].most_common(5))
        print(f"{name(k)}: {int(t)} samples; {top}")
        for (kk, src), v in bar.most_common():
            if kk == k and v / total_bar >= 0.02:
                print(f"    {100 * v / total_bar:5.1f}% of barrier stalls behind {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
