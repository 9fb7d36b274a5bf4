"""A brute-force reference for the race check, independent of trnsim.trace.races: happens-before
by withholding. Instruction A is ordered before B when B cannot issue in the launch executed
with A issued but never completing (semaphores only grow, so a B that can issue then issues
before A completes in some real execution); regions are numpy index sets. Quadratic: for small
traces only."""

from __future__ import annotations

from collections import Counter

import numpy as np

from trnsim.isa import Ap, Engine

WRITES = ("dst", "reduce_dst")


def queue(ins) -> tuple:
    return ("dma", ins.queue) if ins.engine == Engine.DMA else ("engine", int(ins.engine))


def line(ins, tiles) -> tuple:
    """What completes in order: an engine queue, or a DMA queue's transfers of one direction
    (into SBUF/PSUM, or into HBM)."""
    return queue(ins) + ((ins.dst.name in tiles,) if ins.engine == Engine.DMA else ())


def reach_without(instrs: list, withheld, tiles=None) -> set:
    """ids of the instructions that can issue when `withheld` (None: nothing) never completes:
    its engine queue stops behind it, its signals never come; a DMA queue goes on issuing, but
    its later transfers of the same direction complete after it, so never either (`tiles`: the
    core program's, which tell a transfer's direction)."""
    lists: dict = {}
    for ins in instrs:
        lists.setdefault(queue(ins), []).append(ins)
    values: Counter = Counter()
    heads = dict.fromkeys(lists, 0)
    stopped: set = set()
    issued: set = set()
    blocked = None  # the line withheld holds back
    moved = True
    while moved:
        moved = False
        for q, lst in lists.items():
            while q not in stopped and heads[q] < len(lst):
                ins = lst[heads[q]]
                if any(values[s] < v for s, v in ins.wait):
                    break
                issued.add(id(ins))
                heads[q] += 1
                moved = True
                if ins is withheld:
                    if q[0] == "engine":
                        stopped.add(q)
                    blocked = line(ins, tiles or {})
                    continue
                if blocked is not None and line(ins, tiles or {}) == blocked:
                    continue
                for s, n in ins.signal:
                    values[s] += n
    return issued


_ELEMENTS: dict = {}


def elements(ap: Ap, shape: tuple) -> int:
    """The elements `ap` touches in a buffer of `shape`, as the bits of an int (bit i:
    element i in C order)."""
    key = (ap.index, tuple(shape))
    if key not in _ELEMENTS:
        idx = tuple(i if isinstance(i, int) else slice(*i) for i in ap.index)
        mask = np.zeros(shape, dtype=bool)
        mask[idx] = True
        bits = np.packbits(mask.ravel(), bitorder="little")
        _ELEMENTS[key] = int.from_bytes(bits.tobytes(), "little")
    return _ELEMENTS[key]


def accesses(ins, program, tiles) -> list:
    """(buffer, element set, write) per tile or tensor operand of `ins`."""
    out = []
    for f in ins.op_fields():
        ap = getattr(ins, f.name)
        if type(ap) is not Ap:
            continue
        if ap.name in tiles:
            buf, shape = ("tile", ap.name), tiles[ap.name].shape
        elif ap.name in program.tensors:
            t = program.tensors[ap.name]
            base = t
            while base.view:
                base = program.tensors[base.view]
            buf, shape = ("tensor", base.name), t.shape
        else:
            continue
        out.append((buf, elements(ap, shape), f.name in WRITES))
    return out


def conflict(a: list, b: list) -> bool:
    return any(x[0] == y[0] and (x[2] or y[2]) and x[1] & y[1] for x in a for y in b)


def launch_races(program, kernel: str, core: int = 0) -> set:
    """frozenset({index, index}) of every two instructions of one launch that conflict and
    that neither precedes the other."""
    prog = program.kernels[kernel].per_core[core]
    instrs = prog.instructions
    reach = {id(a): reach_without(instrs, a, prog.tiles) for a in instrs}
    acc = {id(a): accesses(a, program, prog.tiles) for a in instrs}
    out = set()
    for i, a in enumerate(instrs):
        for b in instrs[i + 1 :]:
            if id(b) in reach[id(a)] and id(a) in reach[id(b)] and conflict(acc[id(a)], acc[id(b)]):
                out.add(frozenset((a.index, b.index)))
    return out


def stream_steps_reach(program, withheld) -> set:
    """(stream, step) pairs that can start when step `withheld` never completes (a wait passes
    once some stream's record of its event has completed)."""
    heads = [0] * len(program.streams)
    recorded: set = set()
    started: set = set()
    stopped: set = set()
    moved = True
    while moved:
        moved = False
        for i, st in enumerate(program.streams):
            while i not in stopped and heads[i] < len(st.steps):
                step = st.steps[heads[i]]
                if step.kind == "wait" and step.arg not in recorded:
                    break
                started.add((i, heads[i]))
                if (i, heads[i]) == withheld:
                    stopped.add(i)
                    break
                if step.kind == "record":
                    recorded.add(step.arg)
                heads[i] += 1
                moved = True
    return started


def stream_races(program) -> set:
    """frozenset of two (stream, step) pairs: steps of different streams touching conflicting
    tensor memory that no event orders."""
    touched = {}
    for i, st in enumerate(program.streams):
        for j, step in enumerate(st.steps):
            if step.kind == "launch":
                k = program.kernels[step.arg]
                touched[(i, j)] = [
                    x
                    for c in k.per_core
                    for ins in c.instructions
                    for x in accesses(ins, program, c.tiles)
                    if x[0][0] == "tensor"
                ]
            elif step.kind == "copy":
                touched[(i, j)] = [
                    x
                    for ap, w in zip(step.arg, (False, True))
                    for x in [
                        (
                            ("tensor", _base(program, ap.name)),
                            elements(ap, program.tensors[ap.name].shape),
                            w,
                        )
                    ]
                ]
    reach = {s: stream_steps_reach(program, s) for s in touched}
    out = set()
    keys = sorted(touched)
    for x, a in enumerate(keys):
        for b in keys[x + 1 :]:
            if (
                a[0] != b[0]
                and b in reach[a]
                and a in reach[b]
                and conflict(touched[a], touched[b])
            ):
                out.add(frozenset((a, b)))
    return out


def _base(program, name: str) -> str:
    t = program.tensors[name]
    while t.view:
        t = program.tensors[t.view]
    return t.name
