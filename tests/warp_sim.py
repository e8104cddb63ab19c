"""One warp running a straight-line block of generated PTX on the CPU: the integer and shared-memory subset the x
staging blocks use (gen_fp8_gemv.x_rows_to_fragments, x_rows_to_fragments_t). Registers are per lane; shared memory is
a dict of 4-byte words. Each shared-memory instruction's active lanes' addresses are kept, to count its wavefronts."""

from __future__ import annotations

import re

_MEM = re.compile(r"\[(%\w+)(?:\+(\d+))?\]")


def run(lines: list[str], regs) -> tuple[list[dict], list[tuple[str, list[int]]]]:
    """Runs ``lines`` on 32 lanes whose registers start as ``regs(lane)``; returns the lanes' registers and, per
    shared-memory instruction, (opcode, the active lanes' byte addresses)."""
    smem: dict[int, object] = {}
    lanes = [dict(regs(lane)) for lane in range(32)]
    accesses = []
    for ln in lines:
        ln = ln.split("//")[0].strip()
        if not ln or ln in ("{", "}") or ln.startswith((".reg", "bar.warp.sync")):
            continue
        pred = None
        m = re.match(r"@(!?)(%\w+)\s+(.*)", ln)
        if m:
            pred, ln = (m.group(1) == "!", m.group(2)), m.group(3)
        op, args = ln.rstrip(";").split(None, 1)
        addrs = []
        for L in lanes:
            if pred and bool(L[pred[1]]) == pred[0]:
                continue

            def v(a, L=L):
                return L[a] if a.startswith("%") else int(a, 0)

            if op.startswith(("st.shared", "ld.shared")):
                mm = _MEM.search(args)
                addr = L[mm.group(1)] + int(mm.group(2) or 0)
                addrs.append(addr)
                vec = re.search(r"\{([^}]*)\}", args)
                names = [x.strip() for x in vec.group(1).split(",")] if vec else [args.split(",")[0 if op.startswith("ld") else 1].strip()]
                for i, r in enumerate(names):
                    if op.startswith("st"):
                        smem[addr + 4 * i] = L[r]
                    else:
                        L[r] = smem.get(addr + 4 * i, "unwritten")
                continue
            ops = [x.strip() for x in args.split(",")]
            d, a = ops[0], [v(x) for x in ops[1:]]
            if op.startswith("setp.lt"):
                L[d] = a[0] < a[1]
            elif op.startswith("mov"):
                L[d] = a[0]
            elif op.startswith("xor"):
                L[d] = a[0] ^ a[1]
            elif op.startswith("and"):
                L[d] = a[0] & a[1]
            elif op.startswith("shl"):
                L[d] = a[0] << a[1]
            elif op.startswith("shr"):
                L[d] = a[0] >> a[1]
            elif op.startswith("add"):
                L[d] = a[0] + a[1]
            elif op.startswith("mad.lo"):
                L[d] = a[0] * a[1] + a[2]
            else:
                raise ValueError(f"warp_sim: no {op}")
        if op.startswith(("st.shared", "ld.shared")):
            accesses.append((op, addrs))
    return lanes, accesses


def wavefronts(op: str, addrs: list[int]) -> int:
    """Shared-memory wavefronts of one instruction over its active lanes: 4-byte accesses, the most distinct words in
    one bank; 16-byte ones per phase of 8 active lanes, the same, summed."""
    width = 16 if ".v4" in op else 4
    groups = [addrs] if width == 4 else [addrs[i:i + 8] for i in range(0, len(addrs), 8)]
    total = 0
    for grp in groups:
        banks: dict[int, set] = {}
        for a in grp:
            for w in range(0, width, 4):
                banks.setdefault((a + w) // 4 % 32, set()).add(a + w)
        total += max((len(s) for s in banks.values()), default=0)
    return total
