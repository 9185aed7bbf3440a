#!/usr/bin/env python3
"""Summarise an `ncu --csv --page details` export (e.g. `--set full`), one block per kernel
launch: the metrics named on the command line (default: the ones session 11 read to find the
slot GEMV's limits) and, with --rules, ncu's rule texts (bottleneck, coalescing, occupancy).

    python3 tools/ncu_details.py ncu.csv [--ids 0,1] [--metrics 'Duration|Issue Slots Busy'] [--rules]

The export starts with ncu's own warning lines; the table begins at the `"ID"` header. Metric
rows have fewer columns than rule rows.
"""
import argparse
import csv
import sys

DEFAULT = (
    "Duration|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|"
    "Executed Instructions|Registers Per Thread|Achieved Active Warps Per SM|"
    "Eligible Warps Per Scheduler|No Eligible|Mem Pipes Busy|L1/TEX Hit Rate|"
    "Theoretical Occupancy|Block Limit Registers|Block Limit Shared Mem"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--ids", help="launch IDs to show (comma-separated); default all")
    ap.add_argument("--metrics", default=DEFAULT, help="metric names separated by |; 'all' for every one")
    ap.add_argument("--rules", action="store_true", help="also print ncu's rule texts")
    a = ap.parse_args()
    try:
        lines = open(a.csv, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        print(f"ncu_details: cannot read {a.csv}: {e}", file=sys.stderr)
        return 2
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(f"ncu_details: {a.csv} has no '\"ID\"' header: not an `ncu --csv --page details` export", file=sys.stderr)
        return 2
    rows = list(csv.reader(lines[start:]))
    hdr = {h: i for i, h in enumerate(rows[0])}
    need = ["ID", "Kernel Name", "Grid Size", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
    missing = [n for n in need if n not in hdr]
    if missing:
        print(f"ncu_details: columns {missing} missing in {a.csv}", file=sys.stderr)
        return 2
    ids = set(a.ids.split(",")) if a.ids else None
    want = None if a.metrics == "all" else set(a.metrics.split("|"))
    last = None
    for r in rows[1:]:
        if len(r) <= hdr["Metric Value"] or (ids is not None and r[hdr["ID"]] not in ids):
            continue
        key = (r[hdr["ID"]], r[hdr["Kernel Name"]], r[hdr["Grid Size"]])
        if key != last:
            print(f"== launch {key[0]}: {key[1]} grid {key[2]}")
            last = key
        m = r[hdr["Metric Name"]]
        if m and (want is None or m in want):
            print(f"   {m} = {r[hdr['Metric Value']]} {r[hdr['Metric Unit']]}".rstrip())
        rule = r[hdr["Rule Name"]] if "Rule Name" in hdr and len(r) > hdr["Rule Name"] else ""
        if a.rules and not m and rule:
            desc = r[hdr["Rule Description"]] if len(r) > hdr["Rule Description"] else ""
            print(f"   [{rule}] {desc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
