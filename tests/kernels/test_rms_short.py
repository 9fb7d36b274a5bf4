"""rms_norm over short rows (kernels/rms_short.py): numpy's values (--check) for 16-bit and
fp32 rows, with and without a weight, 2-D and 3-D, at LNC 1 and 2; the weight one
`tensor_tensor` a block (broadcast along its rows), the plan's split of the sums."""

import pytest

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import Activation, Ap, TensorScalar, TensorTensor
from trnsim.kernels import rms_short
from trnsim.kernels.builder import KernelBuilder
from trnsim.kernels.rms_short import SHORT_ROW, lower_rms_short
from trnsim.kernels.row_plan import G, S
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec


def _run(shape, dt, odt, weight: bool, lnc: int):
    specs = {"x": TensorSpec("x", shape, dtype(dt), "normal"),
             "w": TensorSpec("w", shape[-1:], dtype(dt), "normal"),
             "out": TensorSpec("out", shape, dtype(odt), None)}  # fmt: skip
    args = {"x": "x", "out": "out", "eps": 1e-5} | ({"weight": "w"} if weight else {})
    prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                   {"k": KernelSpec("k", ops=[OpSpec("rms_norm", args, 1)])},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    return run_program(prog, load_chip("trn2"), "functional", check=True)


@pytest.mark.parametrize(
    "shape,dt,odt,weight",
    [
        ((4096, 64), "bfloat16", "bfloat16", True),
        ((4096, 64), "float32", "float32", True),
        ((300, 100), "bfloat16", "float32", True),
        ((3, 100, 64), "float16", "float16", False),
        ((20000, 128), "bfloat16", "bfloat16", True),
    ],
)
def test_short_rows_check(shape, dt, odt, weight):
    for lnc in (1, 2):
        r = _run(shape, dt, odt, weight, lnc)
        assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]


def test_weight_is_one_instruction_a_block():
    """[32768, 64] bf16 on one core: 8 blocks of 32 rows a partition (4 KiB), the first and
    last cut into quarter, half and quarter blocks (8 - 2 + 6 = 12); the weight one
    tensor_tensor a block, a whole one's reading the [128, 64] spread tile as [128, *32, 64];
    ScalarE one instruction a block for the squares past the plan's `fs`, one a row for the
    first `fs`; the last block's pieces (16, 8 and 8 row slots) all their sums and x * rstd
    on ScalarE; rstd on GpSimd in two halves where GpSimd then takes x * rstd (its first row
    then does not read what the instruction before it wrote)."""
    d, rows, bf = 64, 32768, dtype("bfloat16")
    b = KernelBuilder({"x": TensorSpec("x", (rows, d), bf, "normal"),
                       "w": TensorSpec("w", (d,), bf, "normal"),
                       "out": TensorSpec("out", (rows, d), bf, None)})  # fmt: skip
    assert d <= SHORT_ROW
    rms_short._CHOSEN.clear()
    lower_rms_short(b, load_chip("trn2"), "x", "out", "w", 1e-5, (0, rows))
    ((_, steps),) = rms_short._CHOSEN.values()  # each block's (fs, x * rstd's, weight's engine)
    pers = [8, 16, 8] + [32] * 6 + [16, 8, 8]
    assert len(steps) == 12 and [s[:2] for s in steps[-3:]] == [(16, S), (8, S), (8, S)]
    tts = [i for i in b.instructions if isinstance(i, TensorTensor)]
    assert len(tts) == 8 - 2 + 6
    full = [t for t in tts if t.src1.bcast == ((1, 32),)]
    assert len(full) == 6 and all(str(t.src1).endswith("[0:128, *32, :]") for t in full)
    acts = [i for i in b.instructions if isinstance(i, Activation)]
    with_sums = sum(1 for a in acts if a.func == "square" and a.reduce == "add")
    squares = sum(1 for a in acts if a.func == "square" and a.reduce is None)
    scaled = sum(1 for a in acts if a.func == "copy" and isinstance(a.scale, Ap))
    assert with_sums == sum(fs for fs, _, _ in steps)
    assert squares == sum(1 for (fs, _, _), per in zip(steps, pers) if fs < per)
    assert scaled == sum(per for (_, e, _), per in zip(steps, pers) if e == S)
    pows = [i for i in b.instructions if isinstance(i, TensorScalar) and i.op1 == "pow"]
    assert len(pows) == sum(2 if e == G else 1 for _, e, _ in steps)
