"""The trace keys a recording writes (docs/trace_extensions.md, "Recorded runs"): strided views,
`estimate:` kernels, `cores:` beside `ops:`, a step's `stream:`; their checks (one line naming
the line) and what a run does with them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trace.helpers import error, line, parse
from trnsim.config import load_chip
from trnsim.runtime.estimate import estimate_ps
from trnsim.runtime.session import run_program
from trnsim.trace import load
from trnsim.units import seconds_to_ps

BYTES = """\
trnsim: 1
tensors:
  m: {shape: [256], dtype: uint8, init: arange}
"""


def test_strided_view_keys():
    p = parse(BYTES + "  v: {view: m, dtype: float32, shape: [4, 8], strides: [1, 4], offset: 2}\n")
    v = p.tensors["v"]
    assert (v.view, v.dtype.name, v.shape, v.strides, v.offset) == ("m", "float32", (4, 8),
                                                                    (1, 4), 2)  # fmt: skip
    # offset alone: contiguous strides; the dtype defaults to the viewed tensor's
    w = parse(BYTES + "  w: {view: m, shape: [2, 3], offset: 5}\n").tensors["w"]
    assert (w.dtype.name, w.strides, w.offset) == ("uint8", (3, 1), 5)


@pytest.mark.parametrize(
    "entry, needle, what",
    [
        ("{view: m, dtype: float32, shape: [8, 8], strides: [9, 1]}", "w:", "reaches byte 284"),
        ("{view: m, dtype: float32, shape: [4], offset: 61}", "w:", "reaches byte 260"),
        ("{view: m, shape: [4, 4], strides: [1]}", "w:", "1 strides for 2 dims"),
        ("{view: m, shape: [4], strides: [-1]}", "w:", "strides[0]"),
        ("{view: m, shape: [4], offset: x}", "w:", "offset: got 'x'"),
        ("{view: v, shape: [4], offset: 1}", "w:", "a strided view (strides:/offset:) of a view"),
        ("{view: h, shape: [4], offset: 1}", "w:", "of a host tensor"),
        ("{view: s, shape: [4]}", "w:", "a view of strided view 's'"),
        ("{view: m, shape: [4], offset: 1, init: ones}", "w:", "a view cannot have init"),
    ],
)
def test_strided_view_errors(entry, needle, what):
    text = (
        BYTES
        + "  v: {view: m, shape: [16, 16]}\n  h: {shape: [8], dtype: float32, on: host}\n"
        + "  s: {view: m, shape: [4], offset: 1}\n"
        + f"  w: {entry}\n"
    )
    msg = error(text)
    assert msg.startswith(f"t.yaml:{line(text, '  w: ')}: tensors.w") and what in msg


def test_strided_views_run_on_their_memory(tmp_path):
    """neg of x's transpose written into another view of the same bytes: the values land
    where the strides put them."""
    values = np.arange(32, dtype=np.float32).reshape(4, 8)
    raw = np.zeros(512, np.uint8)
    raw[:128] = values.reshape(-1).view(np.uint8)
    np.save(tmp_path / "m.npy", raw)
    (tmp_path / "t.yaml").write_text("""\
trnsim: 1
tensors:
  m: {shape: [512], dtype: uint8, init: {file: m.npy}}
  xt: {view: m, dtype: float32, shape: [8, 4], strides: [1, 8], offset: 0}
  y: {view: m, dtype: float32, shape: [8, 4], strides: [4, 1], offset: 32}
ops:
  - neg: {x: xt, out: y}
""")
    r = run_program(load(tmp_path / "t.yaml"), load_chip("trn2"), "functional", lnc=1)
    got = r.tensors["m"].array.view(np.float32)
    np.testing.assert_array_equal(got[32:64].reshape(8, 4), -values.T)
    np.testing.assert_array_equal(got[:32].reshape(4, 8), values)


EST = """\
trnsim: 1
tensors:
  y: {shape: [4, 4], dtype: float32}
kernels:
  e:
    estimate: {op: cumsum.default, flops: 1000000, bytes: 4000000, dtype: bfloat16, time_ps: 7}
"""


def test_estimate_kernel_is_replayed_by_its_roofline_on_the_chip_that_runs_it():
    prog = parse(EST)
    e = prog.kernels["e"].estimate
    assert (e.op, e.flops, e.bytes, e.dtype, e.time_ps) == ("cumsum.default", 10**6, 4 * 10**6,
                                                            "bfloat16", 7)  # fmt: skip
    for chip in ("trn2", "trn3"):
        cfg = load_chip(chip)
        s = run_program(prog, cfg, "timing", lnc=2).summary
        peak = cfg.peak_flops.bfloat16 / (cfg.cores // 2)
        want = seconds_to_ps(max(10**6 / peak, 4 * 10**6 / (cfg.hbm.bandwidth * 2 / cfg.cores)))
        assert estimate_ps(cfg, 2, 10**6, 4 * 10**6, "bfloat16") == want
        assert s["estimated"]["time_ns"] == pytest.approx(want / 1000)
        assert s["estimated"]["ops"]["cumsum.default"]["launches"] == 1
        assert s["device_time_ns"] == pytest.approx(want / 1000)  # its span is device time
        assert s["flops"] == 0 and s["estimated"]["flops"] == 10**6


def test_estimate_writes_its_values(tmp_path):
    np.save(tmp_path / "y.npy", np.full((4, 4), 3.5, np.float32))
    text = EST.replace("time_ps: 7}", "writes: {y: {file: y.npy}}}")
    (tmp_path / "t.yaml").write_text(text)
    r = run_program(load(tmp_path / "t.yaml"), load_chip("trn2"), "functional")
    np.testing.assert_array_equal(r.tensor("y"), np.full((4, 4), 3.5, np.float32))


@pytest.mark.parametrize(
    "estimate, needle, what",
    [
        ("{op: x, flops: 1}", "estimate:", "missing key 'bytes'"),
        ("{op: x, flops: -1, bytes: 0}", "estimate:", "estimate.flops: got -1"),
        ("{op: x, flops: 1, bytes: 0, dtype: int8}", "estimate:", "estimate.dtype"),
        ("{op: x, flops: 1, bytes: 0, speed: 2}", "estimate:", "speed"),
        ("{op: x, flops: 1, bytes: 0, writes: {z: ones}}", "estimate:", "unknown device tensor"),
        ("{op: x, flops: 1, bytes: 0, writes: {y: {file: no.npy}}}", "estimate:", "no file"),
    ],
)
def test_estimate_errors(estimate, needle, what):
    text = EST.split("    estimate:")[0] + f"    estimate: {estimate}\n"
    msg = error(text)
    assert msg.startswith(f"t.yaml:{line(text, needle)}: kernels.e.estimate") and what in msg


def test_estimate_alone_and_cores_beside_ops_only():
    msg = error(EST + "    ops: [{relu: {x: y, out: y}}]\n")
    assert "a kernel with ops: cannot also have estimate:" in msg
    msg = error(EST + "    cores: 1\n")
    assert "a kernel with estimate: cannot also have cores:" in msg
    k = parse(
        EST.split("kernels:")[0] + "kernels:\n  k: {ops: [{relu: {x: y, out: y}}], cores: 1}\n"
    )
    assert k.kernels["k"].cores == 1
    text = EST.split("kernels:")[0] + "kernels:\n  k: {ops: [{relu: {x: y, out: y}}], cores: 0}\n"
    assert "kernels.k.cores: got 0" in error(text)


def test_cores_one_lowers_for_one_physical_core():
    text = EST.split("kernels:")[0] + "kernels:\n  k: {ops: [{relu: {x: y, out: y}}], cores: 1}\n"
    s = run_program(parse(text), load_chip("trn2"), "timing", lnc=2).summary
    assert {e.split(".")[0] for e, v in s["engines"].items() if v["instructions"]} == {"core0"}


SIDE = """\
trnsim: 1
tensors:
  x: {shape: [128, 512], dtype: float32}
  y: {shape: [128, 512], dtype: float32}
kernels:
  k: {ops: [{exp: {x: x, out: x}}]}
  j: {ops: [{exp: {x: y, out: y}}]}
streams:
  - name: main
    do:
      - launch: k
      - {launch: j, stream: side}
      - {record: done, stream: side}
      - wait: done
      - {synchronize: null, stream: side}
  - {name: side, core: 0, do: []}
"""


def test_one_host_thread_issues_to_several_streams():
    prog = parse(SIDE)
    steps = prog.streams[0].steps
    assert [(s.kind, s.stream) for s in steps] == [("launch", None), ("launch", "side"),
                                                   ("record", "side"), ("wait", None),
                                                   ("synchronize", "side")]  # fmt: skip
    cfg = load_chip("trn2")
    s = run_program(prog, cfg, "timing", lnc=1).summary
    # one host thread: the second launch is issued a launch cost after the first
    launch = cfg.host_link.launch_overhead * 1e9
    assert s["total_time_ns"] > 2 * launch


def test_step_stream_errors():
    msg = error(SIDE.replace("{launch: j, stream: side}", "{launch: j, stream: sde}"))
    assert "unknown stream 'sde'" in msg and "streams[0].do[1].stream" in msg
    msg = error(SIDE.replace("{launch: j, stream: side}", "{launch: j, stream: side, x: 1}"))
    assert "streams[0].do[1]" in msg


def test_writes_beside_ops(tmp_path):
    """A kernel's `writes:` land when it ends, after its ops (functional runs)."""
    np.save(tmp_path / "w.npy", np.full((4, 4), 2.0, np.float32))
    (tmp_path / "t.yaml").write_text("""\
trnsim: 1
tensors:
  x: {shape: [4, 4], dtype: float32, init: ones}
  y: {shape: [4, 4], dtype: float32}
  z: {shape: [4, 4], dtype: float32}
kernels:
  k: {ops: [{neg: {x: x, out: y}}], writes: {z: {file: w.npy}}}
  j: {ops: [{add: {a: y, b: z, out: y}}]}
""")
    r = run_program(load(tmp_path / "t.yaml"), load_chip("trn2"), "functional")
    np.testing.assert_array_equal(r.tensor("y"), np.ones((4, 4), np.float32))
    msg = error(BYTES + "kernels:\n  k:\n    instructions: []\n    writes: {m: zeros}\n")
    assert "kernels.k.writes: writes: in a low-level kernel" in msg
