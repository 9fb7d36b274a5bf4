"""Fusion as a property (hypothesis): random chains of 2-6 elementwise ops over 1-3 shared
inputs, lowered by `trnsim.kernels.lower_cores` and run functionally, give numpy's values.

A chain mixes unary ops, binary ops of two tensors (a tensor with itself too) or of a tensor
and a number on either side, binary ops with a row ([D]) or column ([..., 1]) broadcast, and
`where` on a 0/1 mask. An op writes a new tensor or overwrites one (an input in place, an
intermediate some later op reads again, one nothing read yet). Tensors are float32 or
bfloat16, of shapes that are and are not multiples of 128, on one core or both cores of an
LNC 2 logical core. `fusion.chains` fuses the runs of same-shape ops; the broadcasts and
`where` split them. For every chain:

- lowering raises nothing (no "lowering bug" assertion of the builder);
- every tensor's final value equals numpy's, op after op in float64 from the values as stored,
  each result rounded as the engines round it (fp32, then the output's dtype), within
  `reference.tolerance` of the tensor's dtype;
- the race check finds no race in the lowered kernel;
- the values equal, bit for bit, those of the same ops each lowered on its own (fusion changes
  where values live, never what they are).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnsim.config import load_chip
from trnsim.dtypes import dtype, to_dtype
from trnsim.kernels import lower_cores, reference
from trnsim.kernels.fusion import chains
from trnsim.kernels.reference import tolerance
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec
from trnsim.trace.races import find_races

SHAPES = [(3, 5), (128, 64), (130, 7), (2, 70, 9), (300,), (129, 40), (256, 3)]
DTYPES = ["float32", "bfloat16"]
# well-conditioned on normal inputs and on each other's results: no domain errors (log, sqrt)
# and no poles (reciprocal, division by a tensor), so every error is the kernel's, not numpy's
UNARY = ["exp", "tanh", "sigmoid", "relu", "gelu", "silu", "neg", "square", "abs", "sin",
         "erf", "copy"]  # fmt: skip
BINARY = ["add", "sub", "mul", "maximum", "minimum"]
NUMBERS = [0.5, 2.0, -1.5, 0.25, 3.0]  # exact in bf16 and fp32: the immediate is no rounding

CFG = load_chip("trn2")


@st.composite
def programs(draw):
    """(tensors: name -> (shape, dtype), initial arrays of the inputs, ops [(op, args)])."""
    shape = draw(st.sampled_from(SHAPES))
    n_in = draw(st.integers(1, 3))
    tensors = {f"x{i}": (shape, draw(st.sampled_from(DTYPES))) for i in range(n_in)}
    extra = []  # broadcast operands and the mask, made only when an op uses them
    full = list(tensors)  # the tensors of out's shape an op may read
    ops = []
    for k in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["unary", "tensors", "number", "broadcast", "where"]))
        if kind == "broadcast" and len(shape) < 2:
            kind = "tensors"  # a row of a 1-D tensor is the tensor itself
        pick = st.sampled_from(full)
        if kind == "unary":
            op, args = draw(st.sampled_from(UNARY)), {"x": draw(pick)}
        elif kind == "tensors":
            op, args = draw(st.sampled_from(BINARY)), {"a": draw(pick), "b": draw(pick)}
        elif kind == "number":
            op = draw(st.sampled_from(BINARY + ["div"]))
            num, t = draw(st.sampled_from(NUMBERS)), draw(pick)
            left = op != "div" and draw(st.booleans())  # a number over a tensor has poles
            args = {"a": num, "b": t} if left else {"a": t, "b": num}
        elif kind == "broadcast":
            name = draw(st.sampled_from(["row", "col"]))
            extra.append(name)
            t = draw(pick)
            op = draw(st.sampled_from(BINARY))
            args = {"a": name, "b": t} if draw(st.booleans()) else {"a": t, "b": name}
        else:
            extra.append("mask")
            a = draw(st.one_of(pick, st.sampled_from(NUMBERS)))
            either = st.one_of(pick, st.sampled_from(NUMBERS))
            other = draw(pick if not isinstance(a, str) else either)  # one number at most
            op, args = "where", {"condition": "mask", "a": a, "other": other}
        # the result: a new tensor, or over one of out's shape (in place, an input, ...)
        if draw(st.booleans()):
            out = f"t{k}"
            tensors[out] = (shape, draw(st.sampled_from(DTYPES)))
            full.append(out)
        else:
            out = draw(pick)
        ops.append((op, {**args, "out": out}))
    d = shape[-1]
    for name in dict.fromkeys(extra):
        dt = draw(st.sampled_from(DTYPES))
        tensors[name] = ({"row": (d,), "col": (*shape[:-1], 1), "mask": shape}[name], dt)
    seed = draw(st.integers(0, 2**16))
    return tensors, _initial(tensors, ops, seed), ops


def _initial(tensors: dict, ops: list, seed: int) -> dict:
    """Values of every tensor some op reads before any op writes it (normal; the mask 0/1), as
    stored in the tensor's dtype."""
    rng = np.random.default_rng(seed)
    written, read = set(), set()
    for _, args in ops:
        read |= {v for k, v in args.items() if k != "out" and isinstance(v, str)} - written
        written.add(args["out"])
    out = {}
    for name in sorted(read):
        shape, dt = tensors[name]
        v = rng.integers(0, 2, shape) if name == "mask" else rng.standard_normal(shape)
        out[name] = to_dtype(v.astype(np.float32), dtype(dt))
    return out


def _numpy(tensors: dict, initial: dict, ops: list) -> dict:
    """Each op in turn in float64 on the values as stored, its result rounded to fp32 (the
    engines compute in fp32) then to its tensor's dtype."""
    vals = {n: np.zeros(s, np.float64) for n, (s, _) in tensors.items()}
    vals.update({n: v.astype(np.float64) for n, v in initial.items()})
    for op, args in ops:
        dt = dtype(tensors[args["out"]][1])
        with np.errstate(all="ignore"):  # inf and nan as the device makes them
            y = np.broadcast_to(reference(op, args, vals), vals[args["out"]].shape)
            vals[args["out"]] = to_dtype(y.astype(np.float32), dt).astype(np.float64)
    return vals


def _run(tensors: dict, initial: dict, runs: list[list], cores: int, where: Path):
    """Each of `runs` (lists of ops) lowered as one kernel over `cores` physical cores, launched
    one after another; the run's result."""
    specs = {}
    for name, (shape, dt) in tensors.items():
        init = None
        if name in initial:
            path = where / f"{name}.npy"
            np.save(path, initial[name].astype(np.float32))
            init = ("file", str(path))
        specs[name] = TensorSpec(name, shape, dtype(dt), init)
    kernels, steps = {}, []
    for i, ops in enumerate(runs):
        progs = lower_cores([OpSpec(op, args) for op, args in ops], specs, CFG, cores)
        kernels[f"k{i}"] = KernelSpec(f"k{i}", per_core=progs)
        steps.append(Step("launch", f"k{i}"))
    prog = Program("fusion", "trn2", 0, "functional", cores, [], specs, kernels,
                   [StreamSpec("s", 0, steps)])  # fmt: skip
    return run_program(prog, CFG)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(programs(), st.sampled_from([1, 2]))
def test_a_fused_chain_gives_numpys_values_and_has_no_race(program, cores):
    tensors, initial, ops = program
    with tempfile.TemporaryDirectory() as tmp:
        fused = _run(tensors, initial, [ops], cores, Path(tmp))
        alone = _run(tensors, initial, [[op] for op in ops], cores, Path(tmp))
    want = _numpy(tensors, initial, ops)
    for name, (_, dt) in tensors.items():
        got = fused.tensor(name)
        np.testing.assert_array_equal(got, alone.tensor(name), err_msg=f"{name}: fused != alone")
        ref = want[name]
        rtol, atol = tolerance(dt)
        scale = max(1.0, float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0)))
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=atol * scale,
                                   err_msg=f"{name} after {ops}")  # fmt: skip
    assert find_races(fused.program) == []


def _specs(tensors: dict) -> dict:
    return {n: TensorSpec(n, s, dtype(d)) for n, (s, d) in tensors.items()}


def test_the_chains_of_the_property_test_do_fuse():
    """The generator reaches fused runs (of 2 ops and more) as well as ops left alone."""
    tensors = {"x0": ((130, 7), "float32"), "t0": ((130, 7), "bfloat16"),
               "row": ((7,), "float32")}  # fmt: skip
    ops = [OpSpec("gelu", {"x": "x0", "out": "t0"}), OpSpec("mul", {"a": 0.5, "b": "x0", "out": "x0"}),
           OpSpec("add", {"a": "t0", "b": "x0", "out": "t0"}),
           OpSpec("add", {"a": "t0", "b": "row", "out": "t0"})]  # fmt: skip
    assert [len(r) for r in chains(ops, _specs(tensors))] == [3, 1]


@pytest.mark.parametrize("cores", [1, 2])
def test_a_value_overwritten_unread_is_not_computed(cores, tmp_path):
    """t = gelu(x); t = 0.5 * x; y = t + t: the gelu's result is overwritten before anything
    reads it (what a compiled graph's renaming once made of gelu(h) + 0.5 * h): the fused
    kernel leaves the gelu out instead of writing one buffer from two engines unordered."""
    tensors = {"x": ((256, 48), "float32"), "t": ((256, 48), "float32"),
               "y": ((256, 48), "bfloat16")}  # fmt: skip
    ops = [("gelu", {"x": "x", "out": "t"}), ("mul", {"a": 0.5, "b": "x", "out": "t"}),
           ("add", {"a": "t", "b": "t", "out": "y"})]  # fmt: skip
    initial = _initial(tensors, ops, 0)
    r = _run(tensors, initial, [ops], cores, tmp_path)
    want = _numpy(tensors, initial, ops)
    for name in tensors:
        np.testing.assert_array_equal(r.tensor(name), want[name].astype(r.tensor(name).dtype))
    assert not any(i.OP == "activation" for i in r.program.kernels["k0"].per_core[0].instructions)
    assert find_races(r.program) == []


def test_runs_over_other_tensors_share_the_bytes_of_one_kernel():
    """Two fused runs of 6 tensors each, [512, 2048] float32 (blocks of [128, 2048]: 8 KiB a
    partition): 6 x 3 rotating buffers for each run, live over its own op step only, so 144 KiB
    of a partition's 224 KiB are live at once, where buffers kept for the whole kernel made 288
    KiB and the launch an SBUF overflow (the tiles placed by liveness: `kernels.liveness`)."""
    from trnsim.kernels import lower

    shape = (512, 2048)
    names = [f"a{i}" for i in range(12)]
    ops = []
    for a in (names[:6], names[6:]):
        ops += [OpSpec("add", {"a": a[0], "b": a[1], "out": a[2]}),
                OpSpec("mul", {"a": a[2], "b": a[3], "out": a[4]}),
                OpSpec("sub", {"a": a[4], "b": a[0], "out": a[5]})]  # fmt: skip
    specs = _specs({n: (shape, "float32") for n in names})
    assert [len(r) for r in chains(ops, specs)] == [3, 3]
    prog = lower(ops, specs, CFG)
    assert sorted(t.live for t in prog.tiles.values()) == [(0, 0)] * 18 + [(1, 1)] * 18
    for step in (0, 1):
        live = [t for t in prog.tiles.values() if t.live == (step, step)]
        assert sum(t.shape[1] * t.dtype.itemsize for t in live) == 144 * 1024
    top = max(t.offset + t.shape[1] * t.dtype.itemsize for t in prog.tiles.values())
    assert top <= CFG.core.sbuf.partition_bytes


def test_an_op_of_two_numbers_is_not_fused_and_is_refused_by_its_lowering():
    from trnsim.errors import TraceError
    from trnsim.kernels import lower

    specs = _specs({"x": ((4, 8), "float32"), "t": ((4, 8), "float32")})
    ops = [OpSpec("exp", {"x": "x", "out": "t"}), OpSpec("add", {"a": 1.0, "b": 2.0, "out": "t"})]
    assert [len(r) for r in chains(ops, specs)] == [1, 1]
    with pytest.raises(TraceError, match="both numbers"):
        lower(ops, specs, CFG)
