"""One launch of a core program executed abstractly: its queues, a topological order of its
instructions (or the deadlock that stops it), and, per waiter, what may issue before it.

Every queue advances while its next instruction's waits are met by the signals so far.
Semaphores only grow and waits are `>=`, so this finds everything that can ever issue: an
instruction it never reaches is a deadlock in every execution.
"""

from __future__ import annotations

from trnsim.errors import DeadlockError
from trnsim.isa import Engine, Instr
from trnsim.trace.program import CoreProgram

__all__ = ["Launch", "queue_of", "label_of"]


def queue_of(ins: Instr) -> str:
    return f"q{ins.queue}" if ins.engine == Engine.DMA else ins.engine.label


def label_of(ins: Instr, kernel: str, source: str, queue: str) -> str:
    return f"{source}:{ins.line} kernel {kernel} queue {queue} {ins.label}"


class Launch:
    """The queues of one core program: `lists[q]` its instructions in queue order, `pos[id]`
    an instruction's (queue, 1-based position), `isdma[q]` whether q is a DMA queue."""

    def __init__(self, prog: CoreProgram, kernel: str, source: str, core: int = 0):
        self.prog, self.kernel, self.source, self.core = prog, kernel, source, core
        instrs = prog.instructions
        names = [queue_of(i) for i in instrs]
        self.queues = sorted(set(names))
        qid = {q: k for k, q in enumerate(self.queues)}
        self.lists: list[list[Instr]] = [[] for _ in self.queues]
        self.pos: dict[int, tuple[int, int]] = {}
        self.semaphores: set = set()
        for ins, name in zip(instrs, names):
            if ins.wait or ins.signal:
                self.semaphores.update(s for s, _ in ins.wait)
                self.semaphores.update(s for s, _ in ins.signal)
            qk = qid[name]
            lst = self.lists[qk]
            lst.append(ins)
            self.pos[id(ins)] = (qk, len(lst))
        self.isdma = [q.startswith("q") for q in self.queues]

    def label(self, ins: Instr) -> str:
        return label_of(ins, self.kernel, self.source, self.queues[self.pos[id(ins)][0]])

    def order(self) -> list[Instr]:
        """A topological order (queues advanced greedily); raises DeadlockError naming each
        stuck queue's instruction when some queue can never go on."""
        values: dict[str, int] = {}
        heads = [0] * len(self.lists)
        order: list[Instr] = []
        progress = True
        while progress:
            progress = False
            for qk, lst in enumerate(self.lists):
                h = heads[qk]
                while h < len(lst):
                    ins = lst[h]
                    if any(values.get(s, 0) < v for s, v in ins.wait):
                        break
                    for s, n in ins.signal:
                        values[s] = values.get(s, 0) + n
                    order.append(ins)
                    h += 1
                if h != heads[qk]:
                    heads[qk] = h
                    progress = True
        if len(order) < len(self.prog.instructions):
            raise self._deadlock(heads, values, order)
        return order

    def _deadlock(self, heads: list, values: dict, order: list) -> DeadlockError:
        issued = {id(i) for i in order}
        parts = []
        for qk, lst in enumerate(self.lists):
            if heads[qk] == len(lst):
                continue
            ins = lst[heads[qk]]
            s, v = next((s, v) for s, v in ins.wait if values.get(s, 0) < v)
            pending = [
                i
                for i in self.prog.instructions
                if id(i) not in issued and any(x == s for x, _ in i.signal)
            ]
            own = pending and all(self.pos[id(i)][0] == qk for i in pending)
            why = " that only its own later instructions signal" if own else ""
            q = f"core{self.core}.{self.queues[qk]}"
            parts.append(
                f"{label_of(ins, self.kernel, self.source, q)} waits for semaphore "
                f"'{s}' >= {v}{why}, which can reach only {values.get(s, 0)}"
            )
        return DeadlockError("deadlock: " + "; ".join(parts))

    def may_precede(self, waiters: dict[int, list[Instr]]) -> dict[int, list[int]]:
        """For each waiter W (`waiters`: queue -> its waiters, in queue order): how many
        instructions of each queue may issue before W (one count per queue).

        This is the launch executed abstractly with W's queue stopped at W: every other queue
        advances while its waits are met, a DMA transfer's signals counting from its issue.
        Whatever issues before W in some execution issues in this run. One run per queue
        serves all its waiters: after recording W's counts, W issues and the run goes on."""
        out: dict[int, list[int]] = {}
        for q, ws in waiters.items():
            out.update(self._run_until_each(q, {id(w) for w in ws}))
        return out

    def _run_until_each(self, q: int, wanted: set) -> dict[int, list[int]]:
        waits = [[ins.wait for ins in lst] for lst in self.lists]
        sigs = [[ins.signal for ins in lst] for lst in self.lists]
        values = dict.fromkeys(self.semaphores, 0)
        out: dict[int, list[int]] = {}
        heads = [0] * len(self.lists)
        waiting: dict[str, list] = {}
        work = [r for r in range(len(self.lists)) if r != q]
        lst = self.lists[q]
        for h in range(len(lst) + 1):
            while work:
                r = work.pop()
                wr, sr, j = waits[r], sigs[r], heads[r]
                n = len(wr)
                while j < n:
                    for s, v in wr[j]:
                        if values[s] < v:
                            waiting.setdefault(s, []).append(r)
                            break
                    else:
                        for s, k in sr[j]:
                            values[s] += k
                            if s in waiting:
                                work += waiting.pop(s)
                        j += 1
                        continue
                    break
                heads[r] = j
            if h == len(lst):
                break
            ins = lst[h]
            if id(ins) in wanted:
                heads[q] = h
                out[id(ins)] = heads[:]
            for s, k in ins.signal:  # its waits are met: the launch has no deadlock
                values[s] += k
                if s in waiting:
                    work += waiting.pop(s)
        return out
