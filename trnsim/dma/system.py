"""The chip's DMA: every core's engines and queues, the HBM stacks and the host link, as flows.

A transfer submitted at `t0` on queue `q` of core `c` is cut into per-engine pieces
(`descriptors.cut`); piece `i` on engine `e_i` needs `w_i = descriptors * descriptor_cost +
engine_bytes / (bandwidth * f)` seconds of its engine (`bandwidth` = store_bandwidth for a copy
into HBM, else engine_bandwidth; `f` = transpose_hbm_rate / transpose_sbuf_rate for a transpose
from HBM / SBUF, else 1; `engine_bytes` = max(src bytes, dst bytes): a cast moves the larger).
A queue is a two-stage pipeline, and the transfer is ONE fluid flow:

- setup: `S = transfer_setup + (k - 1) * engine_stagger` for a transfer touching k engines
  (descriptor generation and dispatch, the engines' starts staggered). A queue sets up one
  transfer at a time, from `max(t0, the end of its previous setup)`, while earlier transfers
  move their data: so S bounds the rate at which the queue's transfers go through (small
  transfers cost S each, whatever their bytes) but not its bandwidth;
- data: it starts when its setup is done and the previous transfer on queue (c, q) has finished
  its data phase (queues are FIFO);
- its work is its bottleneck piece's, `W = max_i w_i`, and it progresses at rate `r`
  (engine-seconds per second, <= 1) using each engine it touches with coefficient `w_i / W`
  (1 for every engine when the copy covers its engines evenly, the usual case) and each HBM
  stack with coefficient `hbm_bytes_on_that_stack / W` (bytes per engine-second: src bytes on
  the source's stack, dst bytes on the destination's; both on one stack when they share it).
  An engine is a resource of capacity 1 and a stack one of `hbm.bandwidth / stacks` bytes/s;
  rates are max-min fair (`fluid`), so k transfers busy on an engine get 1/k of it each
  (round-robin between its queues = processor sharing) and a stack is shared fairly.

This gives the times of a flow per piece (and per-(queue, engine) FIFO) whenever a transfer's
pieces would keep one pace anyway: equal pieces on equally busy engines, the usual case. The
approximation is for the others: pieces progress in lockstep, so a piece smaller than the
bottleneck no longer finishes early and frees its engine (or its share of the stack) before the
transfer ends; contention on its engine slows the whole transfer where the piece alone could
have lagged behind without delaying it; and the queue's next transfer waits for all pieces.

When the data phase ends the queue's next transfer may start; `load_completion_latency` (or
`store_completion_latency` for a copy into HBM) later the transfer completes: values are copied
(functional mode), one span is recorded on track `q<queue>` from `t0` to completion, the data phase
on each engine the transfer touched (`Recorder.dma_moves`, with `max(0, S - W)`, the time the setup
cost beyond the bytes), then `on_done()` is called. Host copies are one flow on the host link
(capacity `host_link.bandwidth`, shared by concurrent copies) and the HBM stack, after
`host_link.latency`; they record HBM bytes and counters but no span (the stream that issued the copy
owns its timing and records it). A copy whose values cannot be copied (a gather's index out of
range) raises then, with no span and no `on_done()`, having left the count in flight; inside the
fluid update (no completion latency) the update finishes first (`fluid`). Per-queue statistics
(busy time, bytes, transfers) are derived from the spans (`report.summary`).

Ties: flows are keyed (core, queue, submit order) (host copies: queue -1), so transfers that end
at the same ps complete in that order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from trnsim.config import ChipConfig
from trnsim.dma.checks import check_copy, check_host_copy
from trnsim.dma.descriptors import cut, gathered
from trnsim.dma.fluid import Flow, FluidModel
from trnsim.dma.lanes import CopyPlan, Lane, Transfer
from trnsim.errors import SimError
from trnsim.isa import DmaCopy
from trnsim.memory.buffer import Ref
from trnsim.memory.hbm import Hbm
from trnsim.report.recorder import DmaMove, Recorder, Span
from trnsim.units import PS_PER_S, seconds_to_ps


class DmaSystem:
    """All DMA of one chip: `check` copies when kernels are built, `submit` them while running."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: ChipConfig,
        hbm: Hbm,
        recorder: Recorder,
        fluid: FluidModel | None = None,
    ):
        """`fluid`: a fluid model shared with other chips (a `trnsim.system.System`'s), whose
        owner then calls `sample()` after each change; by default the chip has its own."""
        self.env, self.cfg, self.hbm, self.rec = env, cfg, hbm, recorder
        d = cfg.core.dma
        self.engines = d.engines
        if fluid is None:
            self.fluid = FluidModel(env)
            self.fluid.on_change = self._sample
        else:
            self.fluid = fluid
        # engine (c, e) is resource engine_base + c * E + e: capacity one engine-second per second
        self.engine_base = len(self.fluid.capacity)
        for _ in range(cfg.cores * d.engines):
            self.fluid.add_resource(1.0, watched=False)  # (only the stacks are sampled)
        stack_rate = cfg.hbm.bandwidth / cfg.hbm.stacks / PS_PER_S  # bytes per ps
        self._stack_rid = [self.fluid.add_resource(stack_rate) for _ in range(cfg.hbm.stacks)]
        """The fluid resource of each HBM stack (bytes per ps)."""
        self._host_rid = self.fluid.add_resource(1.0)
        self._setup_ps = seconds_to_ps(d.transfer_setup)
        self._stagger_ps = seconds_to_ps(d.engine_stagger)
        self._latency_ps = (
            seconds_to_ps(d.load_completion_latency),
            seconds_to_ps(d.store_completion_latency),
        )
        self._desc_ps = d.descriptor_cost * PS_PER_S
        self._engine_bpps = (d.engine_bandwidth / PS_PER_S, d.store_bandwidth / PS_PER_S)
        self._host_bpps = cfg.host_link.bandwidth / PS_PER_S
        self._host_ps = seconds_to_ps(cfg.host_link.latency)
        self._lanes: dict[tuple[int, int], Lane] = {}
        self._plans: dict[tuple, CopyPlan] = {}  # (src, dst, transpose, core) -> plan
        self._engine_plans: dict[tuple, tuple] = {}  # (id(pieces), ...) -> _engine_plan(...)
        self._wakeup: tuple = (-1, [])  # (ps, queues): the last timeout for setups' ends
        self._seq = 0
        self._last_rate = [0.0] * cfg.hbm.stacks  # bytes/s each stack was last recorded at
        self._last_load = [0.0] * cfg.hbm.stacks  # its fluid load (bytes/ps) then
        self.in_flight = 0  # transfers submitted and not yet finished

    # -- the state a launch starts from (for `trnsim.runtime.reuse`) -----------------------------

    def idle(self) -> bool:
        """Nothing in flight: no transfer, flow or timer pending."""
        return not self.in_flight and self.fluid.idle()

    @property
    def starts_later(self) -> bool:
        """Does every transfer start moving data strictly after it is submitted (a non-zero
        setup, and host-link latency)? Then no HBM sample falls at the instant work starts."""
        return self._setup_ps > 0 and self._host_ps > 0

    @property
    def sampled(self) -> tuple:
        """The HBM rates last recorded (what the next samples are compared with)."""
        return tuple(self._last_rate), tuple(self._last_load)

    @sampled.setter
    def sampled(self, value: tuple) -> None:
        self._last_rate, self._last_load = list(value[0]), list(value[1])

    # -- checks --------------------------------------------------------------------------------

    def check(self, ins: DmaCopy, core: int) -> None:
        """Raise SimError (message starts with `ins.label`) if the copy cannot run on `core`."""
        check_copy(ins, self.cfg)
        for ref in (ins.src, ins.dst):
            if ref.memory == "hbm":
                self.hbm.stack_of(ref.buf.offset)

    # -- submitting ----------------------------------------------------------------------------

    def submit(
        self,
        core: int,
        queue: int,
        ins: DmaCopy,
        kernel: str,
        on_done: Callable[[], None],
        index: int | None = None,
    ) -> None:
        """Start transfer `ins` on `queue` of `core` now; `on_done()` runs when it completes.

        `ins` must have passed `check`. Transfers on one queue move their data in submit order;
        `kernel` names the span's kernel, `index` its instruction (default `ins.index`: the
        planner shares one bound instruction between identical copies, so it passes each
        copy's own index instead of copying the instruction).
        """
        src, dst = ins.src, ins.dst
        # Identical instructions share their bound operands (core.prepare), so the operands'
        # identities key the plan: each distinct copy is cut and costed once per core.
        plan = self._plans.get((src, dst, ins.transpose, ins.indices, core))
        if plan is None:
            plan = self._plan(ins, core)
        lane = self._lanes.get((core, queue))
        if lane is None:
            lane = self._lanes[(core, queue)] = Lane(queue)
        t = Transfer(
            core,
            queue,
            ins,
            ins.index if index is None else index,
            kernel,
            on_done,
            self.env.now,
            src,
            dst,
            ins.transpose,
            lane,
            plan.costs,
        )
        t.plan = plan
        t.flow = Flow((core, queue, self._seq), plan.work, plan.uses, math.inf, self._data_done, t)
        self._seq += 1
        self.in_flight += 1
        now = self.env.now
        t.ready_at = lane.setup_free = (
            lane.setup_free if lane.setup_free > now else now
        ) + plan.setup
        lane.waiting.append(t)
        if not lane.busy and len(lane.waiting) == 1:
            self._kick(lane)

    def submit_host(self, core: int, src: Ref, dst: Ref, on_done: Callable[[], None]) -> None:
        """Copy between host memory and HBM over the host link, for `core`'s stream.

        Takes `host_link.latency`, then moves max(src, dst) bytes at the link's rate (shared
        with concurrent host copies) and the HBM stack's.
        """
        check_host_copy(src, dst)
        t = Transfer(
            core,
            -1,
            None,
            -1,
            "",
            on_done,
            self.env.now,
            src,
            dst,
            False,
            None,
            self._costs(src, dst),
        )
        work = max(max(src.nbytes, dst.nbytes) / self._host_bpps, 1e-9)
        uses = ((self._host_rid, 1.0),) + self._hbm_uses(src, dst, src.nbytes, dst.nbytes, work)
        flow = t.flow = Flow((core, -1, self._seq), work, uses, math.inf, self._data_done, t)
        self._seq += 1
        self.in_flight += 1
        self.env.timeout(self._host_ps).callbacks.append(lambda _ev: self.fluid.start(flow))

    def _plan(self, ins: DmaCopy, core: int) -> CopyPlan:
        """The copy's plan on `core`, cached per distinct copy and core."""
        src, dst = ins.src, ins.dst
        key = (src, dst, ins.transpose, ins.indices, core)
        if ins.indices is not None:  # a gather moves one row of src per index
            src = gathered(src, ins.indices.size, dst.size // ins.indices.size)
        pieces = cut(src, dst, ins.transpose, self.cfg.core.dma, self.cfg.core.sbuf.partitions)
        store = dst.memory == "hbm"
        sk = (id(pieces), ins.transpose and src.memory, store, core)
        shared = self._engine_plans.get(sk)
        if shared is None or shared[0] is not pieces:
            shared = self._engine_plans[sk] = self._engine_plan(
                pieces, ins.transpose, src, store, core
            )
        _, work, uses, src_bytes, dst_bytes, engines, setup = shared
        plan = self._plans[key] = CopyPlan(
            work,
            uses + self._hbm_uses(src, dst, src_bytes, dst_bytes, work),
            self._costs(src, dst),
            setup,
            self._latency_ps[store],
            engines,
            max(0, setup - math.ceil(work)),
        )
        return plan

    def _engine_plan(self, pieces: tuple, transpose: bool, src: Ref, store: bool, core: int):
        """(pieces, work, engine uses, src bytes, dst bytes, engines, setup) of a copy cut into
        `pieces` on `core`: the same for every copy of one cut (`descriptors.cut` shares the
        pieces of copies alike), so reckoned once per cut (the per-piece sums were a tenth of
        a prefill layer's simulation when done per distinct copy)."""
        d = self.cfg.core.dma
        f = 1.0
        if transpose:
            f = d.transpose_hbm_rate if src.memory == "hbm" else d.transpose_sbuf_rate
        rate = self._engine_bpps[store] * f
        works = [p.descriptors * self._desc_ps + p.engine_bytes / rate for p in pieces]
        work = max(works)
        base = self.engine_base + core * self.engines
        uses = tuple((base + p.engine, w / work) for p, w in zip(pieces, works))
        setup = self._setup_ps + (len(pieces) - 1) * self._stagger_ps
        return (
            pieces,  # kept alive, so that its id keys this entry and no other
            work,
            uses,
            sum(p.src_bytes for p in pieces),
            sum(p.dst_bytes for p in pieces),
            tuple([p.engine for p in pieces]),
            setup,
        )

    @staticmethod
    def _costs(src: Ref, dst: Ref) -> tuple[int, int, int, str]:
        """(HBM bytes read, HBM bytes written, span bytes, span dtype) of a copy, reckoned once
        per distinct copy: `_finish` records them for every transfer."""
        return (
            src.nbytes if src.memory == "hbm" else 0,
            dst.nbytes if dst.memory == "hbm" else 0,
            max(src.nbytes, dst.nbytes),
            dst.dtype.name,
        )

    def _hbm_uses(
        self, src: Ref, dst: Ref, src_bytes: int, dst_bytes: int, work: float
    ) -> tuple[tuple[int, float], ...]:
        """(stack resource, HBM bytes per unit of work) for the HBM endpoints of a flow."""
        uses: dict[int, float] = {}
        for ref, nbytes in ((src, src_bytes), (dst, dst_bytes)):
            if ref.memory == "hbm":
                rid = self._stack_rid[self.hbm.stack_of(ref.buf.offset)]
                uses[rid] = uses.get(rid, 0.0) + nbytes / work
        return tuple(uses.items())

    # -- progress ------------------------------------------------------------------------------

    def _ready(self, ev: simpy.Timeout) -> None:
        """The setups of the queues' head transfers are done: start them, in one update."""
        fluid = self.fluid
        fluid.hold()
        for lane in ev.value:
            self._kick(lane)
        fluid.release()

    def _kick(self, lane: Lane) -> None:
        """Start the queue's next transfer if the queue is free and its setup is done, or wake
        up when its setup will be done. A transfer whose setup ends while the one before it
        still moves data thus costs no event of its own: the end of that data phase starts it
        (in the same update of the fluid model)."""
        if lane.busy or not lane.waiting:
            return
        t = lane.waiting[0]
        now = self.env.now
        if t.ready_at <= now:
            lane.busy = True
            lane.waiting.popleft()
            t.data_start = now
            self.fluid.start(t.flow)
        else:
            # Wake up at ready_at. An idle queue is kicked again only by this wake-up (a submit
            # behind the head kicks nothing, no data phase is in progress to end), so its head
            # is armed once; queues armed one after another for one instant share the timeout.
            last = self._wakeup
            if last[0] == t.ready_at:
                last[1].append(lane)
            else:
                lanes = [lane]
                self._wakeup = (t.ready_at, lanes)
                self.env.timeout(t.ready_at - now, lanes).callbacks.append(self._ready)

    def _data_done(self, flow: Flow) -> None:
        t = flow.data
        t.flow = flow.data = None  # break the cycle: reference counting frees both now
        lane = t.lane
        if lane is None:  # a host copy
            self._finish(t)
            return
        lane.busy = False
        self._kick(lane)
        plan = t.plan
        self.rec.dma_move(
            DmaMove(
                t.core,
                t.queue,
                plan.engines,
                t.data_start,
                self.env.now,
                plan.overhead,
                t.index,
                t.kernel,
            )
        )
        if plan.latency:
            self.env.timeout(plan.latency, t).callbacks.append(self._complete)
        else:
            self._finish(t)

    def _complete(self, ev: simpy.Timeout) -> None:
        self._finish(ev.value)

    def _finish(self, t: Transfer) -> None:
        """Copy the values, record the transfer, tell its issuer. It leaves the count of
        transfers in flight first: a copy that raises (a gather's index out of range) must not
        keep the DMA busy for ever (timeline reuse waits for it to be idle)."""
        self.in_flight -= 1
        src, dst = t.src, t.dst
        if src.buf.array is not None and dst.buf.array is not None:
            gather = t.ins.indices if t.ins is not None else None
            v = src.read() if gather is None else _gather(src, dst, gather, t.ins.label)
            if t.transpose:
                v = v.T
            elif src.dtype.name != dst.dtype.name:
                v = v.astype(np.float32)  # DMA casts src -> fp32 -> dst
            dst.write(v)
        read, written, nbytes, dtype = t.costs
        self.rec.hbm_traffic(read, written)
        if t.ins is not None:
            self.rec.add_span(
                Span(
                    t.core,
                    t.lane.track,
                    "dma_copy",
                    t.start,
                    self.env.now,
                    nbytes,
                    0,
                    t.index,
                    t.kernel,
                    dtype,
                )
            )
        t.on_done()

    @property
    def stack_resources(self) -> list[int]:
        """The fluid resource id of each HBM stack (capacity in bytes per ps)."""
        return self._stack_rid

    def sample(self) -> None:
        """Record the HBM stacks' rates if they changed (the owner of a shared fluid model
        calls it after each change)."""
        self._sample()

    def _sample(self) -> None:
        """Record a sample of each stack whose total rate (bytes/s) changed.

        Most updates leave most stacks' loads exactly as they were last recorded: those are
        skipped before the rate and the tolerance are computed."""
        load, last_load = self.fluid.load, self._last_load
        for s, rid in enumerate(self._stack_rid):
            used = load.get(rid, 0.0)
            if used == last_load[s]:
                continue
            rate = used * PS_PER_S
            if abs(rate - self._last_rate[s]) <= 1e-9 * max(rate, self._last_rate[s]):
                continue
            self._last_rate[s], last_load[s] = rate, used
            self.rec.hbm_sample(self.env.now, s, rate)


def _gather(src: Ref, dst: Ref, indices: Ref, label: str) -> np.ndarray:
    """The rows of src (in flat order, of dst.size / indices.size elements) that `indices`
    name, in their order."""
    idx = indices.read().reshape(-1).astype(np.int64)
    table = src.read().reshape(-1, dst.size // idx.size)
    bad = idx[(idx < 0) | (idx >= len(table))]
    if bad.size:
        raise SimError(
            f"{label}: gather index {int(bad[0])} is out of range 0..{len(table) - 1} (src '{src}')"
        )
    return table[idx]
