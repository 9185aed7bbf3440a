#!/usr/bin/env python3
"""Offline SASS checks on NVRTC's cubins (no GPU needed), for sessions without a device.

    # once: the disassembler (PyPI; nothing else of the toolkit is needed)
    pip install --target /tmp/nvd nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    # a kernel cache of one file (the cubin of gpu/kernels/moe.cu), before and after a change
    . scripts/nvrtc-env.sh
    DUET_COMPILE_ONLY=moe DUET_KERNEL_CACHE=/tmp/kc_a cargo test --release -q -p duet-gpu \\
        --test nvrtc_compile every_kernel_compiles_for_sm90a
    python3 tools/sass_check.py dump /tmp/kc_a /tmp/a.sass
    ...
    python3 tools/sass_check.py diff /tmp/a.sass /tmp/b.sass     # which kernels changed
    python3 tools/sass_check.py diff --operands A B              # ... and how much beyond registers
    python3 tools/sass_check.py regs /tmp/b.sass [--kernel REGEX] # setmaxnreg regions
    python3 tools/sass_check.py order CUBIN KERNEL 1585,1767-1770  # barriers around accesses

`diff` compares each kernel's instructions (addresses dropped; branch targets kept, so a moved
block shows as a change). `regs` checks warp-specialised kernels: the code from a
`USETMAXREG.DEALLOC n` to the next unconditional EXIT (in address order: the producer path) and
the subroutines it calls must use registers below the count in force there (n, or the count of
a later USETMAXREG on the way, e.g. an inc before an epilogue shared with the consumers); exit
status 1 if one does not. (Session 35 used both on the
xw forms of moe.cu: the other 111 kernels' SASS unchanged by the epilogue split, the producers
within their 72 registers. The walk is in address order, not along the control flow: a region
that ptxas lays out around another role's code is checked against that code's count too.)
`order` (nvdisasm -gi, the cubins carry -lineinfo) lists a kernel's barriers and exits with the
shared-memory accesses of the given source lines of the kernel file, in address order (runs
folded): session 38 read racecheck's reported accesses of SSD v5 / v7 and MoE xw192e this way,
each on its side of the barriers that order it.
"""
import argparse
import os
import re
import subprocess
from collections import Counter
import sys

ADDR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*/\*")
FUNC = re.compile(r"Function : (\S+)")
REG = re.compile(r"\bR(\d+)\b")


def load(path):
    """kernel name -> [(address, instruction text)]"""
    out, cur = {}, None
    with open(path) as f:
        for line in f:
            m = FUNC.search(line)
            if m:
                cur = m.group(1)
                out[cur] = []
                continue
            m = ADDR.match(line)
            if cur and m:
                out[cur].append((int(m.group(1), 16), m.group(2)))
    return out


def cmd_dump(a):
    exe = a.cuobjdump or os.environ.get("CUOBJDUMP") or "/tmp/nvd/nvidia/cu13/bin/cuobjdump"
    if not os.path.isfile(exe):
        print(f"cuobjdump not found at {exe}: pip install --target /tmp/nvd nvidia-cuda-cuobjdump "
              "(or pass --cuobjdump / set CUOBJDUMP)", file=sys.stderr)
        return 2
    if not os.path.isdir(a.cache):
        print(f"{a.cache} is not a directory: build the kernel cache first (see --help)", file=sys.stderr)
        return 2
    cubins = sorted(
        os.path.join(a.cache, n) for n in os.listdir(a.cache) if n.endswith(".cubin")
    )
    if not cubins:
        print(f"no .cubin in {a.cache}: build the kernel cache first (see --help)", file=sys.stderr)
        return 2
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for c in cubins:
            r = subprocess.run([exe, "-sass", c], stdout=f, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                print(f"{exe} -sass {c} failed: {r.stderr.strip()}", file=sys.stderr)
                return 2
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(load(a.out))} kernels from {len(cubins)} cubin(s)")
    return 0


OPERAND = re.compile(r"\bU?R\d+\b|\bU?P\d\b|\bB\d+\b|0x[0-9a-f]+")


def norm(t):
    """An instruction with its registers, predicates, convergence barriers and hex constants
    (branch targets, offsets) blanked and reuse flags dropped."""
    return OPERAND.sub("_", t.replace(".reuse", ""))


def cmd_diff(a):
    x, y = load(a.a), load(a.b)
    same = 0
    for k in sorted(set(x) | set(y)):
        if k not in x:
            print(f"new      {k} ({len(y[k])} instructions)")
        elif k not in y:
            print(f"gone     {k}")
        elif [t for _, t in x[k]] != [t for _, t in y[k]]:
            line = f"changed  {k} ({len(x[k])} -> {len(y[k])} instructions)"
            if a.operands:
                # How far apart beyond register allocation: instructions (as multisets, operands
                # blanked) only in a / only in b.
                ca = Counter(norm(t) for _, t in x[k])
                cb = Counter(norm(t) for _, t in y[k])
                line += f"; operands blanked: {sum((ca - cb).values())} only in a, " \
                        f"{sum((cb - ca).values())} only in b"
            print(line)
        else:
            same += 1
    print(f"identical: {same} of {len(x)} kernels")
    return 0


def max_reg(instrs):
    m = -1
    for _, t in instrs:
        for r in REG.findall(t):
            m = max(m, int(r))
    return m


def cmd_regs(a):
    k_re = re.compile(a.kernel) if a.kernel else None
    bad = 0
    seen = 0
    setmax = re.compile(r"USETMAXREG\.(DEALLOC|TRY_ALLOC)\.CTAPOOL (?:U?P\d+, )?(0x[0-9a-f]+|\d+)")
    for k, ins in sorted(load(a.sass).items()):
        if k_re and not k_re.search(k):
            continue
        by_addr = {addr: j for j, (addr, _) in enumerate(ins)}
        for i, (_, t) in enumerate(ins):
            m = setmax.match(t)
            if not m or m.group(1) != "DEALLOC":
                continue
            # Walk from the DEALLOC to the next unconditional EXIT in address order; a later
            # USETMAXREG (an inc on the way, or another dec) sets the count from there on. Calls
            # are checked against the count at the call.
            limit = int(m.group(2), 0)
            worst = (-1, limit)  # (register, count at that instruction)
            over = []
            n = 0
            j = i
            while j < len(ins):
                t2 = ins[j][1]
                m2 = setmax.match(t2)
                if m2:
                    limit = int(m2.group(2), 0)
                body = [ins[j]]
                c = re.match(r"CALL\.REL(?:\.NOINC)? (0x[0-9a-f]+)", t2)
                if c and int(c.group(1), 16) in by_addr:
                    q = by_addr[int(c.group(1), 16)]
                    while q < len(ins) and not ins[q][1].startswith("RET"):
                        body.append(ins[q])
                        q += 1
                for addr, t3 in body:
                    n += 1
                    r = max_reg([(addr, t3)])
                    if r >= limit:
                        over.append(f"{addr:#x} R{r} >= {limit}: {t3}")
                    if r > worst[0]:
                        worst = (r, limit)
                if t2 == "EXIT":
                    break
                j += 1
            seen += 1
            bad += bool(over)
            print(f"{'OVER' if over else 'ok  '} {k}: DEALLOC {int(m.group(2), 0)} at {ins[i][0]:#x}, "
                  f"{n} instructions to the EXIT, up to R{worst[0]} (count {worst[1]} there)")
            for o in over[:5]:
                print(f"       {o}")
    if seen == 0:
        print("no USETMAXREG.DEALLOC in the selected kernels", file=sys.stderr)
        return 2
    return 1 if bad else 0


LINE = re.compile(r'File "([^"]*)", line (\d+)')
GI_INSTR = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")


def parse_lines(spec):
    """'1585,1767-1770' -> {1585, 1767, 1768, 1769, 1770}"""
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def cmd_order(a):
    """Barriers, exits and the shared-memory accesses of chosen source lines, in address order,
    runs of one (op, line) folded: which barriers surround each reported access."""
    exe = a.nvdisasm or os.environ.get("NVDISASM") or "/tmp/nvd/nvidia/cu13/bin/nvdisasm"
    if not os.path.isfile(exe):
        print(f"nvdisasm not found at {exe}: pip install --target /tmp/nvd nvidia-cuda-nvdisasm "
              "(or pass --nvdisasm / set NVDISASM)", file=sys.stderr)
        return 2
    text = subprocess.run([exe, "-c", "-gi", a.cubin], capture_output=True, text=True, check=True).stdout
    want = parse_lines(a.lines)
    rows, inside, line, prev_comment = [], False, -1, False
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith(".text."):
            inside = s[len(".text."):].rstrip(":") == a.kernel
            continue
        if not inside:
            continue
        if s.startswith("//##"):
            if not prev_comment:  # the innermost frame of an inline stack comes first
                m = LINE.search(s)
                # lines of the kernel file only (common.cuh's numbers are another file's)
                line = int(m.group(2)) if m and not m.group(1).endswith("common.cuh") else -1
            prev_comment = True
            continue
        prev_comment = False
        m = GI_INSTR.match(raw)
        if not m:
            continue
        ins = m.group(2)
        op = ins.split()[1] if ins.startswith("@") else ins.split()[0]
        if op.startswith("BAR") or op == "EXIT":
            key = (ins, line)
        elif op.startswith(("LDS", "STS", "LDSM", "ATOMS")) and line in want:
            key = (op, line)
        else:
            continue
        if rows and rows[-1][1] == key:
            rows[-1][2] += 1
        else:
            rows.append([int(m.group(1), 16), key, 1])
    if not rows:
        print(f"kernel {a.kernel} not found (or nothing to show) in {a.cubin}", file=sys.stderr)
        return 2
    for addr, (what, ln), n in rows:
        print(f"{addr:6x}  line {ln:5d}  {what}" + (f"  x{n}" if n > 1 else ""))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="cuobjdump -sass every cubin of a kernel cache into one file")
    d.add_argument("cache")
    d.add_argument("out")
    d.add_argument("--cuobjdump")
    f = sub.add_parser("diff", help="per-kernel instruction diff of two dumps")
    f.add_argument("a")
    f.add_argument("b")
    f.add_argument("--operands", action="store_true",
                   help="for a changed kernel, also count the instructions that differ with "
                        "registers, predicates and constants blanked (register allocation alone: 0)")
    r = sub.add_parser("regs", help="setmaxnreg producer regions within their register count")
    r.add_argument("sass")
    r.add_argument("--kernel")
    o = sub.add_parser("order", help="barriers around the shared-memory accesses of given source lines")
    o.add_argument("cubin")
    o.add_argument("kernel")
    o.add_argument("lines", help="source lines of the accesses, e.g. 1585,1767-1770")
    o.add_argument("--nvdisasm")
    a = ap.parse_args()
    return {"dump": cmd_dump, "diff": cmd_diff, "regs": cmd_regs, "order": cmd_order}[a.cmd](a)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    sys.exit(main())
