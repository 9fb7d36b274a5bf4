"""Running a lowered program: tensors, one kernel built by a lowering, the run's result."""

from __future__ import annotations

from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.kernels.builder import KernelBuilder
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, OpSpec, Program, Step, StreamSpec, TensorSpec


def run_lowered(tensors: dict, lower, chip: str = "trn2", mode: str = "functional", seed: int = 0):
    """tensors: name -> (shape, dtype name, init); lower(builder, cfg) emits the kernel."""
    cfg = load_chip(chip)
    specs = {n: TensorSpec(n, tuple(s), dtype(d), init) for n, (s, d, init) in tensors.items()}
    b = KernelBuilder(specs)
    lower(b, cfg)
    prog = Program(
        "lowered",
        chip,
        seed,
        mode,
        None,
        [],
        specs,
        {"k": KernelSpec("k", per_core=[b.program()])},
        [StreamSpec("default", 0, [Step("launch", "k")])],
    )
    return run_program(prog, cfg, mode), b


def run_ops(tensors: dict, ops: list, chip: str = "trn2"):
    """`ops` ([(op, args)]) lowered into one core's kernel and run functionally (`run_lowered`)."""
    from trnsim.kernels import lower
    from trnsim.trace.program import OpSpec

    specs = [OpSpec(op, args) for op, args in ops]

    def emit(b, cfg):
        prog = lower(specs, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    return run_lowered(tensors, emit, chip=chip)[0]


def timed(tensors: dict, op: str, args: dict, chip: str = "trn2") -> tuple[float, float]:
    """(simulated ns, roofline ns) of `op` with `args` alone on one core, timing mode."""
    from trnsim.kernels import lower
    from trnsim.kernels.roofline import op_rows
    from trnsim.trace.program import OpSpec

    ops = [OpSpec(op, args)]

    def emit(b, cfg):
        prog = lower(ops, b.tensors, cfg)
        b.tiles.update(prog.tiles)
        b.instructions[:] = prog.instructions

    res, b = run_lowered(tensors, emit, chip=chip, mode="timing")
    row = op_rows(ops, b.tensors, load_chip(chip), 1)[0]
    return res.summary["device_time_ns"], row["roofline_ns"]


def checked_layer_norm(specs: dict, lnc: int, inputs: bool = False):
    """out of one `layer_norm` op (x, w, b -> out, specs: name -> TensorSpec) at `lnc`, run
    functionally with `--check`, which must hold (and x, w, b as run, with `inputs`)."""
    prog = Program("ln", "trn2", 0, "functional", lnc, [], specs,
                   {"k": KernelSpec("k", ops=[OpSpec("layer_norm", {
                       "x": "x", "out": "out", "weight": "w", "bias": "b"}, 1)])},
                   [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
    r = run_program(prog, load_chip("trn2"), "functional", check=True)
    assert all(c["ok"] for c in r.summary["check"].values()), r.summary["check"]
    if specs["out"].dtype.name == "bfloat16":
        err = bf16_ulps(r.tensor("out"), *(r.tensor(n) for n in "xwb"))
        assert err <= ULPS_MOST, (lnc, err)  # (--check's tolerance alone lets a variance
        # 10% off pass: its atol is 8 ulps of the output's largest magnitude)
    return (r.tensor("out"), *(r.tensor(n) for n in "xwb")) if inputs else r.tensor("out")


ULPS_MOST = 1.5  # a bf16 layer_norm's mean error in units in the last place, at most (the
# plans tested: 0.54 at most; a variance 10% off: several)


def bf16_ulps(out, x, w, b, eps: float = 1e-5) -> float:
    """The mean distance of a bf16 layer_norm's `out` from float64's over x (its rows the last
    dim), w and b, in bf16 units in the last place of each reference value (an ulp of 2^-7
    of a magnitude, at least of 2^-6 of the largest: values near 0 are sums of larger ones)."""
    import numpy as np

    x, w, b, out = (np.asarray(a, dtype=np.float64) for a in (x, w, b, out))
    m = x.mean(-1, keepdims=True)
    ref = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b
    mag = np.maximum(np.abs(ref), np.abs(ref).max() * 2.0**-6)
    ulp = 2.0 ** (np.floor(np.log2(mag)) - 7)
    return float((np.abs(out - ref) / ulp).mean())


def checked_at_both_lncs(specs: dict, ops: list, out: str = "out", equal: bool = True) -> list:
    """`out` after `ops` (OpSpecs over `specs`: name -> TensorSpec) run functionally at LNC 1
    and at LNC 2, `--check` holding at each; with `equal`, the two are equal, bit for bit."""
    got = []
    for lnc in (1, 2):
        prog = Program("p", "trn2", 0, "functional", lnc, [], specs,
                       {"k": KernelSpec("k", ops=ops)},
                       [StreamSpec("s", 0, [Step("launch", "k")])])  # fmt: skip
        r = run_program(prog, load_chip("trn2"), "functional", check=True)
        checks = r.summary["check"]
        assert checks and all(c["ok"] for c in checks.values()), (lnc, checks)
        got.append(r.tensor(out))
    assert not equal or (got[0].shape == got[1].shape and (got[0] == got[1]).all())
    return got


def layer_norm_specs(shape, t) -> dict:
    """x (normal), w, b (normal) and out of a layer_norm over rows of shape[-1], dtype `t`."""
    return {
        "x": TensorSpec("x", shape, t, "normal"),
        "w": TensorSpec("w", shape[-1:], t, "normal"),
        "b": TensorSpec("b", shape[-1:], t, "normal"),
        "out": TensorSpec("out", shape, t, None),
    }


def saved_specs(arrays: dict, t, tmp_path) -> dict:
    """name -> TensorSpec of dtype `t` initialised from each array, saved as fp32 .npy in
    `tmp_path`."""
    import numpy as np

    specs = {}
    for name, a in arrays.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, np.asarray(a, np.float32))
        specs[name] = TensorSpec(name, a.shape, t, ("file", str(path)))
    return specs


def massive_at_both_lncs(shape, tmp_path):
    """bf16 rows of mean 10^4 (steps of 64 there), spread 300, and a massive first channel
    (+3 10^4): --check at LNC 1 and 2, the same values bit for bit."""
    import numpy as np

    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape) * 300 + 1e4
    x[:, 0] += 3e4
    d = shape[-1]
    arrays = {"x": x, "w": rng.standard_normal(d), "b": rng.standard_normal(d)}
    t = dtype("bfloat16")
    out = []
    for lnc in (1, 2):
        from trnsim.kernels import norms

        specs = saved_specs(arrays, t, tmp_path) | {"out": TensorSpec("out", x.shape, t, None)}
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(specs, lnc))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])


def layer_norm_at_both_lncs(shape, t) -> None:
    """A layer_norm of `layer_norm_specs` at LNC 1 and 2, its plan chosen afresh at each:
    --check holds at both, and they give the same values, bit for bit."""
    import numpy as np

    from trnsim.kernels import norms

    out = []
    for lnc in (1, 2):
        norms._CHOSEN.clear()
        out.append(checked_layer_norm(layer_norm_specs(shape, t), lnc))
    norms._CHOSEN.clear()
    assert np.array_equal(out[0], out[1])


def variant_at_both_lncs(monkeypatch, shape, t, variant: str) -> None:
    """`layer_norm_at_both_lncs` with `norms.VARIANTS` only `variant` (a name, or a name and an
    index: "STT_GROUP3[0]"), on x of TRIAL_BYTES or more (so the variant applies)."""
    import numpy as np

    from trnsim.kernels import norms

    name, _, i = variant.partition("[")
    v = getattr(norms, name)
    monkeypatch.setattr(norms, "VARIANTS", (v[int(i[:-1])] if i else v,))
    assert np.prod(shape) * t.itemsize >= norms.TRIAL_BYTES
    layer_norm_at_both_lncs(shape, t)
