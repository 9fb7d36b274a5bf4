"""A compiled aten graph on `neuron`: its kernels captured once and replayed as one runtime Graph.

`CompiledGraph(gm)` is what the "neuron" backend (`compile`) returns for each forward and
backward graph. Every call runs the graph's nodes on the device for their values (PyTorch's CPU
kernels, as eager), captured rather than launched (`listeners.Listeners.capture`):

- the first call with an input signature (shapes, strides, dtypes, the current stream) collects
  the ops (`Collector`), plans them (`plan`): the library-lowerable ops (`aten.library_ops`) in
  runs of `fusion.chains` (consecutive elementwise ops of one shape), each run one kernel
  lowered together and measured once (`measure.Measurements.lowering`); every other op one kernel
  timed by its roofline estimate, as eager times it; and captures the kernels as one runtime
  `Graph` on the current stream;
- every call replays that Graph: one host launch, then a kernel start at most every
  `graph_launch_overhead` on the device, instead of `launch_overhead` of host time per op.
  Without graphs (`graphs=False`: torch.compile's mode "max-autotune-no-cudagraphs") every
  call launches the planned kernels one by one instead, each paying a host launch, as
  inductor's kernels do without CUDA graphs.

A fused run keeps its intermediates on chip (read from HBM never); one that no later op and no
graph output reads is not written to HBM either (it is renamed to the run's last output, which
the run then writes once), unless its value is still needed while the last output's buffer
holds another (`_drop_dead`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trnsim.errors import TrnsimError
from trnsim.kernels import BINARY, UNARY
from trnsim.kernels.fusion import chains
from trnsim.torch import timing
from trnsim.torch.aten import library_ops
from trnsim.torch.listeners import Listener, OpRun
from trnsim.torch.measure import spec
from trnsim.torch.tensors import cpu_view
from trnsim.trace.ops import OPS
from trnsim.trace.program import OpSpec

Tensor = torch.Tensor
FAILS = (TrnsimError, KeyError, ValueError, IndexError, TypeError, AttributeError, RuntimeError)


@dataclass
class Item:
    """One aten op of the graph: its library ops over graph-wide tensor names (None: not
    lowered) and its roofline estimate (ps)."""

    name: str
    ops: list[OpSpec] | None
    estimate: int
    modelled: bool = False  # the estimate is the library's (a device copy)


@dataclass
class Collector(Listener):
    """The capturing listener of a graph's first run (`Listeners.capture`): each op's library
    ops, its tensors named once for the whole graph (by storage, offset, shape, stride and
    dtype)."""

    timer: timing.OpTimer
    items: list[Item] = field(default_factory=list)
    specs: dict = field(default_factory=dict)  # graph name -> TensorSpec
    storage: dict = field(default_factory=dict)  # graph name -> storage address (None: meta)
    names: dict = field(default_factory=dict)  # tensor key -> graph name
    keep: list = field(default_factory=list)  # the run's tensors, alive: no address reused
    fresh: list = field(default_factory=list)  # the CPU results the current node was timed with

    def op(self, run: OpRun) -> None:
        name, args, kwargs, r = run.name, run.args, run.kwargs, run.result
        self.keep.append((args, kwargs, r))
        self.fresh = [x for x in (r if isinstance(r, (list, tuple)) else [r])
                      if isinstance(x, Tensor)]  # fmt: skip
        est = self.timer.measure.estimate(name, args, kwargs, r).duration_ps
        base, _, overload = name.partition(".")
        try:
            lowered = library_ops(base, overload, args, kwargs, r)
            ops = self._rename(*lowered) if lowered is not None else None
        except FAILS:
            ops = None  # as eager: arguments the library's ops cannot take
        self.items.append(Item(name, ops, est))

    def copy(self, run: OpRun) -> None:
        """A copy during the graph: a kernel of the time eager gives it."""
        src, dst = run.args
        self.keep.append((src, dst))
        m = self.timer.measure.copy(src, dst)[1]
        self.items.append(Item("copy", None, m.duration_ps, m.modelled))

    def bind(self, result) -> None:
        """A node ran: its device results are the CPU results its op was timed with (the
        kernel copies a new result to the device), so they take those tensors' names."""
        outs = [x for x in (result if isinstance(result, (list, tuple)) else [result])
                if isinstance(x, Tensor) and x.device.type == "neuron"]  # fmt: skip
        for r, d in zip(self.fresh, outs):
            k = _key(r)
            if k in self.names and r.shape == d.shape and r.dtype == d.dtype:
                self.names.setdefault(_key(cpu_view(d)), self.names[k])
        self.keep.append(result)
        self.fresh = []

    def _rename(self, ops: list[OpSpec], tensors: dict) -> list[OpSpec] | None:
        local = {}
        for k, t in tensors.items():
            s = spec(k, t)
            if s is None:
                return None  # a dtype the library does not take
            local[k] = self._name(t, s)
        out = []
        for op in ops:
            args = {}
            for k, v in op.args.items():
                if isinstance(v, str) and v in local:
                    v = local[v]
                elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                    v = [local.get(x, x) for x in v]
                args[k] = v
            out.append(OpSpec(op.op, args))
        return out

    def _name(self, t: Tensor, spec) -> str:
        key = _key(t)
        where = None if t.is_meta else key[0]
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = f"t{len(self.names)}"
            self.specs[name] = type(spec)(name, spec.shape, spec.dtype)
            self.storage[name] = where
        return name


def _key(t: Tensor) -> tuple:
    """A tensor's identity in a graph: its bytes' host address, offset, shape, stride and
    dtype (a new tensor's for a meta one)."""
    if t.is_meta:
        return ("meta", id(t))
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
            t.dtype)  # fmt: skip


class Collecting(torch.fx.Interpreter):
    """The graph's first run, node by node, so each node's results are bound to the tensors
    its op was timed with (`Collector.bind`)."""

    def __init__(self, gm, sink: Collector):
        super().__init__(gm, garbage_collect_values=False)
        self.sink = sink

    def run_node(self, n):
        self.sink.fresh = []
        result = super().run_node(n)
        if n.op == "call_function":
            self.sink.bind(result)
        return result


class Mute(Listener):
    """The capturing listener of a replayed call: the ops compute their values, launch
    nothing (the captured graph launches)."""


@dataclass
class Kernel:
    """One kernel of a plan: its name, device time (ps), whether the library modelled it, and
    the lowered kernel with its buffers (for `timing="simulate"`)."""

    name: str
    duration_ps: int
    modelled: bool
    program: tuple | None = None


def _outputs(out) -> set:
    """Host addresses of the bytes of a graph's output tensors (as `Collector` names them)."""
    items = out if isinstance(out, (list, tuple)) else [out]
    return {
        cpu_view(t).untyped_storage().data_ptr()
        for t in items
        if isinstance(t, Tensor) and t.device.type == "neuron"
    }


def plan(c: Collector, out, timer: timing.OpTimer) -> list[Kernel]:
    """The graph's kernels in order (module doc)."""
    kernels: list[Kernel] = []
    live = _outputs(out)
    group: list[tuple[OpSpec, Item]] = []
    for item in [*_schedule(c.items, c.specs, c.storage), None]:
        if item is not None and item.ops is not None:
            group += [(op, item) for op in item.ops]
            continue
        kernels += _group_kernels(group, c, live, timer)
        group = []
        if item is not None:
            kernels.append(_estimated(item))
    return kernels


def _shape(item: Item, specs: dict) -> tuple | None:
    """The shape of an elementwise op every tensor of which has it (one `fusion.chains` can
    join), else None."""
    if item.ops is None or len(item.ops) != 1:
        return None
    op = item.ops[0]
    if op.op not in UNARY and op.op not in BINARY:
        return None
    names = _names(op)
    shapes = {tuple(specs[n].shape) for n in names if n in specs}
    return shapes.pop() if len(shapes) == 1 else None


def _schedule(items: list[Item], specs: dict, storage: dict) -> list[Item]:
    """The items with each elementwise op moved down to just before its first reader when that
    reader is an elementwise op of its shape (so `chains` fuses them: gelu(a(x)) * g(x) runs
    a, g, then gelu+mul) and no op in between touches its tensors' bytes, through any view
    (aten graphs from aot_autograd are functional: only copies at their end write inputs)."""

    def touched(ops) -> set:
        return {storage[n] or n for op in ops for n in _names(op) if n in storage}

    items = list(items)
    i = len(items) - 1
    while i >= 0:
        item, shape = items[i], _shape(items[i], specs)
        if shape is not None:
            mine = touched(item.ops)
            out = item.ops[0].args["out"]
            j = i + 1
            while j < len(items) and items[j].ops is not None and not mine & touched(items[j].ops):
                j += 1
            if (j > i + 1 and j < len(items) and _shape(items[j], specs) == shape
                    and out in _reads(items[j].ops[0])):  # fmt: skip
                items.insert(j - 1, items.pop(i))
        i -= 1
    return items


def _group_kernels(group, c: Collector, live: set, timer) -> list[Kernel]:
    """A run of consecutive lowerable ops as kernels: one per `fusion.chains` run (its ops one
    by one if the library refuses them together; an op it refuses: its estimate)."""
    if not group:
        return []
    ops = [op for op, _ in group]
    item_of = {id(op): item for op, item in group}
    out, start = [], 0
    for run in chains(ops, c.specs):
        later = ops[start + len(run) :]
        start += len(run)
        items = list({id(item_of[id(op)]): item_of[id(op)] for op in run}.values())
        fused = _drop_dead(run, later, c, live) if len(run) > 1 else run
        k = _measure(fused, "+".join(dict.fromkeys(i.name for i in items)), c, timer)
        if k is not None:
            out.append(k)
        elif len(run) > 1 and len(items) == len(run):
            out += [_measure([op], item_of[id(op)].name, c, timer) or _estimated(item_of[id(op)])
                    for op in run]  # fmt: skip
        else:
            out += [_estimated(i) for i in items]
    return out


def _estimated(item: Item) -> Kernel:
    return Kernel(item.name, item.estimate, item.modelled)


def _reads(op: OpSpec) -> set:
    return set(OPS[op.op].reads(op.args))


def _drop_dead(run: list[OpSpec], later: list[OpSpec], c: Collector, live: set):
    """The run with tensors it writes that nothing after it reads (no later op, no graph
    output, by storage) renamed to the run's last output: the fused kernel never writes them.
    The renamed tensors share the last output's buffer, so a dead tensor takes its name only
    when it has the last output's dtype and none of them holds a value the run still reads at
    any point of its own (`_spans`): in gelu(h) + 0.5 * h the add reads both the gelu's and
    the multiply's results, so the multiply's keeps its name (and is written); renamed too, it
    would overwrite the gelu's before the add reads it."""
    last = run[-1].args["out"]
    read_later = set().union(*(_reads(op) for op in later)) if later else set()
    storages = {c.storage[n] for n in read_later if n in c.storage} | live
    dead = [
        n
        for n in dict.fromkeys(op.args["out"] for op in run[:-1])
        if n != last
        and n not in read_later
        and (c.storage[n] is None or c.storage[n] not in storages)
    ]
    spans = _spans(run, last)
    taken = [spans[last]]
    ren = {}
    for n in sorted(dead, key=lambda n: spans[n][1]):  # the earliest end first: the most fit
        start, end = spans[n]
        same = c.specs[n].dtype == c.specs[last].dtype  # the values the run computes
        if same and start >= 0 and not any(start <= e and s <= end for s, e in taken):
            ren[n] = last
            taken.append((start, end))
    if not ren:
        return run
    return [
        OpSpec(op.op, {k: ren.get(v, v) if isinstance(v, str) else v for k, v in op.args.items()})
        for op in run
    ]


def _spans(run: list[OpSpec], last: str) -> dict[str, tuple[int, int]]:
    """Per tensor of the run, the points from its first access to its last (op i reads at 2 i
    and writes at 2 i + 1); -1 for a tensor read before the run writes it (its value is from
    before the run), the run's end for `last` (its final value is stored)."""
    spans: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(run):
        for _, n, kind in OPS[op.op].accesses(op.args):
            at = 2 * i + (kind == "w")
            start = spans[n][0] if n in spans else (at if kind == "w" else -1)
            spans[n] = (start, at)
    spans[last] = (spans[last][0], 2 * len(run))
    return spans


def _measure(run: list[OpSpec], name: str, c: Collector, timer) -> Kernel | None:
    """The run lowered as one kernel and simulated once (memoised by its ops and tensors)."""
    used = list(dict.fromkeys(n for op in run for n in _names(op) if n in c.specs))
    specs = {n: c.specs[n] for n in used}
    # the report says why a single op was estimated, as eager's does
    m = timer.measure.lowering(name, run, specs, refuse_as=name if len(run) == 1 else None)
    if m is None:
        return None
    program = (m.kernel, timer.measure.buffers(m)) if timer.simulate else None
    return Kernel(name, m.duration_ps, True, program)


def _names(op: OpSpec) -> list[str]:
    return [n for _, n, _ in OPS[op.op].accesses(op.args)]


@dataclass
class Captured:
    """A plan captured as a runtime Graph on one stream (or, `stream` given, launched kernel by
    kernel on it)."""

    kernels: list[Kernel]
    graph: object
    stream: object = None

    def replay(self, timer: timing.OpTimer) -> None:
        """One host launch of the graph (or one per kernel); its kernels counted in the timer's
        statistics."""
        if self.graph is not None:
            self.graph.replay()
        elif self.stream is not None:
            _launch(self.kernels, self.stream)
        for k in self.kernels:
            timer.count(k.name, k.duration_ps, k.modelled)


def capture(kernels: list[Kernel], stream) -> Captured:
    """The kernels as one runtime Graph on `stream`: timed launches, or in
    `timing="simulate"` the lowered programs over their kept buffers."""
    if not kernels:
        return Captured(kernels, None)
    g = stream.device.graph()
    with g.capture(stream):
        _launch(kernels, stream)
    return Captured(kernels, g)


def _launch(kernels: list[Kernel], stream) -> None:
    for k in kernels:
        if k.program is not None:
            stream.launch(k.program[0], k.program[1], timing_only=True)
        else:
            stream.launch_timed(k.name, k.duration_ps)


def _signature(args) -> tuple:
    """What a captured graph depends on: its tensors' devices, shapes, strides and dtypes."""
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append((a.device.type, tuple(a.shape), a.stride(), a.dtype))
        else:
            out.append(type(a))
    return tuple(out)


class CompiledGraph:
    """The callable a compiled aten graph becomes (module doc); boxed (takes the argument
    list), as aot_autograd calls it."""

    def __init__(self, gm: torch.fx.GraphModule, graphs: bool = True):
        self._boxed_call = True  # an instance's: wrappers (functools.wraps) copy it
        self.gm = gm
        self.graphs = graphs  # False: the kernels launched one by one (no runtime Graph)
        self.captured: dict = {}  # (input signature, stream) -> Captured

    def __call__(self, args: list):
        timer = timing.timer()
        if timer.listeners:
            return self.gm(*args)  # op by op, as eager: each op profiled or recorded
        stream = timer.stream()
        key = (_signature(args), stream)
        hit = self.captured.get(key)
        sink = Mute() if hit is not None else Collector(timer)
        with timer.listeners.capture(sink):
            out = self.gm(*args) if hit is not None else Collecting(self.gm, sink).run(*args)
        if hit is None:
            kernels = plan(sink, out, timer)
            hit = capture(kernels, stream) if self.graphs else Captured(kernels, None, stream)
            self.captured[key] = hit
        hit.replay(timer)
        return out
