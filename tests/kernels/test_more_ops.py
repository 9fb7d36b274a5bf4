"""Reductions over any dims, argmax, data movement (permute, contiguous, cat, split),
embedding, addmm and the losses, lowered by `trnsim.kernels`: values against each op's numpy
reference over shapes that are and are not multiples of 128 or 512, in bf16, fp16 and fp32;
their errors; and LNC 2."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.test_op_report import run_ops
from tests.kernels.test_ops import _run
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.errors import TraceError
from trnsim.kernels import lower, lower_cores, reference
from trnsim.kernels.argmax_chunks import chunk
from trnsim.kernels.reference import tolerance
from trnsim.trace.program import OpSpec, TensorSpec


def _compare(r, op, args):
    """Every output of `op` (out, or each of outs) against the reference."""
    names = [v for v in args.values() if isinstance(v, str) and v in r.tensors]
    names += args.get("tensors", [])
    arrays = {n: r.tensor(n) for n in names}
    ref = reference(op, {k: v for k, v in args.items() if k not in ("out", "outs")}, arrays)
    outs = args.get("outs", [args.get("out")])
    for out, want in zip(outs, ref if "outs" in args else [ref]):
        got = r.tensor(out).astype(np.float64)
        assert got.shape == np.shape(want) or got.size == np.size(want), (got.shape, want)
        rtol, atol = tolerance(r.tensors[out].dtype.name)
        scale = max(1.0, float(np.abs(want).max())) if np.size(want) else 1.0
        np.testing.assert_allclose(got.reshape(np.shape(want)), want, rtol=rtol, atol=atol * scale)


def _npy(tmp_path, name, values):
    path = tmp_path / f"{name}.npy"
    np.save(path, values)
    return ("file", str(path))


def _reduced(shape, dim, keepdim):
    x = np.zeros(shape)
    axis = tuple(dim) if isinstance(dim, list) else dim
    return np.sum(x, axis=axis, keepdims=keepdim).shape


@pytest.mark.parametrize(
    "shape,dim",
    [
        ((300, 70), 0),  # [R, K]: rows combined, partitions reduced on TensorE
        ((3, 130, 600), 1),  # [K, R, K] with K > 512 columns
        ((2, 130, 33), [0, 2]),  # [R, K, R]
        ((4, 5, 6, 7), [0, 1]),  # a prefix: [R, K]
        ((2, 3, 600), [1, 2]),  # a suffix: [K, R]
        ((300, 70), None),  # everything
        ((5000,), 0),  # a long 1-D x: everything
        ((3, 9000), -1),  # the last dim, rows longer than rows.py takes
        ((129, 1, 70), [0, 1]),  # a size-1 dim among the reduced
    ],
)
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_any_dims(op, shape, dim, keepdim):
    t = {"x": (shape, "float32", "normal"), "out": (_reduced(shape, dim, keepdim), "float32", None)}
    args = {"x": "x", "out": "out", "dim": dim, "keepdim": keepdim}
    _compare(_run(t, [(op, args)]), op, args)


@pytest.mark.parametrize(
    "shape,dim,was_us,most_us",
    [
        ((127, 129, 3), 1, 137.7, 6),  # amax's time before (LNC 1, us); sum's 41.5
        ((300, 7, 5), 1, 176.2, 6),
        ((100000, 3, 2), 1, 58334.6, 40),  # blocks of [R, K] = [3, 2] for each of the 1e5 items
        ((2, 3, 5, 2), [1, 2], 2.5, 3),
        ((1000, 3, 1, 2), [1, 2], 584.5, 6),
    ],
)
@pytest.mark.parametrize("op", ["sum", "mean", "amax"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_a_middle_dim_with_few_columns(op, shape, dim, was_us, most_us, keepdim):
    """[O, R, K] with R x K in a partition (`reduce.Reduce.kept_small`): O's items on the
    partitions, one load, one tensor_reduce over the R axis a block, not blocks of R's rows by
    K's few columns for each item of O (amax over the middle dim of [127, 129, 3] fp32 took
    137.7 us at LNC 1, 3.4 us now)."""
    t = {"x": (shape, "float32", "normal"), "out": (_reduced(shape, dim, keepdim), "float32", None)}
    args = {"x": "x", "out": "out", "dim": dim, "keepdim": keepdim}
    _compare(_run(t, [(op, args)]), op, args)
    timed, _ = run_ops({k: v[:2] for k, v in t.items()}, [(op, args)], lnc=1)
    assert timed.summary["device_time_ns"] < most_us * 1e3 <= 1.2 * was_us * 1e3


@pytest.mark.parametrize("dt,out_dt", [("bfloat16", "bfloat16"), ("float16", "float32")])
@pytest.mark.parametrize("op", ["sum", "amax"])
def test_reductions_over_other_dims_in_16_bit(op, dt, out_dt):
    shape, dim = (260, 3, 513), [0, 1]
    t = {"x": (shape, dt, "normal"), "out": (_reduced(shape, dim, False), out_dt, None)}
    args = {"x": "x", "out": "out", "dim": dim}
    r = _run(t, [(op, args)])
    x = r.tensor("x").astype(np.float64)
    want = x.sum(axis=(0, 1)) if op == "sum" else x.max(axis=(0, 1))
    got = r.tensor("out").astype(np.float64)
    # fp32 accumulation then one rounding to out's dtype (a sum of 780 terms: a few ulp)
    tol = 4 * tolerance(out_dt)[0] * np.abs(x).sum(axis=(0, 1)).max()
    np.testing.assert_allclose(got, want, atol=max(tol, 1e-6))
    if op == "amax":
        np.testing.assert_array_equal(got, want.astype(dtype(out_dt).np))  # exact


# (300, 5010): rows that fit, no power of two of 32 or more divides them; (8, 128256): Llama
# 3's vocab, in pieces of 1002 a partition (chunk maxima of 167: `argmax_chunks.chunk`)
@pytest.mark.parametrize(
    "shape", [(300, 70), (2, 130, 600), (1000,), (128, 4096), (300, 5010), (8, 128256)]
)
@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_over_the_last_dim(shape, dt, keepdim):
    out = shape[:-1] + ((1,) if keepdim else ())
    t = {"x": (shape, dt, "normal"), "out": (out, "int32", None)}
    args = {"x": "x", "out": "out", "dim": -1, "keepdim": keepdim}
    r = _run(t, [("argmax", args)])
    want = np.argmax(r.tensor("x").astype(np.float64), axis=-1)
    got = r.tensor("out")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_argmax_chunks_divide_a_partitions_elements():
    """`argmax_chunks.chunk`: a power of two of 32 or more near sqrt(n) where one divides n,
    else the divisor of 32 or more nearest sqrt(n), else none."""
    assert chunk(4096) == 64 and chunk(8192) == 64 and chunk(1024) == 32
    assert chunk(1002) == 167 and chunk(5010) == 167  # 2 x 3 x 167, 2 x 3 x 5 x 167
    assert chunk(1009) is None and chunk(40) is None  # a prime; 40 has no second chunk


def test_argmax_takes_the_first_of_equal_maxima(tmp_path):
    x = np.zeros((130, 600), np.float32)
    x[:, 7] = x[:, 300] = x[:, 599] = 2.0
    x[5, 2] = 2.0
    t = {"x": ((130, 600), "float32", _npy(tmp_path, "x", x)), "out": ((130,), "int32", None)}
    r = _run(t, [("argmax", {"x": "x", "out": "out"})])
    want = np.full(130, 7)
    want[5] = 2
    np.testing.assert_array_equal(r.tensor("out"), want)


@pytest.mark.parametrize(
    "shape,dims",
    [
        ((3, 4, 5, 6), [1, 0, 2, 3]),
        ((3, 4, 5, 6), [0, 2, 1, 3]),
        ((3, 4, 5, 6), [2, 0, 1, 3]),
        ((2, 130, 70), [1, 0, 2]),
        ((200, 300), [1, 0]),  # a swap of the last two: a transpose
        ((2, 130, 600), [0, 2, 1]),
        ((700,), [0]),
        # x's last dim moved elsewhere (`transpose.lower_moved_last`): attention's
        # [B, T, H, hd] -> [B, H, hd, T] under torch.compile, and others
        ((2, 130, 3, 40), [0, 2, 3, 1]),
        ((3, 5, 200), [2, 0, 1]),
        ((4, 6, 7, 300), [3, 1, 0, 2]),
    ],
)
@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
def test_permute(shape, dims, dt):
    out = tuple(shape[d] for d in dims)
    t = {"x": (shape, dt, "normal"), "out": (out, dt, None)}
    r = _run(t, [("permute", {"x": "x", "out": "out", "dims": dims})])
    np.testing.assert_array_equal(r.tensor("out"), np.transpose(r.tensor("x"), dims))


@pytest.mark.parametrize("src,dst", [("float32", "bfloat16"), ("bfloat16", "bfloat16")])
def test_contiguous_copies_and_casts(src, dst):
    t = {"x": ((300, 1000), src, "normal"), "out": ((300, 1000), dst, None)}
    args = {"x": "x", "out": "out"}
    r = _run(t, [("contiguous", args)])
    np.testing.assert_array_equal(r.tensor("out"), r.tensor("x").astype(dtype(dst).np))


def test_contiguous_is_a_few_large_hbm_to_hbm_copies():
    """8 MiB of fp32: CHUNK-sized HBM -> HBM copies, nothing through SBUF, and each byte read
    and written once."""
    from trnsim.kernels.movement import CHUNK

    shape = (1024, 2048)
    t = {"x": (shape, "float32", "normal"), "out": (shape, "float32", None)}
    r = _run(t, [("contiguous", {"x": "x", "out": "out"})])
    ins = r.program.kernels["k"].per_core[0].instructions
    nbytes = 1024 * 2048 * 4
    assert len(ins) == nbytes // CHUNK
    assert all(i.OP == "dma_copy" and i.src.name == "x" and i.dst.name == "out" for i in ins)
    assert r.summary["hbm"]["bytes_read"] == r.summary["hbm"]["bytes_written"] == nbytes


@pytest.mark.parametrize(
    "shapes,dim",
    [
        ([(300, 70), (300, 30), (300, 1)], 1),
        ([(300, 70), (5, 70)], 0),
        ([(2, 130, 7), (2, 1, 7), (2, 4, 7)], -2),
    ],
)
@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
def test_cat(shapes, dim, dt):
    names = [f"t{i}" for i in range(len(shapes))]
    out = list(shapes[0])
    out[dim] = sum(s[dim] for s in shapes)
    t = {n: (s, dt, "normal") for n, s in zip(names, shapes)}
    t["out"] = (tuple(out), dt, None)
    args = {"tensors": names, "out": "out", "dim": dim}
    _compare(_run(t, [("cat", args)]), "cat", args)


@pytest.mark.parametrize(
    "shape,size,dim",
    [((300, 100), 40, 1), ((300, 100), [100, 0, 200], 0), ((2, 130, 7), [1, 129], 1)],
)
def test_split(shape, size, dim):
    n = shape[dim]
    sizes = [min(size, n - a) for a in range(0, n, size)] if isinstance(size, int) else size
    outs = [f"o{i}" for i in range(len(sizes))]
    t = {"x": (shape, "bfloat16", "normal")}
    for o, k in zip(outs, sizes):
        s = list(shape)
        s[dim] = k
        t[o] = (tuple(s), "bfloat16", None)
    args = {"x": "x", "split_size": size, "outs": outs, "dim": dim}
    _compare(_run(t, [("split", args)]), "split", args)


@pytest.mark.parametrize(
    "vocab,d,idx_shape", [(300, 700, (3, 50)), (128, 64, (130,)), (1000, 2500, (200,))]
)
@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
def test_embedding(tmp_path, vocab, d, idx_shape, dt):
    rng = np.random.default_rng(1)
    idx = rng.integers(0, vocab, size=idx_shape).astype(np.int32)
    idx.flat[0], idx.flat[-1] = 0, vocab - 1  # the first and last rows
    t = {
        "weight": ((vocab, d), dt, "normal"),
        "indices": (idx_shape, "int32", _npy(tmp_path, "i", idx)),
        "out": ((*idx_shape, d), dt, None),
    }
    r = _run(t, [("embedding", {"weight": "weight", "indices": "indices", "out": "out"})])
    np.testing.assert_array_equal(r.tensor("out"), r.tensor("weight")[idx])  # exact


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5), (2, 1)])
@pytest.mark.parametrize("inp", [(130,), (200, 130), (200, 1)])
def test_addmm(beta, alpha, inp):
    t = {
        "input": (inp, "float32", "normal"),
        "mat1": ((200, 300), "bfloat16", "normal"),
        "mat2": ((300, 130), "bfloat16", "normal"),
        "out": ((200, 130), "float32", None),
    }
    args = {"input": "input", "mat1": "mat1", "mat2": "mat2", "out": "out"}
    args |= {"beta": beta, "alpha": alpha}
    r = _run(t, [("addmm", args)])
    ref = reference("addmm", {k: v for k, v in args.items() if k != "out"},
                    {n: r.tensor(n) for n in ("input", "mat1", "mat2")})  # fmt: skip
    np.testing.assert_allclose(r.tensor("out"), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,c", [(300, 70), (128, 5000), (200, 9000)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
def test_losses(tmp_path, op, n, c, reduction):
    rng = np.random.default_rng(2)
    target = rng.integers(0, c, size=n).astype(np.int32)
    target[0], target[-1] = 0, c - 1
    x = rng.standard_normal((n, c)).astype(np.float32) * 3
    if op == "nll_loss":  # log-probabilities
        x = (x - np.log(np.exp(x.astype(np.float64)).sum(-1, keepdims=True))).astype(np.float32)
    out = (n,) if reduction == "none" else ()
    t = {
        "input": ((n, c), "float32", _npy(tmp_path, "x", x)),
        "target": ((n,), "int32", _npy(tmp_path, "t", target)),
        "out": (out, "float32", None),
    }
    args = {"input": "input", "target": "target", "out": "out", "reduction": reduction}
    r = _run(t, [(op, args)])
    import torch

    f = torch.nn.functional.cross_entropy if op == "cross_entropy" else torch.nn.functional.nll_loss
    want = f(torch.from_numpy(x).double(), torch.from_numpy(target).long(), reduction=reduction)
    np.testing.assert_allclose(r.tensor("out"), want.numpy(), rtol=2e-5, atol=2e-5)
    _compare(r, op, args)


@pytest.mark.parametrize(
    "n,c,dt",
    [(5, 1031, "float32"), (5, 1025, "float32"), (300, 2053, "bfloat16"), (5, 1999, "float32")],
)
def test_cross_entropy_over_rows_a_partition_of_any_length(tmp_path, n, c, dt):
    """Rows a partition in even column chunks (`loss_rows._chunks`): a prime length went in c
    chunks of one element ([5, 1031] fp32: 736 us, [300, 2053] bf16: 5.0 ms) and chunks of 256
    or fewer elements summed their exps into the first chunk's column ([5, 1025] fp32, chunks of
    205: losses off by 2.6): torch's values now, in microseconds (5.6 us, 11.3 us)."""
    rng = np.random.default_rng(3)
    target = rng.integers(0, c, size=n).astype(np.int32)
    t = {
        "input": ((n, c), dt, "normal"),
        "target": ((n,), "int32", _npy(tmp_path, "t", target)),
        "out": ((n,), "float32", None),
    }
    args = {"input": "input", "target": "target", "out": "out", "reduction": "none"}
    r = _run(t, [("cross_entropy", args)])
    import torch

    x = torch.from_numpy(r.tensor("input").astype(np.float64))
    want = torch.nn.functional.cross_entropy(x, torch.from_numpy(target).long(), reduction="none")
    np.testing.assert_allclose(r.tensor("out"), want.numpy(), rtol=1e-4, atol=1e-4)
    timed, _ = run_ops({k: v[:2] for k, v in t.items()}, [("cross_entropy", args)], lnc=1)
    assert timed.summary["device_time_ns"] < 20e3


def test_cross_entropy_on_bf16_logits():
    t = {
        "input": ((300, 1000), "bfloat16", "normal"),
        "target": ((300,), "int32", "arange"),
        "out": ((300,), "bfloat16", None),
    }
    args = {"input": "input", "target": "target", "out": "out", "reduction": "none"}
    _compare(_run(t, [("cross_entropy", args)]), "cross_entropy", args)


def _tensors(**shapes):
    return {n: TensorSpec(n, s, dtype("int32" if n in ("t", "i") else "float32"))
            for n, s in shapes.items()}  # fmt: skip


@pytest.mark.parametrize(
    "op,args,shapes,match",
    [
        ("sum", {"x": "x", "out": "o", "dim": [0]}, {"x": (4, 6), "o": (4,)},
         r"sum: x \[4, 6\] reduced over dims \[0\] gives \[6\], but out is \[4\]"),
        ("sum", {"x": "x", "out": "o", "dim": [1, 1]}, {"x": (4, 6), "o": (4,)},
         r"sum: dim \[1, 1\] names a dim twice"),
        ("amax", {"x": "x", "out": "o", "dim": 2}, {"x": (4, 6), "o": (4,)},
         r"amax: dim 2; expected dims in -2..1"),
        ("argmax", {"x": "x", "out": "o", "dim": [0, 1]}, {"x": (4, 6), "o": (6,)},
         r"argmax: dim \[0, 1\] of x \[4, 6\]; expected one dim in -2..1"),
        ("argmax", {"x": "x", "out": "o", "dim": 0}, {"x": (4, 6), "o": (4,)},
         r"argmax: x \[4, 6\] over dim 0 gives \[6\], but out is \[4\]"),
        ("permute", {"x": "x", "out": "o", "dims": [0, 0]}, {"x": (4, 6), "o": (4, 6)},
         r"permute: dims \[0, 0\] for x \[4, 6\]; expected a permutation of 0..1"),
        ("permute", {"x": "x", "out": "o", "dims": [1, 0]}, {"x": (4, 6), "o": (4, 6)},
         r"permute: x \[4, 6\] float32 -> out \[4, 6\] float32; expected out \[6, 4\]"),
        ("cat", {"tensors": ["x", "y"], "out": "o", "dim": 1}, {"x": (4, 6), "y": (3, 2),
         "o": (4, 8)}, r"cat: y \[3, 2\] does not fit out \[4, 8\] along dim 1"),
        ("cat", {"tensors": ["x", "y"], "out": "o"}, {"x": (4, 6), "y": (3, 6), "o": (8, 6)},
         r"cat: the inputs' dim 0 add up to 7, out's is 8"),
        ("cat", {"tensors": ["x", "nope"], "out": "o"}, {"x": (4, 6), "o": (4, 6)},
         r"cat: tensors names 'nope', which is not a tensor"),
        ("permute", {"x": "x", "out": "o", "dims": "01"}, {"x": (4, 6), "o": (4, 6)},
         r"permute: dims: got '01'; expected a list of integers"),
        ("cat", {"tensors": "x", "out": "o"}, {"x": (4, 6), "o": (4, 6)},
         r"cat: tensors: got 'x'; expected a non-empty list of tensor names"),
        ("split", {"x": "x", "split_size": [3, 2], "outs": ["y", "o"]},
         {"x": (4, 6), "y": (3, 6), "o": (2, 6)},
         r"split: split_size \[3, 2\]; expected a positive integer or a list of sizes adding "
         r"up to 4"),
        ("split", {"x": "x", "split_size": 2, "outs": ["y"]}, {"x": (4, 6), "y": (2, 6)},
         r"split: x \[4, 6\] split by 2 along dim 0 gives 2 pieces; outs names 1"),
        ("embedding", {"weight": "x", "indices": "i", "out": "o"},
         {"x": (10, 6), "i": (4,), "o": (4, 5)},
         r"embedding: indices \[4\], weight \[10, 6\] -> out \[4, 5\]; expected out \[4, 6\]"),
        ("cross_entropy", {"input": "x", "target": "t", "out": "o"},
         {"x": (4, 6), "t": (4,), "o": (4,)}, r"cross_entropy: out \[4\]; expected \[\] for mean"),
        ("nll_loss", {"input": "x", "target": "t", "out": "o", "reduction": "avg"},
         {"x": (4, 6), "t": (4,), "o": ()},
         r"nll_loss: reduction 'avg'; expected mean, sum or none"),
        ("nll_loss", {"input": "x", "target": "t", "out": "o"},
         {"x": (4, 6), "t": (5,), "o": ()}, r"nll_loss: target \[5\]; expected \[4\]"),
        ("addmm", {"input": "y", "mat1": "x", "mat2": "x", "out": "o", "beta": "two"},
         {"x": (4, 4), "y": (4,), "o": (4, 4)}, r"addmm: beta 'two'; expected a number"),
    ],
)  # fmt: skip
def test_what_is_not_lowered_is_an_error_naming_the_op_and_line(op, args, shapes, match):
    with pytest.raises(TraceError, match="t.yaml:9: " + match):
        lower([OpSpec(op, args, line=9)], _tensors(**shapes), load_chip("trn2"), "t.yaml")


@pytest.mark.parametrize("cores", [1, 2])
def test_a_permute_moving_the_last_dim_turns_slices_by_dma(cores):
    """[2, 130, 3, 40] -> [2, 3, 40, 130]: per (batch, head) one [130, 40] slice of x turned
    by DMA transpose, in blocks of 128 of out's rows; at LNC 2 each core stores the rows of
    its share (was refused: 'move x's last dim elsewhere than a swap of the last two')."""
    from tests.kernels.test_ops import _run_cores

    t = {"x": ((2, 130, 3, 40), "float32", "normal"), "out": ((2, 3, 40, 130), "float32", None)}
    args = {"x": "x", "out": "out", "dims": [0, 2, 3, 1]}
    r, progs = _run_cores(t, [("permute", args)], cores)
    np.testing.assert_array_equal(r.tensor("out"), np.transpose(r.tensor("x"), [0, 2, 3, 1]))
    # one block a slice (40 rows of out, 130 of x's rows); at LNC 2 out's 240 rows are cut at
    # 128, inside slice (1, 0): 4 blocks on core 0 (the last its rows 0..8), 3 on core 1
    turned = [sum(i.OP == "dma_copy" and i.transpose for i in p.instructions) for p in progs]
    assert turned == ([6] if cores == 1 else [4, 3])


def test_a_permute_moving_the_last_dim_without_dma_transpose_is_an_error():
    with pytest.raises(TraceError, match=r"permute: dims \[2, 0, 1\] move x's last dim, which "
                       r"trn1 lowers only as a swap of the last two"):  # fmt: skip
        lower([OpSpec("permute", {"x": "x", "out": "o", "dims": [2, 0, 1]})],
              _tensors(x=(2, 3, 4), o=(4, 2, 3)), load_chip("trn1"))  # fmt: skip


def _lnc_run(t, ops):
    from tests.kernels.test_ops import _run_cores

    return _run_cores(t, ops, 2)


def test_two_cores_share_the_isolated_ops_and_give_the_same_values(tmp_path):
    rng = np.random.default_rng(3)
    target = rng.integers(0, 700, size=300).astype(np.int32)
    t = {
        "x": ((300, 700), "float32", "normal"),
        "y": ((300, 100), "float32", "normal"),
        "t": ((300,), "int32", _npy(tmp_path, "t", target)),
        "w": ((700, 64), "bfloat16", "normal"),
        "c": ((300, 800), "float32", None),
        "p": ((700, 300), "float32", None),
        "s": ((700,), "float32", None),
        "l": ((300,), "float32", None),
        "m": ((), "float32", None),
        "e": ((300, 64), "bfloat16", None),
    }
    ops = [
        ("cat", {"tensors": ["x", "y"], "out": "c", "dim": 1}),
        ("permute", {"x": "x", "out": "p", "dims": [1, 0]}),
        ("sum", {"x": "x", "out": "s", "dim": 0}),
        ("cross_entropy", {"input": "x", "target": "t", "out": "l", "reduction": "none"}),
        ("nll_loss", {"input": "x", "target": "t", "out": "m"}),
        ("embedding", {"weight": "w", "indices": "t", "out": "e"}),
    ]
    two, progs = _lnc_run(t, ops)
    one = _run(t, ops)
    for name in ("c", "p", "s", "l", "m", "e"):
        np.testing.assert_array_equal(two.tensor(name), one.tensor(name), err_msg=name)
    assert all(len(p.instructions) > 20 for p in progs)  # both cores work
    from trnsim.trace.races import find_races

    assert find_races(two.program) == []


@pytest.mark.parametrize(
    "ops,match",
    [
        ([("exp", {"x": "x", "out": "h"}), ("sum", {"x": "h", "out": "s", "dim": 0})],
         r"t.yaml:2: sum: x 'h' is used by another op of this kernel, and this op shares"),
        ([("sum", {"x": "x", "out": "s", "dim": 0}), ("exp", {"x": "s", "out": "s"})],
         r"t.yaml:2: exp: x 's' is used by another op of this kernel, and that op shares"),
        ([("exp", {"x": "x", "out": "h"}), ("contiguous", {"x": "y", "out": "x"})],
         r"t.yaml:2: contiguous: out 'x' is used by another op"),
    ],
)  # fmt: skip
def test_an_isolated_op_with_lnc_2_meets_the_other_core_next_to_an_op_on_its_tensors(ops, match):
    """The cores meet at a core_barrier before the second op (values: `test_core_meetings`);
    a chip without core_barrier refuses it, naming the op."""
    from trnsim.isa import CoreBarrier

    tensors = _tensors(x=(256, 64), y=(256, 64), h=(256, 64), s=(64,))
    specs = [OpSpec(op, args, line=i + 1) for i, (op, args) in enumerate(ops)]
    progs = lower_cores(specs, tensors, load_chip("trn2"), 2, "t.yaml")
    assert [sum(type(i) is CoreBarrier for i in p.instructions) for p in progs] == [1, 1]
    with pytest.raises(TraceError, match=match + ".*no core_barrier"):
        lower_cores(specs, tensors, load_chip("trn2", ["core.core_barrier=false"]), 2, "t.yaml")
    lower_cores(specs, tensors, load_chip("trn2"), 1, "t.yaml")  # on one core it is fine
    # two isolated ops that only read one tensor need no meeting
    both = [OpSpec("sum", {"x": "x", "out": "s", "dim": 0}), OpSpec("contiguous",
            {"x": "x", "out": "y"})]  # fmt: skip
    progs = lower_cores(both, tensors, load_chip("trn2"), 2, "t.yaml")
    assert [sum(type(i) is CoreBarrier for i in p.instructions) for p in progs] == [0, 0]


@pytest.mark.parametrize("chip", ["trn1", "trn3"])
def test_argmax_on_other_chips(chip):
    """trn1's ScalarE reduces by add only: the index minimum is VectorE's there."""
    t = {"x": ((200, 300), "bfloat16", "normal"), "out": ((200,), "int32", None)}
    r = _run(t, [("argmax", {"x": "x", "out": "out"})], chip=chip)
    np.testing.assert_array_equal(r.tensor("out"), np.argmax(r.tensor("x"), axis=-1))


def test_addmm_on_two_cores_gives_one_cores_values():
    t = {
        "input": ((130,), "float32", "normal"),
        "mat1": ((300, 200), "bfloat16", "normal"),
        "mat2": ((200, 130), "bfloat16", "normal"),
        "out": ((300, 130), "float32", None),
    }
    ops = [("addmm", {"input": "input", "mat1": "mat1", "mat2": "mat2", "out": "out",
                      "beta": 0.5, "alpha": 2.0})]  # fmt: skip
    two, progs = _lnc_run(t, ops)
    np.testing.assert_array_equal(two.tensor("out"), _run(t, ops).tensor("out"))
    assert all(any(i.OP == "matmul" for i in p.instructions) for p in progs)


def test_losses_take_float_targets_and_refuse_one_out_of_range(tmp_path):
    from trnsim.errors import SimError

    t = {
        "input": ((130, 50), "float32", "normal"),
        "target": ((130,), "float32", _npy(tmp_path, "t", np.arange(130) % 50)),
        "out": ((130,), "float32", None),
    }
    args = {"input": "input", "target": "target", "out": "out", "reduction": "none"}
    _compare(_run(t, [("nll_loss", args)]), "nll_loss", args)
    t["target"] = ((130,), "int32", _npy(tmp_path, "t", np.full(130, 50)))
    # the positions r * 50 + 50 of rows before the last are other rows' elements (unchecked, as
    # on the device); the last row's is past the input's end
    with pytest.raises(SimError, match=r"gather index 6500 is out of range 0..6499"):
        _run(t, [("cross_entropy", args)])


@pytest.mark.parametrize("chip", ["trn1", "trn3"])
def test_the_new_ops_on_other_chips(tmp_path, chip):
    """Reductions over a leading dim (TensorE sums, transposes for max), the gather DMA of
    embedding and of the losses' pick, a permute through `transpose` (TensorE on trn1)."""
    idx = (np.arange(150) * 7 % 300).astype(np.int32)
    t = {
        "x": ((300, 150), "bfloat16", "normal"),
        "s": ((150,), "float32", None),
        "m": ((150,), "float32", None),
        "i": ((150,), "int32", _npy(tmp_path, "i", idx)),
        "e": ((150, 150), "bfloat16", None),
        "l": ((1,), "float32", None),
        "p": ((150, 300), "bfloat16", None),
    }
    ops = [
        ("sum", {"x": "x", "out": "s", "dim": 0}),
        ("amax", {"x": "x", "out": "m", "dim": 0}),
        ("embedding", {"weight": "x", "indices": "i", "out": "e"}),
        ("permute", {"x": "x", "out": "p", "dims": [1, 0]}),
    ]
    r = _run(t, ops, chip=chip)
    for op, args in ops:
        _compare(r, op, args)
    t2 = {"x": ((150, 300), "bfloat16", "normal"), "i": t["i"], "l": t["l"]}
    args = {"input": "x", "target": "i", "out": "l"}
    _compare(_run(t2, [("cross_entropy", args)], chip=chip), "cross_entropy", args)


@pytest.mark.parametrize(
    "shape,dim", [((300, 70), 0), ((2, 130, 7), 1), ((3, 4, 5, 6), -3), ((260, 3, 200), 0)]
)
@pytest.mark.parametrize("dt", ["bfloat16", "float32"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_over_other_dims(shape, dim, dt, keepdim):
    out = tuple(1 if k == dim % len(shape) else n for k, n in enumerate(shape)
                if keepdim or k != dim % len(shape))  # fmt: skip
    t = {"x": (shape, dt, "normal"), "out": (out, "int32", None)}
    args = {"x": "x", "out": "out", "dim": dim, "keepdim": keepdim}
    r = _run(t, [("argmax", args)])
    want = np.argmax(r.tensor("x").astype(np.float64), axis=dim)
    np.testing.assert_array_equal(r.tensor("out").reshape(want.shape), want)


def test_argmax_over_a_leading_dim_takes_the_first_of_equal_maxima(tmp_path):
    x = np.zeros((300, 130), np.float32)
    x[5, :] = x[200, :] = x[299, :] = 1.0  # ties within a block and across blocks
    x[250, 7] = 2.0
    t = {"x": ((300, 130), "float32", _npy(tmp_path, "x", x)), "out": ((130,), "int32", None)}
    r = _run(t, [("argmax", {"x": "x", "out": "out", "dim": 0})])
    want = np.full(130, 5)
    want[7] = 250
    np.testing.assert_array_equal(r.tensor("out"), want)


@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize(
    "op,shape,dims,keepdim,dt",
    [
        ("mean", (4, 256, 7, 7), [2, 3], True, "float32"),  # a CNN's global average pool
        ("amax", (3, 50, 3000), [2], False, "bfloat16"),
        ("sum", (130, 5, 6), [1, 2], False, "float32"),
    ],
)
def test_a_reduction_of_the_trailing_dims_groups_rows_to_a_partition(cores, op, shape, dims,
                                                                     keepdim, dt):  # fmt: skip
    """x [O, R] (the reduced dims last, R <= 4096): several of O's rows to a partition, one
    load and one `tensor_reduce` over R a block (`Reduce.kept_small` with K = 1), not a
    [128, R] block of single rows each. trn2 LNC 2 fp32 mean over [32, 2048, 7, 7]'s last two
    dims: 151.3 -> 30.1 us (roofline 18.1)."""
    from tests.kernels.test_ops import _run_cores

    out = [1 if d in dims else n for d, n in enumerate(shape) if keepdim or d not in dims]
    t = {"x": (shape, dt, "normal"), "o": (out, dt, None)}
    r, progs = _run_cores(t, [(op, {"x": "x", "out": "o", "dim": dims, "keepdim": keepdim})],
                          cores)  # fmt: skip
    ref = {"mean": np.mean, "amax": np.max, "sum": np.sum}[op]
    want = ref(r.tensor("x").astype(np.float64), axis=tuple(dims), keepdims=keepdim)
    tol = 1e-5 if dt == "float32" else 1e-2
    np.testing.assert_allclose(r.tensor("o").astype(np.float64), want, rtol=tol, atol=tol)
    if op == "mean":  # 1024 rows of 49: 83 a partition, a block a core (were 8 blocks)
        loads = sum(i.OP == "dma_copy" and i.src.name == "x" for p in progs for i in p.instructions)
        assert loads == cores
