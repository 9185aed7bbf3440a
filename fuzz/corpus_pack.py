#!/usr/bin/env python3
"""Pack / unpack the committed fuzz corpora (session 23).

The corpora are thousands of tiny files (11,484 files, 180 KB in session 23). Every tracked file
costs a 512-byte header and rounding in the device tool's carry count (~11 MiB of the 64 MiB
budget), so each target's corpus is committed as one deflated zip, fuzz/corpus/<target>.zip:
entries sorted by name, fixed timestamps, so packing the same files gives the same bytes.

  fuzz/corpus_pack.py pack DIR...     # fuzz/corpus/<t>/ -> fuzz/corpus/<t>.zip, removes the dir
  fuzz/corpus_pack.py unpack ZIP...   # fuzz/corpus/<t>.zip -> fuzz/corpus/<t>/ (the zip stays)

tests/fuzz_regressions.rs replays the zips (and any unpacked directory) in CI; scripts/fuzz.sh
unpacks before a run and packs after its minimisation.
"""
import os
import shutil
import sys
import zipfile


def pack(d):
    d = d.rstrip("/")
    names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)) and not n.startswith(".tmp"))
    if not names:
        sys.exit(f"corpus_pack: {d} has no files; nothing packed (the old zip, if any, is kept)")
    out = d + ".zip"
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n in names:
            info = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(os.path.join(d, n), "rb") as f:
                z.writestr(info, f.read())
    os.replace(tmp, out)
    shutil.rmtree(d)
    print(f"{out}: {len(names)} files, {os.path.getsize(out)} bytes")


def unpack(zpath):
    if not zpath.endswith(".zip"):
        sys.exit(f"corpus_pack: {zpath} is not a .zip")
    d = zpath[: -len(".zip")]
    os.makedirs(d, exist_ok=True)
    with zipfile.ZipFile(zpath) as z:
        for n in z.namelist():
            if "/" in n or n.startswith("."):
                sys.exit(f"corpus_pack: {zpath}: entry {n!r} is not a plain file name")
            with open(os.path.join(d, n), "wb") as f:
                f.write(z.read(n))
    print(f"{d}: {len(os.listdir(d))} files")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__)
    for p in sys.argv[2:]:
        (pack if sys.argv[1] == "pack" else unpack)(p)
