"""Fuzz the engines' and DMA's numerics with generated kernels: every op on random, mostly
compatible tiles of every dtype, with in-bounds slices, so more examples get past the checks.
The standard is tests/e2e/fuzzing.py's: a result, or a clean one-line TrnsimError."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tests.e2e.fuzzing import CHIPS, FUZZ, HUGE_INT, INF, MODES, NAN, assert_survives, dump, pick
from trnsim.dtypes import DTYPES
from trnsim.isa import INSTRUCTIONS

# ----------------------------------------------------------------------------------------------
# generated kernels: every op on random (mostly compatible) tiles of every dtype, with in-bounds
# slices, so that more examples get past the checks and into the engines' and DMA's numerics

GEN_FREE = [[1], [2], [6], [64], [512], [2, 3], [4, 2, 8], [2, 64], [3], [2, 512]]
GEN_NUMBERS = [
    0,
    1,
    -1,
    0.5,
    2,
    3,
    1e-3,
    100,
    -7,
    2.5,
    65504,
    1e38,
    INF,
    -INF,
    NAN,
    HUGE_INT,
    -HUGE_INT,
    2**31,
    2**53,
    True,
]


PREFER = {  # (op, field) -> the generated buffers that fit it (shape and memory)
    ("dma_copy", "src"): ["h0", "h1", "h2", "a0", "a1"],
    ("dma_copy", "dst"): ["a0", "a1", "a2", "h0", "h1"],
    ("matmul", "stationary"): ["ws"],
    ("matmul", "moving"): ["a0", "a1", "a2"],
    ("matmul", "dst"): ["p0"],
    ("transpose", "src"): ["a0", "a1", "a2"],
    ("transpose", "dst"): ["tp"],
    ("bn_stats", "dst"): ["st6"],
    ("bn_aggr", "src"): ["st6"],
    ("bn_aggr", "dst"): ["ag2"],
    ("select", "on_false"): ["col", "a1"],
    ("tensor_reduce", "dst"): ["rd", "col"],
    **{
        (op, f): ["col"]
        for op in ("activation", "tensor_scalar")
        for f in ("scale", "bias", "reduce_dst", "operand0", "operand1")
    },
}
GPSIMD_OPS = ("iota", "affine_select")


def _gen_operand(draw, buffers_: dict, op: str, fld: str, engine: str | None) -> str:
    """A buffer that usually fits the field, sometimes with an in-bounds slice."""
    default = (
        ["a0", "a1", "a2"] if op in GPSIMD_OPS or engine == "gpsimd" else ["a0", "a1", "a2", "p0"]
    )
    name = pick(
        draw, PREFER.get((op, fld), default) if draw(st.integers(0, 9)) else sorted(buffers_)
    )
    shape = buffers_[name]["shape"]
    if draw(st.integers(0, 3)):
        return name
    parts = []
    for d, n in enumerate(shape[: draw(st.integers(1, len(shape)))]):
        if d > 0 and n > 1 and draw(st.integers(0, 4)) == 0:
            parts.append(str(draw(st.integers(-n, n - 1))))
            continue
        if d == 0 and "memory" in buffers_[name]:
            size = pick(draw, [x for x in (n, n, 32, 64, 1) if x <= n])
            start = pick(draw, [x for x in (0, 32, 64, 96) if x + size <= n] or [0])
            parts.append(f"{start}:{start + size}")
            continue
        lo = draw(st.integers(0, n - 1))
        hi = draw(st.integers(lo + 1, n))
        step = pick(draw, [1, 1, 1, 2, 3]) if hi - lo > 1 else 1
        parts.append(f"{lo}:{hi}" + (f":{step}" if step != 1 else ""))
    return f"{name}[{', '.join(parts)}]"


def _gen_value(draw, meta: dict):
    kind = meta["kind"]
    if kind == "choice":
        return pick(draw, meta["choices"])
    if kind == "bool":
        return draw(st.booleans())
    if kind == "int":
        return draw(st.integers(0, 15))
    if kind == "axes":
        return pick(draw, [-1, 1, 2, 3, [1], [1, 2], [2, 3], [1, 2, 3], [-1, -2]])
    return pick(draw, GEN_NUMBERS)


@st.composite
def generated_kernel(draw):
    """(trace text, chip, mode) of one random low-level kernel: 1-4 instructions of any op on
    buffers made to fit them (dtypes random), now and then on any buffer or slice."""
    p = pick(draw, [1, 2, 32, 64, 128])
    free = pick(draw, GEN_FREE)
    n = math.prod(free)
    dtypes = sorted(DTYPES) + ["float32", "bfloat16"] * 3

    def dt():
        return pick(draw, dtypes)

    def tile(memory, shape, dtype=None):
        return {
            "memory": memory,
            "shape": shape,
            "dtype": dtype or dt(),
            "init": pick(draw, ["normal", "random", "arange", "ones", "zeros"]),
        }

    tiles = {f"a{i}": tile("sbuf", [p, *free]) for i in range(3)}
    tiles.update(
        p0=tile("psum", [p, *free], pick(draw, ["float32", "float32", "bfloat16"])),
        col=tile("sbuf", [p, 1]),
        st6=tile(pick(draw, ["sbuf", "psum"]), [p, 6]),
        ag2=tile("sbuf", [p, 2]),
        ws=tile("sbuf", [p, p]),
        rd=tile(pick(draw, ["sbuf", "psum"]), [p, *(free[:-1] or [1])]),
        tp=tile("psum", [min(n, 128), p], pick(draw, ["float32", tiles["a0"]["dtype"]])),
    )
    tensors = {
        "h0": {"shape": [p, *free], "dtype": dt(), "init": "normal"},
        "h1": {"shape": [p * n], "dtype": dt(), "init": "arange"},
        "h2": {"view": "h1", "shape": [n, p]},
    }
    everything = {**tensors, **tiles, "h2": {"shape": [n, p]}}
    pairs = {"reduce": "reduce_dst", "op1": "operand1"}  # given together or not at all
    instrs = []
    for _ in range(draw(st.integers(1, 4))):
        cls = INSTRUCTIONS[pick(draw, sorted(INSTRUCTIONS))]
        ins = {"op": cls.OP}
        if cls.ENGINES and draw(st.booleans()):
            ins["engine"] = pick(draw, [e.label for e in cls.ENGINES])
        fields = cls.op_fields()
        chosen = {f.name for f in fields if f.metadata["required"] or draw(st.integers(0, 2)) == 0}
        chosen |= {pairs[k] for k in pairs if k in chosen}
        chosen -= {v for k, v in pairs.items() if k not in chosen and draw(st.integers(0, 9))}
        for f in fields:
            if f.name not in chosen:
                continue
            kind = f.metadata["kind"]
            if kind == "ap" or (kind == "ap_or_num" and draw(st.booleans())):
                ins[f.name] = _gen_operand(draw, everything, cls.OP, f.name, ins.get("engine"))
            else:
                ins[f.name] = _gen_value(draw, f.metadata)
        instrs.append(ins)
    for j, ins in enumerate(instrs):  # some waits, each on an earlier instruction's signal
        if j and draw(st.integers(0, 2)) == 0:
            k = draw(st.integers(0, j - 1))
            instrs[k].setdefault("signal", {})[f"s{k}"] = 1
            ins.setdefault("wait", {})[f"s{k}"] = 1
    doc = {
        "trnsim": 1,
        "seed": draw(st.integers(0, 3)),
        "tensors": tensors,
        "tiles": tiles,
        "instructions": instrs,
    }
    return dump(doc), draw(st.sampled_from(CHIPS)), draw(st.sampled_from(MODES))


@FUZZ
@given(generated_kernel())
def test_fuzz_generated_kernels(example):
    assert_survives(example)
