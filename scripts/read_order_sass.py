#!/usr/bin/env python3
"""Reads the SASS of scripts/check-read-order's probe kernels (nvdisasm -c)
and checks that every pin-free read loads the slot's state word after the
element: the state word's address must be computed from the element's
registers (page_cache_ref's zero_after_loads ANDs them with opaque_zero, a
kernel parameter, and adds the result to the slot index).

  probe       a[i]: in the window after the hint's acquire (a strong load,
              then CCTL.IVALL), the element's weak load comes before the
              state word's strong load, and a use of the element's register
              lies between them.
  probe_seen  read_seen's hint and directory paths, probe_slot read_slot:
              each relaxed strong load (no CCTL.IVALL after it) whose
              address chain holds a LOP3 of a weakly loaded register is one
              ordered re-check; the kernels must have at least 2 and 1.

Exits 1 naming what is wrong; prints the instructions it judged."""
import re
import sys


def kernels(path):
    """Instructions of each kernel, by mangled name."""
    ks, cur = {}, None
    for line in open(path):
        m = re.search(r"^\.text\.(\S+):", line.strip())
        if m:
            cur = m.group(1)
            ks[cur] = []
            continue
        if cur and "/*" in line and ";" in line:
            x = re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line.split(";")[0]).strip()
            if x:
                ks[cur].append(x)
    return ks


def kernel(ks, name):
    mangled = f"_Z{len(name)}{name}"
    for k, ins in ks.items():
        if k.startswith(mangled):
            return ins
    sys.exit(f"check-read-order: no kernel {name} in the SASS")


LOAD = re.compile(r"(@!?P\d+\s+)?LD(G)?\.E")


def split(x):
    """(opcode, operands) with any predicate dropped."""
    x = re.sub(r"^@!?U?P\w+\s+", "", x)
    op, _, rest = x.partition(" ")
    return op, [a.strip() for a in rest.split(",")]


def regs(text, wide=False):
    """Register numbers named in text; a .64 operand (or wide) names a pair."""
    out = set()
    for n, w in re.findall(r"\bR(\d+)(\.64)?", text):
        out.add(int(n))
        if w or wide:
            out.add(int(n) + 1)
    return out


def check_hint_window(ins):
    try:
        start = next(i for i, x in enumerate(ins) if x.startswith("CCTL.IVALL"))
    except StopIteration:
        sys.exit("check-read-order: no acquire (CCTL.IVALL) found in probe")
    window = ins[start:start + 40]
    loads = [(i, x) for i, x in enumerate(window) if LOAD.match(x)]
    print("probe (a[i], the hint path):")
    print("\n".join(f"    {x}" for _, x in loads[:4]))
    weak = [(i, x) for i, x in loads if "STRONG" not in x]
    if not weak:
        sys.exit("check-read-order: no weak element load after the hint")
    i_data, data = weak[0]
    data_reg = re.search(r"LD(?:G)?\.E(?:\.\w+)*\s+(R\d+)", data).group(1)
    later_strong = [(i, x) for i, x in loads if i > i_data and "STRONG" in x]
    earlier_strong = [(i, x) for i, x in loads if i < i_data and "STRONG" in x]
    if len(earlier_strong) >= 2:
        sys.exit(f"check-read-order: WRONG: two strong loads (key and state word) before the element: {earlier_strong}")
    if not later_strong:
        sys.exit("check-read-order: WRONG: no state-word load after the element")
    uses = [x for x in window[i_data + 1:later_strong[0][0]] if re.search(rf"\b{data_reg}\b", x.split(" ", 1)[-1])]
    if not uses:
        sys.exit(f"check-read-order: WRONG: the state word's address does not use the element ({data_reg})")
    print(f"  the state word is loaded after the element ({data_reg} feeds its address)")


def ordered_rechecks(ins):
    """Relaxed strong loads whose address is computed, through a LOP3, from
    a register a weak load just wrote: (the LOP3, the load)."""
    found = []
    for j, x in enumerate(ins):
        op, _ = split(x)
        if not (LOAD.match(op) and "STRONG" in op):
            continue
        if any(i.startswith("CCTL.IVALL") for i in ins[j + 1:j + 3]):
            continue  # an acquire (the hint, or the directory path's first state read)
        addr = re.search(r"\[(R\d+)(\.64)?", x)
        if not addr:
            continue
        need = regs(addr.group(1), wide=bool(addr.group(2)))
        chain = []
        for i in range(j - 1, max(-1, j - 40), -1):
            op_i, args = split(ins[i])
            if not args or not args[0].startswith("R"):
                continue
            dst = regs(args[0], wide=".64" in op_i or ".WIDE" in op_i)
            if not dst & need:
                continue
            chain.append(i)
            need -= dst
            if not LOAD.match(op_i):  # a loaded value ends the chain
                need |= regs(",".join(args[1:]))
        weak = set()
        for i in chain:
            op_i, args = split(ins[i])
            if LOAD.match(op_i) and "STRONG" not in op_i:
                weak |= regs(args[0], wide=".64" in op_i or ".128" in op_i)
        ands = [ins[i] for i in chain if split(ins[i])[0].startswith("LOP3") and regs(",".join(split(ins[i])[1][1:])) & weak]
        if ands:
            found.append((ands[0], x))
    return found


ks = kernels(sys.argv[1])
check_hint_window(kernel(ks, "probe"))
bad = []
for name, want, what in (("probe_seen", 2, "read_seen: the hint and directory paths"),
                         ("probe_slot", 1, "read_slot")):
    got = ordered_rechecks(kernel(ks, name))
    print(f"{name} ({what}): {len(got)} state-word loads ordered after their element (want at least {want})")
    for a, x in got:
        print(f"    {a}  ->  {x}")
    if len(got) < want:
        bad.append(name)
if bad:
    sys.exit(f"check-read-order: WRONG: state words loaded with no dependency on the element in {', '.join(bad)}")
print("check-read-order: every pin-free read loads the state word after the element")
