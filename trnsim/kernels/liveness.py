"""The tiles of a kernel of several ops placed by liveness, and its semaphores recycled.

Each op sizes its tiles as if it had SBUF and PSUM to itself; kept for the whole kernel, the
tiles of a Llama layer's 19 ops would need five times SBUF, and their semaphores (a pair a
tile, `builder`) more than the core's 256. `KernelBuilder.begin` makes each op step's tiles its
own (no scratch tile or PSUM bank is handed by name from one op to the next), and `finish`
then, once the program is built:

- places each tile by liveness (`memory.onchip.place_live`): it lives over the op steps from
  the one that made it to the one of its last access; it takes bytes no tile used yet while
  they last, else bytes of tiles dead by its first step (its predecessors);
- recycles semaphores when the program's (its tiles' and its tensors') are more than the core
  has: a semaphore whose user (a tile or a tensor) lives over op steps after those of another's
  user counts on that one from where its counts stopped (its waits are offset by them); a
  tile's takes a predecessor's of the same kind when one is free, else the one free longest;
- orders each user after the tiles whose bytes, and the users whose semaphores, it takes: on
  every queue, its first access waits until their last counts are reached (every access of
  theirs has completed; left out on a compute engine that made all of those accesses itself,
  as it runs in order). Its later accesses on that queue come after that one, so every access
  of the new tile follows every access of the old (and, through it, of every earlier holder of
  the bytes), and no signal of a recycled semaphore's new user comes before the old user's
  last.

The waits only point back (the old users' accesses are all in earlier op steps), so they add
no deadlock. A program of one op step is left as it was: its tiles one after another.
"""

from __future__ import annotations

import math
from dataclasses import replace

from trnsim.config import CoreConfig
from trnsim.isa import Engine
from trnsim.memory.onchip import place_live

__all__ = ["finish"]

_DMA = Engine.DMA


def finish(b, core: CoreConfig) -> None:
    """Place `b`'s tiles (a `KernelBuilder`) by liveness, recycle its semaphores where the
    core has too few, and add the waits that order reused bytes and semaphores (module doc)."""
    bufs = b._bufs
    if len({x for buf in bufs.values() for x in (buf.first, buf.last)}) <= 1:
        return
    items = [
        (n, t.memory, math.prod(t.shape[1:]) * t.dtype.itemsize, bufs[n].first, bufs[n].last)
        for n, t in b.tiles.items()
    ]
    offsets, preds = place_live(items, core)
    for n, t in b.tiles.items():
        b.tiles[n] = replace(t, offset=offsets[n], live=(bufs[n].first, bufs[n].last))
    users = _users(b)
    alias, waits = _recycle(users, core.semaphores, preds)
    for n, deps in preds.items():  # the tiles whose bytes it takes
        for d in deps:
            for sem, _, _, _, count, queues, _ in users.get(f"tile {d}", ()):
                s, base = alias.get(sem, (sem, 0))
                waits.setdefault(f"tile {n}", []).append((s, base + count, queues))
    _rewrite(b, users, waits, alias)


def _users(b) -> dict[str, list[tuple]]:
    """Per user ("tile <name>", "tensor <name>"), its semaphores that instructions count on:
    (semaphore, user, first step, last step, accesses counted, the queues that made them,
    kind "r" or "w")."""
    out: dict[str, list[tuple]] = {}
    for n, buf in b._bufs.items():
        u = f"tile {b.bank_of.get(n, n)}"  # (a bank's counts: its tile's, `banked`)
        out[u] = out.get(u, []) + [
            (s, u, buf.first, buf.last, c, frozenset(q), k)
            for s, c, q, k in zip(
                buf.sems, (buf.reads, buf.writes), (buf.last_read, buf.last_write), "rw"
            )
            if c
        ]
    mine: set = set()
    for n, t in b._tensors.items():
        if id(t) in mine:  # a view's: its base's
            continue
        mine.add(id(t))
        u = f"tensor {n}"
        lst = []
        for (kind, part), s in t.sems.items():
            c, q = (t.reads, t.last_read) if kind == "r" else (t.writes, t.last_write)
            if c[part]:
                lst.append((s, u, t.first, t.last, c[part], frozenset(q[part]), kind))
        if lst:
            out[u] = lst
    return out


def _recycle(users: dict, limit: int, preds: dict) -> tuple[dict, dict]:
    """(semaphore -> (the one it counts on, the count it starts from), user -> [(semaphore,
    value, queues)] its first access on each queue waits for): semaphores are their own while
    the program's are at most `limit`; past that, in order of first step, each takes one whose
    user's last step is before its first (module doc)."""
    sems = [s for lst in users.values() for s in lst]
    if len(sems) <= limit:
        return {}, {}
    sems.sort(key=lambda s: s[2])  # stable: tiles as made, then tensors
    held: list[list] = []  # [semaphore, count so far, its user's last step, user, queues, kind]
    alias: dict[str, tuple[str, int]] = {}
    waits: dict[str, list] = {}
    for s, user, first, last, count, queues, kind in sems:
        free = [h for h in held if h[2] < first]
        if len(held) < limit or not free:
            held.append([s, count, last, user, queues, kind])
            continue
        mine = {f"tile {d}" for d in preds.get(user[5:], ())} if user[:5] == "tile " else ()
        h = min(free, key=lambda h: (not (h[3] in mine and h[5] == kind), h[2]))
        alias[s] = (h[0], h[1])
        waits.setdefault(user, []).append((h[0], h[1], h[4]))
        h[1] += count
        h[2], h[3], h[4], h[5] = last, user, queues, kind
    return alias, waits


def _rewrite(b, users: dict, waits: dict[str, list], alias: dict) -> None:
    """Give each user's first access on every queue its `waits`, and count recycled
    semaphores (`alias`) on the ones they took."""
    if not waits and not alias:
        return
    owner = {s[0]: u for u in waits for s in users.get(u, ())}  # a user's semaphore -> user
    seen: set = set()
    setattr_ = object.__setattr__
    memo: dict = {}  # signals -> (renamed or None, the users with waits they count for)
    for ins in b.instructions:
        sig = ins.signal
        m = memo.get(sig)
        if m is None:
            m = memo[sig] = _signals(sig, owner, alias)
        extra = None
        if m[1]:
            q = ("dma", ins.queue) if ins.engine is _DMA else ins.engine
            for u in m[1]:
                if (u, q) not in seen:
                    seen.add((u, q))
                    mine = q.__class__ is Engine
                    extra = (extra or []) + [w for w in waits[u] if not (mine and w[2] == {q})]
        wait = ins.wait
        if wait and extra is None and alias:
            for s, _ in wait:
                if s in alias:
                    break
            else:
                wait = None
        if wait or extra:
            got: dict[str, int] = {}
            for s, v in wait or ():
                a = alias.get(s)
                if a is not None:
                    s, v = a[0], v + a[1]
                if v > got.get(s, 0):
                    got[s] = v
            for s, v, _ in extra or ():
                if v > got.get(s, 0):
                    got[s] = v
            setattr_(ins, "wait", tuple(got.items()))
        if m[0] is not None:
            setattr_(ins, "signal", m[0])


def _signals(sig: tuple, owner: dict, alias: dict) -> tuple:
    """(`sig` counted on the semaphores of `alias`, or None when none is recycled; the users
    with waits whose semaphores `sig` counts)."""
    users = tuple(dict.fromkeys(owner[s] for s, _ in sig if s in owner))
    if not any(s in alias for s, _ in sig):
        return None, users
    out: dict[str, int] = {}
    for s, n in sig:
        s = alias.get(s, (s,))[0]
        out[s] = out.get(s, 0) + n
    return tuple(out.items()), users
