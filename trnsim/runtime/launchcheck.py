"""A launch's tensors checked at the call, as CUDA reports invalid launch arguments at the launch
itself: a missing or ill-fitting tensor found only when the launch ran would surface at some
later synchronize, far from the call that caused it.

Every tensor the kernel's instructions name must be bound, and the kernel is planned for the
views given (its operands bound and every instruction checked, `NeuronCore.prepare`) without
computing values. The plan is the one a timing-only launch runs, so such a launch is planned
once; a launch computing values plans again with its values.
"""

from __future__ import annotations

import operator
import re
import weakref

import numpy as np

from trnsim.errors import SimError
from trnsim.isa import Ap
from trnsim.runtime.errors import InvalidValueError


class LaunchCheck:
    """Checks the launches of one device (`Device.bind_tensors`), remembering per kernel the
    tensors it names and the last launch found good."""

    def __init__(self, device):
        self.device = device
        self._names: dict[int, tuple] = {}  # id(kernel) -> (weak ref to it, tensor names)
        self._kernel = None  # the last launch found good: its kernel and Buffers
        self._bufs: tuple = ()

    def __call__(self, kernel, bound: dict, views: dict, timing_only: bool) -> None:
        """Raise InvalidValueError unless `kernel` can run with `bound` (name -> Buffer, from
        `views`, name -> TensorView)."""
        if kernel is self._kernel and len(self._bufs) == len(bound):
            if not bound or all(map(operator.is_, self._bufs, bound.values())):
                return  # relaunched as it was last checked
        names = self.names(kernel)
        missing = [n for n in names if n not in bound]
        if missing:
            s = len(missing) > 1
            raise InvalidValueError(
                f"launch {kernel.name}: tensor{'s' * s} {', '.join(map(repr, missing))} "
                f"{'are' if s else 'is'} not bound: the kernel uses {', '.join(names)}; the "
                f"launch binds {', '.join(bound) or 'none'}"
            )
        dev = self.device
        ctx = dev.ctx
        plan = bound
        if not timing_only and ctx.functional:  # planned without values, as timing-only
            plan = {n: v.bound(n, values=False) for n, v in views.items()}
        try:
            for core, prog in zip(ctx.chip.physical(dev.index), kernel.per_core):
                core.prepare(kernel.name, prog, plan, ctx.rng, ctx.source, timing_only=True)
        except SimError as e:
            if not views:  # the kernel's own fault (an SBUF overflow): the planner's error
                raise
            raise InvalidValueError(_message(kernel.name, str(e), names, views)) from None
        self._kernel, self._bufs = kernel, tuple(bound.values())

    def names(self, kernel) -> tuple[str, ...]:
        """The names the kernel's instructions use that are none of its tiles, in order of first
        use: the tensors a launch must bind."""
        hit = self._names.get(id(kernel))
        if hit is None or hit[0]() is not kernel:
            seen: dict[str, None] = {}
            for prog in kernel.per_core:
                for ins in prog.instructions:
                    for v in ins.op_getter()(ins):
                        if type(v) is Ap and v.name not in prog.tiles:
                            seen[v.name] = None
            hit = self._names[id(kernel)] = (weakref.ref(kernel), tuple(seen))
        return hit[1]


def _message(kernel: str, problem: str, names: tuple, views: dict) -> str:
    """The planner's `problem` with the tensors it names (else all the kernel's) and the views
    given for them."""
    problem = problem.removeprefix(f"kernel {kernel}, ")
    named = [n for n in names if re.search(_NAMED.format(n=re.escape(n)), problem)]
    if len(named) == 1:
        n = named[0]
        return f"launch {kernel}: tensor {n!r} (given {_given(views[n])}) does not fit: {problem}"
    given = "; ".join(f"{n}: {_given(views[n])}" for n in named or names)
    return f"launch {kernel}: {problem} (tensors given: {given or 'none'})"


# how the planner's messages name a bound tensor: an operand ('y', 'y[0:64, :]') or a buffer
# ("dim 0 of y (size 64)", "but y has 2 dims")
_NAMED = r"'{n}[\[']|\b(of|but) {n} (\(size|has)"


def _given(v) -> str:
    strides = "" if v.is_contiguous else f" with strides {list(v.strides)}"
    return f"a {list(v.shape)} {v.dtype.name} view{strides}"


def describe(x) -> str:
    """What was passed instead of a device view, for an error."""
    if isinstance(x, np.ndarray):
        return f"a numpy array {list(x.shape)} {x.dtype} (host memory: copy it to the device)"
    return f"{type(x).__name__} {x!r}"[:200]
