"""Huge tensors: clean errors (functional mode refuses what this machine cannot hold, timing
mode checks against HBM), no machine-sized temporaries, shapes beyond float range."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.e2e.fuzzing import HUGE_IMMEDIATE, MODES, REPO, run_trace
from trnsim.errors import TrnsimError
from trnsim.runtime import session

# ----------------------------------------------------------------------------------------------
# huge tensors in functional mode: clean errors, and no machine-sized temporaries

BIG_PROBE = """\
import json, resource, sys
from trnsim import trace
from trnsim.runtime import session
from trnsim.config import load_chip
from trnsim.errors import TrnsimError
base = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (base + {headroom}, resource.RLIM_INFINITY))
for tensors in json.loads(sys.argv[1]):
    text = "trnsim: 1\\ntensors:\\n" + "".join(
        f"  {{name}}: {{{{shape: {{shape}}, dtype: {{dtype}}, init: {{init}}}}}}\\n"
        for name, shape, dtype, init in tensors) + "instructions: []\\n"
    try:
        session.run_program(trace.loads(text), load_chip("trn2"), "functional")
        print("ok")
    except TrnsimError as e:
        print("TrnsimError:", e)
"""


def probe_big(traces: list[list[tuple]], headroom: int) -> list[str]:
    """Run functional traces of (name, shape, dtype, init) tensors in one child process whose
    address space is capped at what it has after importing trnsim plus `headroom` bytes: a
    runaway allocation fails there (MemoryError, a traceback) instead of exhausting this
    machine. One output line per trace: `ok` or `TrnsimError: <message>`."""
    proc = subprocess.run(
        [sys.executable, "-c", BIG_PROBE.format(headroom=headroom), json.dumps(traces)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_huge_tensor_in_functional_mode_is_a_clean_error():
    """The known risk: a 20 GiB `normal` tensor fits trn2's HBM (24 GiB stacks) but not this
    machine's RAM; functional mode must refuse it up front, not allocate (or OOM) its way."""
    outs = probe_big(
        [
            [("x", [5 * 2**30], "float32", "normal")],  # 20 GiB: fits HBM only
            [("x", [10**6, 10**6], "float32", "zeros")],  # 3.6 TiB: fits neither
            [("x", [10**30], "int8", "arange")],  # beyond what numpy can describe
            [
                ("x", [2**30], "float32", "zeros"),  # 4 + 4 + 4 GiB: each fits the
                ("y", [2**30], "float32", "zeros"),  # 8 GiB limit, not all three
                ("z", [2**30], "float32", "random"),
            ],
        ],
        headroom=12 << 30,
    )
    assert len(outs) == 4
    for out in outs:
        assert out.startswith("TrnsimError:") and "--mode timing" in out, out
    assert re.match(r"TrnsimError: <string>:\d+: tensors\.z: tensor z:", outs[3]), outs[3]


def test_huge_tensor_in_timing_mode_is_only_checked_against_hbm():
    text = (
        "trnsim: 1\ntensors:\n  x: {shape: [5368709120], dtype: float32, init: normal}\n"
        "instructions: []\n"
    )
    assert isinstance(run_trace(text, "trn2", "timing"), session.RunResult)  # 20 GiB fits
    err = run_trace(text.replace("5368709120", "1000000000000"), "trn2", "timing")
    assert "cannot allocate x" in str(err)


def test_init_temporaries_do_not_multiply_a_tensors_memory():
    """Regression (memory/init.py): `arange` built the whole tensor in float64 and `random` /
    `normal` in float32 before the cast, so a 1 GiB int8 tensor -- well under the 8 GiB
    functional-mode limit -- needed 8 GiB more (MemoryError; a 7 GiB bf16 `normal` tensor
    needed 14 GiB more, enough to get this 23 GiB machine OOM-killed). Values are now made in
    chunks: two 32 MiB tensors fit in 160 MiB on top of the interpreter (they needed 320 MiB
    and 192 MiB)."""
    assert probe_big(
        [[("x", [32, 2**20], "int8", "arange"), ("y", [32, 2**20], "float8_e4m3", "random")]],
        160 << 20,
    ) == ["ok"]


# ----------------------------------------------------------------------------------------------
# shapes beyond float range


@pytest.mark.parametrize("mode", MODES)
def test_shape_beyond_float_range_is_a_clean_error(mode):
    """Regression (units.py; fuzzer): a shape of 10**400 elements made fmt_bytes raise
    OverflowError ('integer division result too large for a float') while formatting the very
    error that rejects it (HBM allocation in timing mode, the backing limit in functional)."""
    text = (
        f"trnsim: 1\ntensors:\n  x: {{shape: [{HUGE_IMMEDIATE}, 128], dtype: bfloat16}}\n"
        f"instructions: []\n"
    )
    err = run_trace(text, "trn1", mode)
    assert isinstance(err, TrnsimError) and "e+3" in str(err), err
