"""The `neuron` device's aten kernels: one per op that has a CPU kernel (a single boxed
fallback breaks on some paths), each running the CPU kernel on zero-copy CPU views of the
device memory, then telling the timer what ran.

What an op returns follows its schema: a fresh result becomes a new device tensor (its values
copied in), an in-place or `out=` result is the device tensor passed in, a view is a device
tensor over the input's storage with the CPU view's geometry. Mixing CPU and neuron tensors is
an error, as on CUDA, except 0-dim CPU tensors (scalars).
"""

from __future__ import annotations

import torch

from trnsim.torch import fused_cells
from trnsim.torch.private import all_op_names, has_kernel
from trnsim.torch.tensors import (
    _CPU_SET,
    _set_storage,
    block_of,
    contiguous_stride,
    cpu_view,
    empty,
    new_storage,
    on_storage,
    span,
    to_device,
)
from trnsim.torch.timing import launches, timer
from trnsim.torch.timing import record as timing_record

Tensor = torch.Tensor
CPU = torch.device("cpu")
NEW, SAME, VIEW = 0, 1, 2
MIXED = (
    "Expected all tensors to be on the same device, but found at least two devices, "
    "neuron:0 and cpu!"
)
_lib: torch.library.Library | None = None
# ops that move data between devices, or take storages: written by hand below
SPECIAL = {}


def _mixed(where: str) -> RuntimeError:
    return RuntimeError(f"{MIXED} (in {where})")


def to_cpu(seq, where: str, mix_ok: bool = False) -> list:
    """`seq` with every neuron tensor (also inside lists) replaced by its CPU view; a CPU tensor
    of one or more dims is an error unless `mix_ok`."""
    out = list(seq)
    last = view = None
    for i, a in enumerate(out):
        if isinstance(a, Tensor):
            if a is last:  # x + x: one view serves both
                out[i] = view
            elif not a.is_cpu:
                last, view = a, cpu_view(a)
                out[i] = view
            elif a.dim() and not mix_ok:
                raise _mixed(where)
        elif type(a) in (list, tuple) and a:
            out[i] = to_cpu(a, where, mix_ok)
    return out


class Plan:
    """What an op's schema says about its results and arguments, worked out once."""

    __slots__ = ("name", "rets", "outs", "factory", "tensor_args")

    def __init__(self, op):
        s = op._schema
        self.name = op.__name__  # e.g. "add.Tensor"
        sets = {}  # alias set -> (position or None, name)
        self.outs = []  # kwarg-only arguments written (out=, values=, indices=)
        names = set()
        for i, a in enumerate(s.arguments):
            pos = None if a.kwarg_only else i
            names.add(a.name)
            info = a.alias_info
            if info is not None and info.before_set:
                sets[next(iter(info.before_set))] = (pos, a.name)
                if info.is_write and a.kwarg_only:
                    self.outs.append(a.name)
        self.factory = "device" in names
        # positional Tensor arguments: a Python number may arrive there (below)
        self.tensor_args = tuple(
            i for i, a in enumerate(s.arguments)
            if not a.kwarg_only and isinstance(a.type, torch.TensorType)
        )  # fmt: skip
        self.rets = []
        for r in s.returns:
            info = r.alias_info
            if info is None:
                self.rets.append((NEW, None))
            elif info.is_write:
                self.rets.append((SAME, sets.get(next(iter(info.before_set), None))))
            else:
                self.rets.append((VIEW, sets.get(next(iter(info.before_set), None))))
        if len(s.returns) == 1 and str(s.returns[0].type).startswith("List") and self.rets:
            kind, _ = self.rets[0]
            if kind == VIEW and self.rets[0][1] is None:  # Tensor(a)[] of `Tensor(a -> *)`
                first = s.arguments[0]
                self.rets[0] = (VIEW, (0, first.name))


def _arg(args, kwargs, where):
    pos, name = where
    if pos is not None and pos < len(args):
        return args[pos]
    return kwargs[name]


def _view_of(base: Tensor, r):
    """Device tensors over `base`'s storage with CPU view `r`'s geometry (a list for lists);
    a result that does not share the device bytes after all is copied to a new tensor."""
    if isinstance(r, Tensor):
        if r.untyped_storage().data_ptr() != block_of(base).host_ptr:
            return to_device(r)
        st = base.untyped_storage()
        if torch.is_inference_mode_enabled() and not base.is_inference():
            # a view of a normal tensor is a normal tensor, also under inference_mode
            # (PyTorch's rule): the shell is made outside it, so autograd can share the
            # base's version counter with it
            with torch.inference_mode(False):
                return on_storage(st, r.storage_offset(), r.shape, r.stride(), r.dtype, r)
        return on_storage(st, r.storage_offset(), r.shape, r.stride(), r.dtype, r)
    return [_view_of(base, x) for x in r]


def _new(r):
    if isinstance(r, Tensor):
        return to_device(r)
    if type(r) in (list, tuple):
        return [_new(x) for x in r]
    return r


def make_kernel(op, plan: Plan, timer):
    """The PrivateUse1 kernel of `op`."""
    name, rets, outs, factory = plan.name, plan.rets, plan.outs, plan.factory
    single = len(rets) == 1
    if not launches(name, bool(rets) and all(k == VIEW for k, _ in rets)):
        timer = _untimed

    call = op._op  # the C++ operator itself: no Python frame of OpOverload.__call__
    new_tensor = single and rets[0][0] == NEW
    packet = getattr(torch.ops.aten, name.partition(".")[0])
    numbers = _scalar_positions(packet, plan.tensor_args)

    def kernel(*args, **kwargs):
        cargs = to_cpu(args, name)
        ckw = kwargs
        if kwargs:
            for v in kwargs.values():
                if isinstance(v, Tensor) or type(v) in (list, tuple):
                    ckw = dict(zip(kwargs, to_cpu(kwargs.values(), name)))
                    break
        on_cpu = False
        if factory:
            ckw = dict(ckw)
            dev = ckw.get("device")
            on_cpu = dev is not None and torch.device(dev).type == "cpu"
            if not on_cpu:
                ckw["device"] = CPU
            if ckw.get("pin_memory"):
                ckw["pin_memory"] = False
        temps = None
        if outs:
            temps = {k: torch.empty(0, dtype=kwargs[k].dtype) for k in outs if k in kwargs}
            ckw = {**ckw, **temps}
        if numbers and any(type(cargs[i]) in _NUMBERS for i in numbers if i < len(cargs)):
            # a wrapped number (`x % 5` reaches remainder.Tensor with a 0-dim "wrapped" 5),
            # which boxing hands to Python as a plain 5: the overload that takes it as a
            # Scalar gives CPU's result, type promotion included
            r = packet(*cargs, **ckw)
        else:
            r = call(*cargs, **ckw)
        if temps and all(kwargs[k].shape == t.shape for k, t in temps.items()):
            # the outs written first, then the timer told of them, not of the CPU temporaries
            # (a recording replays the op into the out tensor itself: DDP's bucket)
            for k, tmp in temps.items():
                _write_out(kwargs[k], tmp)
            swap = {id(t): kwargs[k] for k, t in temps.items()}
            timer(name, cargs, {k: swap.get(id(v), v) for k, v in ckw.items()}, _swapped(r, swap))
            temps = None
        else:
            timer(name, cargs, ckw, r)
        if new_tensor and not on_cpu and type(r) is Tensor:
            return to_device(r)
        if temps:
            for k, tmp in temps.items():
                _write_out(kwargs[k], tmp)
        if on_cpu:
            return r
        if single:
            return _result(rets[0], r, args, kwargs)
        if not rets:
            return r
        return tuple(_result(ret, x, args, kwargs) for ret, x in zip(rets, r))

    kernel.__name__ = f"neuron_{name}"
    return kernel


_NUMBERS = (int, float, bool, complex)


def _scalar_positions(packet, tensor_args: tuple) -> tuple:
    """Those of `tensor_args` (an overload's positional Tensor arguments) where another
    overload of the op takes a Scalar: only there can a wrapped number arrive, so only there
    does the per-call check look (most ops have none)."""
    scalar = set()
    for ov in packet.overloads():
        for i, a in enumerate(getattr(packet, ov)._schema.arguments):
            if not a.kwarg_only and str(a.type) in ("number", "Scalar"):  # (Scalar's str)
                scalar.add(i)
    return tuple(i for i in tensor_args if i in scalar)


def _untimed(name, args, kwargs, r) -> None:
    pass


def _result(ret, r, args, kwargs):
    kind, where = ret
    if kind == NEW or where is None:
        return _new(r)
    base = _arg(args, kwargs, where)
    if kind == SAME:
        return base
    if type(base) in (list, tuple):
        return _new(r)
    return _view_of(base, r)


def _swapped(r, swap: dict):
    """Result `r` with the CPU temporaries of `out=` arguments replaced by the outs."""
    if type(r) in (list, tuple):
        return type(r)(swap.get(id(x), x) for x in r)
    return swap.get(id(r), r)


def _write_out(dst: Tensor, values: Tensor) -> None:
    """An `out=` argument gets an op's result (resized first, as CPU kernels do)."""
    if dst.shape != values.shape:
        dst.resize_(values.shape)
    cpu_view(dst).copy_(values)


# -- the kernels written by hand -----------------------------------------------------------------


def _special(name):
    def deco(fn):
        SPECIAL[name] = fn
        return fn

    return deco


def _check_device(device) -> None:
    if device is not None:
        d = torch.device(device)
        if d.type == "neuron" and d.index not in (None, 0):
            raise RuntimeError(
                f"{d}: PyTorch {torch.__version__.split('+')[0]} lets a device defined in "
                f"Python place tensors on neuron:0 only; choose the logical core that runs "
                f"the ops with torch.neuron.set_device({d.index}) instead"
            )


def _check_size(size) -> None:
    """CPU's error for a negative dimension (the storage would be asked for negative bytes)."""
    for n in size:
        if n < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {list(size)}")


@_special("empty.memory_format")
def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_device(device)
    _check_size(size)
    dtype = dtype or torch.get_default_dtype()
    stride = None
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    return empty(size, dtype, stride)[0]


@_special("empty_strided")
def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    _check_size(size)
    return empty(size, dtype or torch.get_default_dtype(), stride)[0]


# a non-blocking copy to the host under way (`hooks._to_copy`, which cannot pass the flag on)
host_async = [False]


def _copy(src: Tensor, dst: Tensor, non_blocking: bool = False) -> Tensor:
    s = src if src.is_cpu else cpu_view(src)
    d = dst if dst.is_cpu else cpu_view(dst)
    d.copy_(s)
    timer().copy(src, dst, non_blocking or host_async[0])
    return dst


@_special("_copy_from")
def _copy_from(self, dst, non_blocking=False):
    return _copy(self, dst, non_blocking)


@_special("_copy_from_and_resize")
def _copy_from_and_resize(self, dst):
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return _copy(self, dst)


@_special("_local_scalar_dense")
def _item(self):
    """`.item()`: the host reads the value, so it waits for the stream, as with CUDA."""
    value = cpu_view(self).item()
    timer().wait()
    return value


@_special("convolution_overrideable")
def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):  # fmt: skip
    """Convolutions reach a device defined outside PyTorch here: PyTorch's CPU convolution."""
    args = to_cpu((input, weight, bias), "convolution")
    r = torch.ops.aten.convolution.default(
        *args, stride, padding, dilation, transposed, output_padding, groups
    )
    timing_record("convolution_overrideable", (*args, transposed, groups), {}, r)
    return to_device(r)


@_special("convolution_backward_overrideable")
def _convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):  # fmt: skip
    args = to_cpu((grad_output, input, weight), "convolution_backward")
    bias_sizes = [weight.shape[1] if transposed else weight.shape[0]] if output_mask[2] else None
    grads = torch.ops.aten.convolution_backward.default(
        *args, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
        output_mask,
    )  # fmt: skip
    timing_record("convolution_backward_overrideable", (*args, transposed, groups), {}, grads)
    return tuple(to_device(g) if g is not None else None for g in grads)


@_special("_has_compatible_shallow_copy_type")
def _compatible_shallow_copy(self, src) -> bool:
    """Whether `param.data = src` may swap the tensor's data in place: True between dense CPU
    and neuron tensors, as between CPU and CUDA. `nn.Module._apply` (`.to`, `to_empty`)
    keeps each Parameter object, and so tied weights stay one Parameter, only when it is; the
    CompositeImplicit kernel says False across backends."""
    return self.layout == src.layout == torch.strided and {self.device.type, src.device.type} <= {
        "cpu",
        "neuron",
    }


@_special("resize_")
def _resize(self, size, memory_format=None):
    size = tuple(size)
    stride = contiguous_stride(size)
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    offset = self.storage_offset()
    need = (offset + span(size, stride)) * self.element_size()
    st = self.untyped_storage()
    if need > st.nbytes():
        new, blk = new_storage(need)
        old = st.nbytes()
        if old:
            blk.base[:old].copy_(block_of(self).base[:old])
        st = new
    _set_storage(_CPU_SET, self, st, offset, size, stride)
    return self


def _set_redispatch(opname):
    handle = getattr(torch.ops.aten.set_, opname)._handle

    def kernel(*args, **kwargs):
        return handle.redispatch_boxed(_CPU_SET, *args, **kwargs)

    return kernel


for _ov in ("source_Storage_storage_offset", "source_Storage", "source_Tensor"):
    SPECIAL[f"set_.{_ov}"] = _set_redispatch(_ov)


@_special("set_")
def _set_empty(self):
    st, _ = new_storage(0)
    _set_storage(_CPU_SET, self, st, 0, (0,), (1,))
    return self


# -- registration --------------------------------------------------------------------------------


def cpu_ops() -> list[str]:
    """Every aten op (with overload) that has a CPU kernel, e.g. "add.Tensor"."""
    names = all_op_names()
    has = has_kernel
    return sorted(n[6:] for n in names if n.startswith("aten::") and has(n, "CPU"))


# list ops PyTorch implements for every device by one op per item (CompositeExplicitAutograd):
# taken over, so that each is one launch timed as the kernel library's list op
FOREACH = ("_foreach_add", "_foreach_mul", "_foreach_div", "_foreach_addcdiv",
           "_foreach_addcmul", "_foreach_lerp", "_foreach_sqrt")  # fmt: skip


def foreach_ops() -> list[str]:
    """Every overload of the FOREACH ops (in place too), e.g. "_foreach_add_.List"."""
    names = all_op_names()
    bases = {b for f in FOREACH for b in (f, f + "_")}
    out = []
    for n in names:
        base, _, ov = n.removeprefix("aten::").partition(".")
        if n.startswith("aten::") and base in bases:
            out.append(f"{base}.{ov}" if ov else base)
    return sorted(out)


# Copies that reach the kernels with their conjugate and negative bits (`cpu_view` keeps them):
# PyTorch's fallback for the bits would resolve a neuron source by cloning it, a copy that
# comes back here, and again until the stack overflows (SIGSEGV: `x.conj().cpu()`, hfft).
BITS_THROUGH = ("_copy_from", "_copy_from_and_resize")
# ops with no CPU kernel whose kernel for every device calls a CPU-only DispatchStub (an internal
# assert for neuron): run on the CPU views like the others
STUBS = ("conj_physical_",)


def _overload(name: str):
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def register(timer) -> int:
    """Register the kernels (once per process); returns how many."""
    global _lib
    if _lib is not None:
        return 0
    _lib = torch.library.Library("aten", "IMPL")
    count = 0
    special = {**fused_cells.KERNELS, **SPECIAL}
    for name in sorted(set(cpu_ops()) | set(special) | set(foreach_ops()) | set(STUBS)):
        fn = special.get(name)
        if fn is None:
            try:
                op = _overload(name)
            except (AttributeError, RuntimeError):
                continue
            fn = make_kernel(op, Plan(op), timer)
        _lib.impl(name, fn, "PrivateUse1")
        count += 1
    for name in BITS_THROUGH:
        for key in ("Conjugate", "Negative"):
            _lib.impl(name, torch.library.fallthrough_kernel, key)
    return count
