"""One op_db entry's samples run on `neuron` and on CPU, compared: what a conformance worker
does (worker.py). Imported only in worker processes: `torch.testing._internal` switches off
torch.backends' global flags and patches TorchScript on import, which other tests must not see."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.testing._comparison import default_tolerances
from torch.testing._internal import common_utils
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo import core as opinfo_core
from torch.utils._pytree import tree_flatten, tree_map

import trnsim.torch  # noqa: F401  (makes "neuron" a device)
from tests.torch.conformance.exclusions import EXCLUSIONS, LOOSER, ON_CPU, UNINITIALISED

DEVICE = "neuron"
SEED = 1234  # each sample's two runs start from it: random ops draw the same numbers


def _no_test_fn():
    """PyTorch's sample_inputs looks for the unittest TestCase on the stack (inspect.stack(),
    some 45 ms a call: a third of the suite's time); a worker has none, so it finds None."""
    return None


common_utils.extract_test_fn = opinfo_core.extract_test_fn = _no_test_fn


def key_of(op) -> str:
    """The entry's name as PyTorch prints it: `name` or `name.variant`."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


OPS = {key_of(op): op for op in op_db}


def dtypes_of(op) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(main dtype, other dtype) to test forward at: float32 (else complex64, int64, the first
    CPU dtype), then bfloat16 where the op has it, else int64, else none."""
    cpu = op.supported_dtypes("cpu")
    if not cpu:
        return None, None
    main = next((d for d in (torch.float32, torch.complex64, torch.int64) if d in cpu), None)
    main = main or sorted(cpu, key=str)[0]
    other = next((d for d in (torch.bfloat16, torch.int64) if d in cpu and d != main), None)
    return main, other


def phases_of(op) -> list[str]:
    """The tests of an entry: forward_<main>, forward_<other>, backward_float32."""
    main, other = dtypes_of(op)
    phases = [f"forward_{_name(d)}" for d in (main, other) if d is not None]
    if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu"):
        phases.append("backward_float32")
    return phases


def plan() -> list[dict]:
    """Every entry: its key, its phases, its exclusion reason (None when tested) and those of
    its phases excluded alone ({phase: reason})."""
    out = []
    for key, op in OPS.items():
        phases = phases_of(op)
        alone = {p: EXCLUSIONS[f"{key} {p}"] for p in phases if f"{key} {p}" in EXCLUSIONS}
        out.append({"key": key, "phases": phases, "excluded": EXCLUSIONS.get(key)})
        out[-1]["excluded_phases"] = alone
    return out


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Mismatch(AssertionError):
    """The device's result differs from CPU's (values, structure, dtype or device)."""


class CpuOnlyFailure(Exception):
    """CPU raised on a sample where the device did not: the device should raise too."""


class SampleFailure(Exception):
    """A sample failed; `summary` is the one line KNOWN_FAILURES keeps."""

    def __init__(self, index: int, sample, error: BaseException, side: str):
        self.index, self.side, self.error = index, side, error
        self.summary = f"sample {index}: {side}: {one_line(error)}"
        super().__init__(f"{self.summary}\n  sample {index} = {describe(sample)}")


def one_line(error: BaseException) -> str:
    """The error's type and the first meaningful line of its message, at most 200 chars."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    if isinstance(error, AssertionError):  # assert_close: "not close!" then the counts
        text = "; ".join(lines[:2])
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def describe(sample) -> str:
    """A short description of a SampleInput: tensors by dtype and shape."""

    def show(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor{list(x.shape)}:{_name(x.dtype)}"
        return repr(x) if not isinstance(x, (list, tuple)) or len(x) < 9 else f"<{len(x)} items>"

    text = f"input={tree_map(show, sample.input)} args={tree_map(show, sample.args)} "
    text += f"kwargs={tree_map(show, sample.kwargs)}"
    return text if len(text) <= 400 else text[:397] + "..."


def to_device(tree, device: str = DEVICE, keep: tuple = ()):
    """(tree, moved): every tensor copied to `device` with its strides and storage offset (one
    copy of each storage, so views that share memory still do), a leaf that requires grad where
    the original did; every `cpu` device named in the tree renamed; `moved` whether anything
    was. The tensors in `keep` stay where they are."""
    storages: dict = {}
    copies: dict[int, torch.Tensor] = {}
    moved = [False]

    def move(x):
        if isinstance(x, torch.Tensor) and not any(x is k for k in keep):
            moved[0] = True
            if id(x) not in copies:
                y = _copy(x.detach(), device, storages)
                copies[id(x)] = y.requires_grad_(x.requires_grad)
            return copies[id(x)]
        if isinstance(x, torch.device) and x.type == "cpu":
            moved[0] = True
            return torch.device(device)
        if isinstance(x, str) and x in ("cpu", "cpu:0"):
            moved[0] = True
            return device
        return x

    return _map(move, tree), moved[0]


def _map(f, tree):
    return tree_map(f, tree, is_leaf=lambda x: isinstance(x, torch.Size))


def _copy(x: torch.Tensor, device: str, storages: dict) -> torch.Tensor:
    """x on `device` as a view of a copy of its whole storage (as_strided of a partial view
    reads beyond the view); a plain copy for what has no such storage."""
    size = x.element_size()
    plain = x.layout != torch.strided or x.is_conj() or x.is_neg() or x.is_quantized
    if plain or x.untyped_storage().nbytes() % size:
        return x.to(device, copy=True)
    storage = x.untyped_storage()
    key = (storage.data_ptr(), storage.nbytes(), x.dtype)
    if key not in storages:
        whole = torch.empty(0, dtype=x.dtype).set_(storage, 0, (storage.nbytes() // size,))
        storages[key] = whole.to(device, copy=True)
    return storages[key].as_strided(x.shape, x.stride(), x.storage_offset())


def to_cpu(tree, expect: str):
    """Tensors back on CPU (detached), after checking they were on `expect`."""

    def back(x):
        if isinstance(x, torch.Tensor):
            if x.device.type != expect:
                raise Mismatch(f"an output is on {x.device}, not on {expect}")
            return x.detach().cpu()
        return x

    return _map(back, tree)


def assert_same(got, want, uninitialised: bool = False, scale: float = 1.0) -> None:
    """`got` (on CPU now) equals `want` under PyTorch's default tolerances for the dtype (times
    `scale`: exclusions.LOOSER), NaNs equal; for uninitialised outputs (`empty*`) shapes,
    dtypes and layouts only."""
    got_leaves, got_spec = tree_flatten(got)
    want_leaves, want_spec = tree_flatten(want)
    if got_spec != want_spec:
        raise Mismatch(f"output structure {got_spec} != CPU's {want_spec}")
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        where = f"output {i}: " if len(want_leaves) > 1 else ""
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor):
            meta_g = (g.shape, g.dtype, g.layout)
            meta_w = (w.shape, w.dtype, w.layout)
            if meta_g != meta_w:
                raise Mismatch(f"{where}(shape, dtype, layout) {meta_g} != CPU's {meta_w}")
            if uninitialised:
                continue
            tol = {}
            if scale != 1.0 and (w.is_floating_point() or w.is_complex()):
                rtol, atol = default_tolerances(w)
                tol = {"rtol": rtol * scale, "atol": atol * scale}
            try:
                torch.testing.assert_close(g, w, equal_nan=True, **tol)
            except AssertionError as e:
                raise Mismatch(f"{where}{e}") from None
        elif isinstance(w, (bool, int, float, complex)) and type(g) is type(w):
            torch.testing.assert_close(g, w, equal_nan=True)
        elif type(g) is not type(w) or g != w:
            raise Mismatch(f"{where}{g!r} != CPU's {w!r}")


def _call(op, args, kwargs):
    # The CPU generator, which the device draws from too: what torch.manual_seed seeds, without
    # its lazy seeding of CUDA, XPU and MTIA (a stack trace each, 1 ms a call here)
    torch.default_generator.manual_seed(SEED)
    return op(*args, **kwargs)


def _loss(out):
    """The sum of the floating outputs that require grad (real and imaginary parts), or None."""
    parts = [
        o.real.sum() + o.imag.sum() if o.is_complex() else o.sum()
        for o in tree_flatten(out)[0]
        if isinstance(o, torch.Tensor)
        and o.requires_grad
        and (o.is_floating_point() or o.is_complex())
    ]
    return sum(parts[1:], parts[0]) if parts else None


def _grads(op, sample, args, kwargs):
    """Gradients of the outputs' sum w.r.t. each input tensor that requires grad."""
    out = sample.output_process_fn_grad(_call(op, args, kwargs))
    inputs = [
        x
        for x in tree_flatten((args, kwargs))[0]
        if isinstance(x, torch.Tensor) and x.requires_grad
    ]
    loss = _loss(out)
    if loss is None or not inputs:
        return None
    inputs = list({id(x): x for x in inputs}.values())
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def run(key: str, phase: str, progress=lambda i, n: None, failed=None) -> dict:
    """Run entry `key`'s phase (`forward_<dtype>` or `backward_float32`) on every sample and
    return counts. A sample whose device result differs raises SampleFailure, or goes to
    `failed(SampleFailure)` and the next sample runs when `failed` is given."""
    op = OPS[key]
    direction, dtype = phase.split("_", 1)
    dtype = getattr(torch, dtype)
    backward = direction == "backward"
    # The samples are random: the same ones every run. (PyTorch's own reseeding before each
    # sample, set_seed, calls torch.manual_seed: slow, see _call.)
    random.seed(0)
    np.random.seed(0)
    torch.default_generator.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=backward, set_seed=False))
    counts = {"samples": len(samples), "compared": 0, "both_raise": 0, "no_grad": 0, "failed": 0}
    for i, sample in enumerate(samples):
        progress(i, len(samples))
        try:
            outcome = _one(key, op, sample, backward, i)
        except SampleFailure as e:
            if failed is None:
                raise
            counts["failed"] += 1
            failed(e)
            continue
        counts[outcome] += 1
        if outcome == "both_raise":
            counts.setdefault("both_raise_first", f"sample {i}")
    return counts


def _one(key: str, op, sample, backward: bool, i: int) -> str:
    """One sample on both sides: "compared", "both_raise" or "no_grad"; or SampleFailure."""
    cpu_args = (sample.input, *sample.args)
    keep = tuple(cpu_args[j] for j in ON_CPU.get(key, ()))  # CPU tensors on every device
    (dev_args, dev_kwargs), moved = to_device((cpu_args, sample.kwargs), keep=keep)
    again = to_device((cpu_args, sample.kwargs), "cpu", keep=keep)[0]  # before CPU mutates any
    compute = _grads if backward else lambda op, s, a, k: _call(op, a, k)
    try:
        want = compute(op, sample, cpu_args, sample.kwargs)
        cpu_error = None
    except Exception as e:  # the device must then raise the same
        cpu_error = e
    try:
        got = compute(op, sample, dev_args, dev_kwargs)
        got = to_cpu(got, DEVICE if moved else "cpu")
        torch.neuron.synchronize()  # an error inside the device surfaces here
    except Mismatch as e:
        raise SampleFailure(i, sample, e, "wrong device") from e
    except Exception as e:
        if cpu_error is not None and type(e) is type(cpu_error):
            return "both_raise"
        raise SampleFailure(i, sample, e, "neuron raised") from e
    if cpu_error is not None:
        err = CpuOnlyFailure(f"CPU raised {one_line(cpu_error)}, neuron did not")
        raise SampleFailure(i, sample, err, "cpu only")
    if backward and want is None:
        return "no_grad"
    try:
        assert_same(got, want, key in UNINITIALISED, LOOSER.get(key, (1.0,))[0])
    except AssertionError as e:
        try:  # is it the device, or does CPU itself differ from run to run?
            assert_same(compute(op, sample, *again), want, key in UNINITIALISED)
        except AssertionError:
            raise SampleFailure(i, sample, e, "cpu differs from itself") from e
        raise SampleFailure(i, sample, e, "values differ") from e
    return "compared"
