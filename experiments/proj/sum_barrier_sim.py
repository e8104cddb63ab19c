"""The sum_barrier candidate's barrier protocol, simulated on the CPU (no GPU; the candidate's PTX is at a044afc).

16 warps walk the same strips. Per strip s (partials buffer b = s % 2) the warps that sum it (warp 0 always, others at
random) `bar.sync P_b`; the others `bar.arrive P_b`. A named barrier completes when all 16 warps have arrived; a sync
waits for that. The warps run in a random interleaving until all end (complete) or none can move (deadlock).

- form "0b5e12d" (built first): a summer of s also `bar.sync D_b` right after its sums; a warp that did not sum s
  pays D_b just before storing strip s + 2's partials, or at the walk's end.
- form "a044afc" (the correction measured): every warp `bar.sync D_b` before storing strip s + 2's partials, nothing
  after the sums.

  python3 experiments/proj/sum_barrier_sim.py
prints, per form, how many of 200 random walks (1, 2, 5, 40 strips x 50 seeds) complete. The 0b5e12d form deadlocks
whenever a warp sums strip s + 1 but not s (it waits at P(s + 1) for the summers of s, who wait at D(s) for it), which
is why the device run at e28ef15 measured M = 1 (only warp 0 sums) and hung at M = 16.
"""

from __future__ import annotations

import random


def program(form: str, w: int, summers: list[set[int]]) -> list[tuple[str, str, int]]:
    """Warp w's barrier operations in program order: (op, barrier, buffer)."""
    n, ops = len(summers), []
    for s in range(n):
        b = s % 2
        if s >= 2 and (form == "a044afc" or w not in summers[s - 2]):
            ops.append(("sync", "D", b))  # before the partials' store into buffer b
        if w in summers[s]:
            ops.append(("sync", "P", b))
            if form == "0b5e12d":
                ops.append(("sync", "D", b))  # right after the sums
        else:
            ops.append(("arrive", "P", b))
    if form == "0b5e12d":
        ops += [("sync", "D", s % 2) for s in range(max(0, n - 2), n) if w not in summers[s]]  # owed at the end
    return ops


def walk(form: str, strips: int, seed: int, warps: int = 16) -> bool:
    rnd = random.Random(seed)
    summers = [{0} | {w for w in range(warps) if rnd.random() < 0.15} for _ in range(strips)]
    progs = [program(form, w, summers) for w in range(warps)]
    pc, count, waiting = [0] * warps, {}, {}
    while True:
        blocked = set().union(*waiting.values()) if waiting else set()
        ready = [w for w in range(warps) if w not in blocked and pc[w] < len(progs[w])]
        if not ready:
            return all(pc[w] == len(progs[w]) for w in range(warps)) and not blocked
        w = rnd.choice(ready)
        op, bar, b = progs[w][pc[w]]
        pc[w] += 1
        key = (bar, b)
        count[key] = count.get(key, 0) + 1
        if op == "sync":
            waiting.setdefault(key, set()).add(w)
        if count[key] == warps:  # the barrier completes: its waiters go on
            count[key], waiting[key] = 0, set()


def main() -> None:
    for form in ("0b5e12d", "a044afc"):
        done = sum(walk(form, n, seed) for n in (1, 2, 5, 40) for seed in range(50))
        print(f"{form}: {done} / 200 walks complete")


if __name__ == "__main__":
    main()
