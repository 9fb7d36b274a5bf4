"""Spreading a kernel's passes over VectorE, GpSimd and ScalarE by their own cost models.

A pass that more than one engine can run (a `tensor_tensor` on VectorE or GpSimd, a
`tensor_scalar` on either or, for a multiply-add, on ScalarE) goes to the engine that would
finish it first: the one whose work so far plus the pass's cost (`balance.cost_ns`, the
engine's own model: clocks, 16-bit fast modes, the fixed cost of a waiting instruction) is
least. Over the blocks of a kernel the engines' shares even out, and the choice follows the
chip (VectorE's fp32 `tensor_tensor` costs 2 cycles of 0.96 GHz on NC-v3, GpSimd's 2 of
1.2 GHz; a bf16 one is one VectorE cycle).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.engines.scalar import LIMITED_TS
from trnsim.isa import Activation, Ap, Engine, Instr, Select, TensorScalar, TensorTensor
from trnsim.kernels.balance import cost_ns
from trnsim.kernels.builder import KernelBuilder

__all__ = ["Spread", "V", "G", "S"]

V, G, S = Engine.VECTOR, Engine.GPSIMD, Engine.SCALAR
_ALL = (V, G, S)


class Spread:
    """The engines' work so far (ns) for one lowering; `emit` puts each pass on the engine
    that finishes it first among those allowed."""

    def __init__(self, b: KernelBuilder, cfg: ChipConfig):
        self.b, self.cfg = b, cfg
        self.load = {e: 0.0 for e in _ALL}
        self._costs: dict[tuple, float] = {}
        self._writer: dict[str, Engine | None] = {}  # tile -> the engine that wrote it last
        self._readers: dict[str, set] = {}  # tile -> engines that read it since that write
        self._seen: dict[Engine, set] = {e: set() for e in _ALL}  # tiles an engine waited for

    def tt(self, alu: str, a: Ap, c: Ap, dst: Ap, engines=(V, G)) -> Engine:
        """dst = a <alu> c."""
        return self.emit(TensorTensor, [a, c], [dst], engines, alu=alu, src0=a, src1=c, dst=dst)

    def ts(self, src: Ap, dst: Ap, op0: str, v0, op1=None, v1=None, engines=(V, G, S)) -> Engine:
        """dst = (src <op0> v0) <op1> v1; ScalarE only for the pairs its tensor_scalar takes."""
        if not self.cfg.core.scalar.tensor_scalar_any_ops and (op0, op1) not in LIMITED_TS:
            engines = tuple(e for e in engines if e is not S)
        reads = [src] + [v for v in (v0, v1) if isinstance(v, Ap)]
        more = {"op1": op1, "operand1": v1} if op1 is not None else {}
        return self.emit(TensorScalar, reads, [dst], engines, src=src, dst=dst, op0=op0,
                         operand0=v0, **more)  # fmt: skip

    def act(self, func: str, src: Ap, dst: Ap, scale=1.0, bias=0.0) -> Engine:
        """dst = func(src * scale + bias) on ScalarE."""
        reads = [src] + [v for v in (scale, bias) if isinstance(v, Ap)]
        return self.emit(Activation, reads, [dst], (S,), func=func, src=src, dst=dst,
                         scale=scale, bias=bias)  # fmt: skip

    def select(self, pred: Ap, on_true: Ap, on_false, dst: Ap) -> Engine:
        """dst = on_true where pred else on_false (a tile or a number); VectorE."""
        reads = [pred, on_true] + ([on_false] if isinstance(on_false, Ap) else [])
        return self.emit(Select, reads, [dst], (V,), predicate=pred, on_true=on_true,
                         on_false=on_false, dst=dst)  # fmt: skip

    def emit(self, cls: type[Instr], reads: list[Ap], writes: list[Ap], engines, **fields):
        """`cls(**fields)` on the engine among `engines` that would finish it first."""
        if any(self.b.tiles[a.name].memory != "sbuf" for a in reads + writes):
            engines = tuple(e for e in engines if e is not G) or engines  # GpSimd: SBUF only
        best, when = engines[0], None
        for e in engines:
            t = self.load[e] + self.cost(cls, e, fields, self._waits(e, reads, writes))
            if when is None or t < when:
                best, when = e, t
        self.load[best] = when
        self.b.emit(cls, reads, writes, engine=best, **fields)
        for a in reads:
            self._readers.setdefault(a.name, set()).add(best)
            self._seen[best].add(a.name)
        for a in writes:
            self._writer[a.name], self._readers[a.name] = best, set()
            for e in _ALL:
                self._seen[e].discard(a.name)
        return best

    def _waits(self, e: Engine, reads: list[Ap], writes: list[Ap]) -> bool:
        """Whether the pass would wait on a semaphore on engine `e` (and pay the engine's fixed
        cost): it reads a tile another engine or a DMA wrote since `e` last read it, or writes
        one another engine read since its last write (what the builder derives, roughly)."""
        seen = self._seen[e]
        for a in reads:
            if self._writer.get(a.name) is not e and a.name not in seen:
                return True
        return any(self._readers.get(a.name, set()) - {e} for a in writes)

    def cost(self, cls: type[Instr], engine: Engine, fields: dict, waits: bool = True) -> float:
        """ns of `cls(**fields)` on `engine` (memoised by the operands' dtypes and shapes)."""
        key = (cls, engine, waits, *(self._key(v) for v in fields.values()))
        ns = self._costs.get(key)
        if ns is None:
            ns = self._costs[key] = cost_ns(self.b, self.cfg, cls, engine, waits, **fields)
        return ns

    def _key(self, v):
        if isinstance(v, Ap):
            t = self.b.tiles[v.name]
            return (t.dtype.name, t.shape, t.memory, v.index)
        return v

    def sync(self) -> None:
        """A phase boundary: every engine waits for the slowest (what comes next depends on
        all of it), so the next passes spread from even loads."""
        top = max(self.load.values())
        self.load = {e: top for e in self.load}

    def add(self, engine: Engine, ns: float) -> None:
        """Count `ns` of work emitted on `engine` outside `emit`."""
        self.load[engine] += ns
