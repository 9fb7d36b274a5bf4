"""What the fuzz tests of tests/e2e share: the standard, the settings, the seeds, the runner.

The fuzz tests (test_fuzz_mutations.py, test_fuzz_generated.py, test_fuzz_deadlocks.py) drive
mutated and generated traces through `trace.loads` and `session.run_program`; the regressions
they found are test_fuzz_found_*.py and test_huge_tensors.py.

The standard every example must meet: the run returns a result, or raises a `TrnsimError` whose
message is one non-empty line (a `TraceError` also starts with the file name) -- never another
exception and never a hang. Each example runs under a SIGALRM time limit (SimPy runs in this
thread, so an alarm interrupts even a run loop that never yields). Hypothesis runs derandomized
(a fixed seed, no example database), so CI sees the same examples every time.

Seeds are small valid traces (DMA between HBM tensors and tiles, matmul, activation, every
vector/gpsimd/tensor instruction, streams with copy/launch/record/wait, per_core with lnc 2).

Functional mode backs tensors with numpy arrays; the fuzzer lowers the runtime's limit on that
backing store (`runtime.MAX_BACKING_BYTES`) so a mutated shape can never take gigabytes of this
machine's memory -- the huge-tensor behaviour at the real limit is tested in a subprocess
(test_huge_tensors.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import warnings
from pathlib import Path
from unittest import mock

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from trnsim import trace
from trnsim.config import load_chip
from trnsim.errors import TraceError, TrnsimError
from trnsim.inputs.load import load_yaml
from trnsim.runtime import device as runtime
from trnsim.runtime import session

CHIPS = ("trn1", "trn2", "trn3")
MODES = ("functional", "timing")
SOURCE = "fuzz.yaml"
REPO = str(Path(__file__).resolve().parents[2])
TIME_LIMIT_S = 10.0  # per example; a typical one takes 10-50 ms
FUZZ_BACKING_BYTES = 64 << 20  # functional-mode tensor backing store while fuzzing
# TRNSIM_FUZZ_EXAMPLES=5000 TRNSIM_FUZZ_RANDOM=1 pytest tests/e2e/test_fuzz_*.py: a longer hunt
EXAMPLES = int(os.environ.get("TRNSIM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("TRNSIM_FUZZ_RANDOM"),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

# ----------------------------------------------------------------------------------------------
# seed traces (each runs cleanly on trn2 and trn3 in both modes; all but per_core on trn1 too)

SEED_GEMM = """\
trnsim: 1
name: seed-gemm
seed: 0
tensors:
  xT: {shape: [128, 128], dtype: bfloat16, init: normal}
  w:  {shape: [128, 512], dtype: bfloat16, init: normal}
  y:  {shape: [128, 512], dtype: bfloat16}
kernels:
  gemm:
    tiles:
      x_t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}
      w_t: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
      acc: {memory: psum, shape: [128, 512], dtype: float32}
      o_t: {memory: sbuf, shape: [128, 512], dtype: bfloat16}
    instructions:
      - {op: dma_copy, src: "xT[0:128, 0:128]", dst: x_t, queue: 0, signal: {ld: 1}}
      - {op: dma_copy, src: "w[0:128, 0:512]", dst: w_t, queue: 1, signal: {ld: 1}}
      - {op: matmul, stationary: x_t, moving: w_t, dst: acc, accumulate: false,
         wait: {ld: 2}, signal: {mm: 1}}
      - {op: activation, func: gelu, src: acc, dst: o_t, wait: {mm: 1}, signal: {act: 1}}
      - {op: dma_copy, src: o_t, dst: "y[0:128, 0:512]", queue: 0, wait: {act: 1}}
"""

SEED_VECTOR = """\
trnsim: 1
name: seed-vector
seed: 3
tiles:
  a:   {memory: sbuf, shape: [128, 64], dtype: float32, init: normal}
  b:   {memory: sbuf, shape: [128, 64], dtype: float32, init: random}
  c:   {memory: sbuf, shape: [128, 64], dtype: float32}
  r:   {memory: sbuf, shape: [128, 1], dtype: float32, init: ones}
  st:  {memory: sbuf, shape: [128, 6], dtype: float32}
  ag:  {memory: sbuf, shape: [128, 2], dtype: float32}
  cp:  {memory: sbuf, shape: [128, 64], dtype: bfloat16}
  m:   {memory: sbuf, shape: [128, 64], dtype: float32}
  io:  {memory: sbuf, shape: [128, 64], dtype: int32}
  sel: {memory: sbuf, shape: [128, 64], dtype: float32}
  msk: {memory: sbuf, shape: [128, 64], dtype: float32}
  tp:  {memory: psum, shape: [64, 128], dtype: float32}
  ps:  {memory: psum, shape: [64, 128], dtype: float32}
instructions:
  - {op: iota, dst: io, start: 0, step: 1, partition_step: 64, signal: {io: 1}}
  - {op: affine_select, on_true: a, dst: msk, cmp: greater_equal, start: 0, step: -1,
     partition_step: 1, signal: {io: 1}}
  - {op: tensor_tensor, alu: add, src0: a, src1: b, dst: c}
  - {op: tensor_scalar, src: c, dst: c, op0: multiply, operand0: 2.0, op1: add, operand1: r}
  - {op: tensor_reduce, alu: max, src: c, dst: r, axis: 1}
  - {op: bn_stats, src: a, dst: st}
  - {op: bn_aggr, src: st, dst: ag}
  - {op: tensor_copy, src: a, dst: cp}
  - {op: memset, dst: m, value: 1.5}
  - {op: select, predicate: b, on_true: a, on_false: 0.0, dst: sel}
  - {op: tensor_tensor, alu: multiply, src0: io, src1: msk, dst: m, wait: {io: 2}}
  - {op: transpose, src: a, dst: tp, signal: {tp: 1}}
  - {op: tensor_copy, src: tp, dst: ps, engine: scalar, wait: {tp: 1}}
  - {op: activation, func: exp, src: c, dst: sel, scale: 0.5, bias: r, reduce: add,
     reduce_dst: r}
"""

SEED_STREAMS = """\
trnsim: 1
name: seed-streams
seed: 1
mode: functional
tensors:
  host_x: {shape: [128, 256], dtype: float32, init: normal, on: host}
  x:      {shape: [128, 256], dtype: float32}
  x2:     {view: x, shape: [256, 128]}
  y:      {shape: [128, 256], dtype: bfloat16}
  host_y: {shape: [128, 256], dtype: bfloat16, on: host}
kernels:
  scale:
    tiles:
      t: {memory: sbuf, shape: [128, 256], dtype: float32}
      u: {memory: sbuf, shape: [128, 256], dtype: bfloat16}
    instructions:
      - {op: dma_copy, src: x, dst: t, signal: {ld: 1}}
      - {op: tensor_scalar, src: t, dst: u, op0: multiply, operand0: 3.0, wait: {ld: 1},
         signal: {done: 1}}
      - {op: dma_copy, src: u, dst: y, queue: 2, wait: {done: 1}}
  squash:
    tiles:
      v: {memory: sbuf, shape: [128, 256], dtype: float32, init: random}
    instructions:
      - {op: activation, func: tanh, src: v, dst: v}
streams:
  - name: main
    core: 0
    do:
      - record: start
      - copy: {src: host_x, dst: x}
      - launch: scale
      - record: scaled
  - name: side
    core: 1
    do:
      - wait: scaled
      - launch: squash
      - copy: {src: y, dst: host_y}
      - record: side_done
      - synchronize
timing:
  - {from: start, to: scaled}
  - {from: start, to: side_done}
"""

SEED_PER_CORE = """\
trnsim: 1
name: seed-per-core
lnc: 2
seed: 2
tensors:
  x: {shape: [256, 128], dtype: bfloat16, init: arange}
  y: {shape: [256, 128], dtype: bfloat16}
kernels:
  halves:
    tiles:
      t: {memory: sbuf, shape: [128, 128], dtype: bfloat16}
    per_core:
      - - {op: dma_copy, src: "x[0:128, :]", dst: t, queue: 0, signal: {ld: 1}}
        - {op: tensor_scalar, src: t, dst: t, op0: add, operand0: 1.0, wait: {ld: 1},
           signal: {ok: 1}}
        - {op: dma_copy, src: t, dst: "y[0:128, :]", queue: 0, wait: {ok: 1}}
      - tiles:
          s: {memory: sbuf, shape: [128, 128], dtype: float32}
        instructions:
          - {op: dma_copy, src: "x[128:256, :]", dst: t, queue: 3, signal: {ld: 1}}
          - {op: tensor_copy, src: t, dst: s, wait: {ld: 1}, signal: {ok: 1}}
          - {op: dma_copy, src: s, dst: "y[128:256, :]", queue: 5, wait: {ok: 1}}
streams:
  - name: s
    core: 0
    do:
      - launch: halves
      - synchronize
"""

SEED_SOFTMAX = """\
trnsim: 1
name: seed-softmax
seed: 1
tiles:
  x:     {memory: sbuf, shape: [128, 512], dtype: float32, init: normal}
  m:     {memory: sbuf, shape: [128, 1], dtype: float32}
  neg_m: {memory: sbuf, shape: [128, 1], dtype: float32}
  e:     {memory: sbuf, shape: [128, 512], dtype: float32}
  s:     {memory: sbuf, shape: [128, 1], dtype: float32}
  r:     {memory: sbuf, shape: [128, 1], dtype: float32}
  y:     {memory: sbuf, shape: [128, 512], dtype: float32}
instructions:
  - {op: tensor_reduce, alu: max, src: x, dst: m}
  - {op: tensor_scalar, src: m, dst: neg_m, op0: multiply, operand0: -1.0, signal: {red: 1}}
  - {op: activation, func: exp, src: x, dst: e, bias: neg_m, reduce: add, reduce_dst: s,
     wait: {red: 1}, signal: {ex: 1}}
  - {op: tensor_scalar, src: s, dst: r, op0: divide, operand0: 1.0, reverse0: true,
     wait: {ex: 1}}
  - {op: tensor_scalar, src: e, dst: y, op0: multiply, operand0: r}
"""

SEEDS = {
    "gemm": SEED_GEMM,
    "vector": SEED_VECTOR,
    "streams": SEED_STREAMS,
    "per_core": SEED_PER_CORE,
    "softmax": SEED_SOFTMAX,
}


def plain(x):
    """trnsim's YAML reading (YAML 1.2 booleans: `on:` is a key) as plain dicts and lists."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return [plain(v) for v in x] if isinstance(x, list) else x


SEED_DOCS = {name: plain(load_yaml(text)) for name, text in SEEDS.items()}

# ----------------------------------------------------------------------------------------------
# running one example


class Hang(Exception):
    """An example ran past its time limit (not a TrnsimError, so it fails the test)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def on_alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@functools.cache
def chip(name: str):
    return load_chip(name)


def check_message(e: TrnsimError) -> str:
    msg = str(e)
    assert msg.strip(), f"{type(e).__name__} with an empty message"
    assert "\n" not in msg and "\r" not in msg, f"{type(e).__name__} is not one line: {msg!r}"
    if isinstance(e, TraceError):
        assert msg.startswith(f"{SOURCE}:"), f"TraceError does not name the file: {msg!r}"
    return msg


def run_trace(text: str, chip_name: str = "trn2", mode: str = "functional"):
    """Load and run `text`: the RunResult, or the TrnsimError raised (its message checked).
    Any other exception (a numpy RuntimeWarning is one here), or a run past the time limit
    (Hang), propagates."""
    with (
        mock.patch.object(runtime, "MAX_BACKING_BYTES", FUZZ_BACKING_BYTES),
        time_limit(TIME_LIMIT_S),
        warnings.catch_warnings(),
    ):
        # numpy's floating-point RuntimeWarnings ("invalid value encountered in matmul") would
        # print stray lines under `trnsim run`: inf and NaN are values here, not warnings
        warnings.simplefilter("error", RuntimeWarning)
        try:
            prog = trace.loads(text, source=SOURCE)
            return session.run_program(prog, chip(chip_name), mode)
        except TrnsimError as e:
            check_message(e)
            return e


def dump(doc) -> str:
    return yaml.safe_dump(
        doc, sort_keys=False, default_flow_style=None, width=10_000, allow_unicode=True
    )


def assert_survives(example):
    """(trace text, chip, mode) runs or fails cleanly (run_trace checks the error)."""
    text, chip_name, mode = example
    run_trace(text, chip_name, mode)


# ----------------------------------------------------------------------------------------------
# drawing

INF, NAN = float("inf"), float("nan")
HUGE_INT = 10**400  # larger than any float
HUGE_IMMEDIATE = "1" + "0" * 400  # an integer no float can hold: YAML reads it as a Python int


def pick(draw, seq):
    seq = list(seq)
    return seq[draw(st.integers(0, len(seq) - 1))] if seq else None
