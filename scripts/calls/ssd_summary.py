#!/usr/bin/env python3
"""One line per ssd preset of a `duet bench` JSON: the fused kernels' medians (us).
Usage: scripts/calls/ssd_summary.py bench.json"""
import json
import sys


def walk(v, out):
    if isinstance(v, dict):
        if v.get("op") == "ssd_chunk_scan" and "shape" in v:
            out.append(v)
        for x in v.values():
            walk(x, out)
    elif isinstance(v, list):
        for x in v:
            walk(x, out)


try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError, IndexError) as e:
    print(f"ssd_summary: no bench JSON ({e})")
    sys.exit(0)
found = []
walk(doc, found)
for r in found:
    parts = [f"seqlen {r['shape'].get('seqlen')}:"]
    for v in ("v2", "v3", "v4", "v5", "v5m", "v6", "v7", "v8"):  # v5m: sessions 36-37 only
        k = r.get(v)
        if isinstance(k, dict):
            parts.append(f"{v} {k['time']['median_us']:.1f}")
    print("ssd " + " ".join(parts) + " us")
