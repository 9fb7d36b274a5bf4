"""Fuzz the whole pipeline: mutated traces through `trace.loads` and `session.run_program`.

The standard every example must meet: the run returns a result, or raises a `TrnsimError` whose
message is one non-empty line (a `TraceError` also starts with the file name) -- never another
exception and never a hang. Each example runs under a SIGALRM time limit (SimPy runs in this
thread, so an alarm interrupts even a run loop that never yields).

Seeds are small valid traces (DMA between HBM tensors and tiles, matmul, activation, every
vector/gpsimd/tensor instruction, streams with copy/launch/record/wait, per_core with lnc 2).
Mutations: junk values, missing and unknown keys, bad and out-of-bounds slices, unknown ops,
swapped operands, wrong memories and dtypes, mismatched and huge shapes, zero/negative/huge
numbers, queue ids out of range, semaphore cycles between engines and event cycles between
streams. Hypothesis runs derandomized (a fixed seed, no example database), so CI sees the same
examples every time.

Functional mode backs tensors with numpy arrays; the fuzzer lowers the runtime's limit on that
backing store (`runtime.MAX_BACKING_BYTES`) so a mutated shape can never take gigabytes of this
machine's memory -- the huge-tensor behaviour at the real limit is tested in a subprocess.

Bugs the fuzzer found have explicit regression tests at the end (names with line breaks,
integers of more than 4300 digits, lone surrogates in the text, sliced copy steps, ...).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnsim import trace
from trnsim.config import load_chip
from trnsim.dtypes import DTYPES
from trnsim.errors import DeadlockError, TraceError, TrnsimError
from trnsim.inputs.load import load_yaml
from trnsim.isa import INSTRUCTIONS
from trnsim.runtime import device as runtime
from trnsim.runtime import session

CHIPS = ("trn1", "trn2", "trn3")
MODES = ("functional", "timing")
SOURCE = "fuzz.yaml"
REPO = str(Path(__file__).resolve().parents[2])
TIME_LIMIT_S = 10.0  # per example; a typical one takes 10-50 ms
FUZZ_BACKING_BYTES = 64 << 20  # functional-mode tensor backing store while fuzzing
# TRNSIM_FUZZ_EXAMPLES=5000 TRNSIM_FUZZ_RANDOM=1 pytest tests/e2e/test_fuzz_run.py: a longer hunt
EXAMPLES = int(os.environ.get("TRNSIM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize=not os.environ.get("TRNSIM_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

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

SEEDS = {"gemm": SEED_GEMM, "vector": SEED_VECTOR, "streams": SEED_STREAMS,
         "per_core": SEED_PER_CORE, "softmax": SEED_SOFTMAX}


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
    with mock.patch.object(runtime, "MAX_BACKING_BYTES", FUZZ_BACKING_BYTES), \
            time_limit(TIME_LIMIT_S), warnings.catch_warnings():
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
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=10_000,
                          allow_unicode=True)


@pytest.mark.parametrize("name", list(SEEDS))
@pytest.mark.parametrize("chip_name", CHIPS)
def test_seeds_run_clean(name, chip_name):
    """The seeds are valid: both modes run them, and give the same simulated time."""
    results = [run_trace(SEEDS[name], chip_name, mode) for mode in MODES]
    if name == "per_core" and chip_name == "trn1":  # trn1 has no lnc 2
        assert all("lnc 2 is not supported" in str(r) for r in results)
        return
    assert all(isinstance(r, session.RunResult) for r in results), results
    assert results[0].total_ps == results[1].total_ps > 0
    # the dumped form (what mutations produce) is as valid as the hand-written one
    again = run_trace(dump(SEED_DOCS[name]), chip_name, "timing")
    assert again.total_ps == results[1].total_ps


# ----------------------------------------------------------------------------------------------
# walking a trace document (robust to earlier mutations: everything is type-checked)

OPERANDS = ("src", "dst", "src0", "src1", "stationary", "moving", "predicate", "on_true",
            "on_false", "reduce_dst", "scale", "bias", "operand0", "operand1")
NUMERIC = ("value", "start", "step", "partition_step", "scale", "bias", "operand0", "operand1",
           "on_false", "queue", "axis")


def _dicts(x):
    return x if isinstance(x, dict) else {}


def instr_lists(doc) -> list[list]:
    lists = []
    if isinstance(doc.get("instructions"), list):
        lists.append(doc["instructions"])
    for k in _dicts(doc.get("kernels")).values():
        if not isinstance(k, dict):
            continue
        if isinstance(k.get("instructions"), list):
            lists.append(k["instructions"])
        for core in k.get("per_core") if isinstance(k.get("per_core"), list) else ():
            if isinstance(core, list):
                lists.append(core)
            elif isinstance(core, dict) and isinstance(core.get("instructions"), list):
                lists.append(core["instructions"])
    return lists


def instructions(doc) -> list[dict]:
    return [i for lst in instr_lists(doc) for i in lst if isinstance(i, dict)]


def tile_maps(doc) -> list[dict]:
    maps = [doc["tiles"]] if isinstance(doc.get("tiles"), dict) else []
    for k in _dicts(doc.get("kernels")).values():
        if isinstance(k, dict) and isinstance(k.get("tiles"), dict):
            maps.append(k["tiles"])
        for core in k.get("per_core", ()) if isinstance(k, dict) and isinstance(
                k.get("per_core"), list) else ():
            if isinstance(core, dict) and isinstance(core.get("tiles"), dict):
                maps.append(core["tiles"])
    return maps


def buffers(doc) -> list[tuple[str, dict]]:
    """(name, entry) of every tile and tensor whose entry is a mapping."""
    out = [(n, e) for n, e in _dicts(doc.get("tensors")).items() if isinstance(e, dict)]
    for m in tile_maps(doc):
        out += [(n, e) for n, e in m.items() if isinstance(e, dict)]
    return out


def names(doc) -> list[str]:
    return [n for n, _ in buffers(doc) if isinstance(n, str)]


def streams(doc) -> list[dict]:
    s = doc.get("streams")
    return [x for x in s if isinstance(x, dict)] if isinstance(s, list) else []


def nodes(doc) -> list[tuple]:
    """Every (container, key-or-index) in the document, parents before children."""
    out = []

    def walk(x):
        items = list(x.items()) if isinstance(x, dict) else (
            list(enumerate(x)) if isinstance(x, list) else [])
        for k, v in items:
            out.append((x, k))
            walk(v)

    walk(doc)
    return out


# ----------------------------------------------------------------------------------------------
# value pools

INF, NAN = float("inf"), float("nan")
HUGE_INT = 10 ** 400  # larger than any float
NUMBERS = [0, -1, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 127, 128, 129, 255, 256, 257, 2 ** 31,
           2 ** 53 + 1, 10 ** 12, HUGE_INT, -HUGE_INT, 0.5, -2.5, 1e-45, 1e308, -1e308, INF,
           -INF, NAN, True, False]
DIMS = [0, -1, 1, 2, 3, 6, 32, 33, 63, 64, 65, 127, 128, 129, 511, 512, 513, 4096, 4097,
        65536, 65537, 10 ** 6, 10 ** 9, 10 ** 12, 10 ** 30, 1.5, "8", None]
JUNK = [None, 0, -1, 1, 3, 129, 2 ** 31, 10 ** 12, HUGE_INT, 0.5, -0.0, 1e308, INF, -INF, NAN,
        True, False, "", " ", "x", "bogus", "sbuf", "psum", "hbm", "host", "a\nb", "x[0:1]",
        "\u00e9\u4e2d", [], [1], [-1, 0], [[1]], {}, {"a": 1}, {"file": "missing.npy"}]
BAD_NAMES = ["", " ", "nope", "x y", "a\nb", "1abc", "x[", "\t", "名前", "sbuf"]
SLICE_INTS = [None, None, 0, 1, -1, 2, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256, 512, 513,
              -128, -129, 10 ** 12, -(10 ** 12)]
STEPS = [None, None, 1, 1, 2, 3, 0, -1, 10 ** 12]
BAD_SLICES = ["{n}[", "{n}[]", "{n}[,]", "{n}[1:2:3:4]", "{n}[a:b]", "{n}[1.5]", "[0:1]",
              "{n}[0:1]]", "{n}[[0]]", "{n} [ 0 : 1 ]", "{n}[0:1][0:1]", "{n}[::]", "{n}[-0:]",
              "{n}[99999999999999999999999:]", "{n}[:, :, :, :, :]", "{n}[0, 0, 0]"]
DTYPE_NAMES = [*DTYPES, "bf16", "fp8", "float64", "int64", "complex64", "bool", "", "BFLOAT16",
               None, 16]
OPS = [*INSTRUCTIONS, "conv2d", "", "MATMUL", "nop", None, 3]
ENGINES = ["tensor", "vector", "scalar", "gpsimd", "dma", "pool", "act", "", None, 0]
INITS = ["zeros", "ones", "random", "normal", "arange", "uniform", {"file": "missing.npy"},
         {"file": ""}, {"fil": "x.npy"}, 0, []]
QUEUES = [-2, -1, 0, 1, 2, 15, 16, 17, 63, 2 ** 31, 10 ** 12, HUGE_INT, "1", 1.5, None, True]
CORES = [-1, 0, 1, 2, 3, 4, 7, 8, 16, 10 ** 12, "0", None]
SEMS = ["ld", "mm", "act", "ok", "done", "red", "ex", "io", "tp", "s0", "new"]
SEM_VALUES = [-1, 0, 1, 1, 2, 3, 10 ** 12, HUGE_INT, "1", 1.5, None, True]

# ----------------------------------------------------------------------------------------------
# mutations: each takes (draw, doc) and changes doc in place (or does nothing when the document
# no longer has what it needs)


def pick(draw, seq):
    seq = list(seq)
    return seq[draw(st.integers(0, len(seq) - 1))] if seq else None


def m_junk(draw, doc):
    where = pick(draw, nodes(doc))
    if where:
        value = pick(draw, JUNK)
        where[0][where[1]] = copy.deepcopy(value)


def m_delete(draw, doc):
    where = pick(draw, [(c, k) for c, k in nodes(doc)] + [(doc, k) for k in doc])
    if where:
        del where[0][where[1]]


def m_unknown_key(draw, doc):
    dicts = [doc] + [c[k] for c, k in nodes(doc) if isinstance(c[k], dict)]
    d = pick(draw, dicts)
    d[pick(draw, ["bogus", "Op", "shape ", "tile", "instruction", "kernel", "stream"])] = 1


def m_op(draw, doc):
    ins = pick(draw, instructions(doc))
    if ins is not None:
        ins["op"] = pick(draw, OPS)


def m_operand_slice(draw, doc):
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    f = pick(draw, fields)
    if f is None:
        return
    name = ins[f].split("[")[0] if isinstance(ins[f], str) else (pick(draw, names(doc)) or "x")
    if draw(st.booleans()):
        ins[f] = pick(draw, BAD_SLICES).format(n=name)
        return
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 4)) == 0:
            parts.append(str(pick(draw, SLICE_INTS[2:])))
            continue
        a, b, s = (pick(draw, SLICE_INTS), pick(draw, SLICE_INTS), pick(draw, STEPS))
        text = f"{'' if a is None else a}:{'' if b is None else b}"
        parts.append(text + (f":{s}" if s is not None else ""))
    ins[f] = f"{name}[{', '.join(parts)}]"


def m_operand_rename(draw, doc):
    """Point an operand at another tile or tensor (PSUM for SBUF, HBM for a tile, ...)."""
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    f = pick(draw, fields)
    if f is not None:
        ins[f] = pick(draw, names(doc) + BAD_NAMES[:3] + [1.0, None])


def m_operand_swap(draw, doc):
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    if len(fields) >= 2:
        a, b = pick(draw, fields), pick(draw, fields)
        ins[a], ins[b] = ins[b], ins[a]


def _value_for(draw, meta: dict):
    """A value for an instruction field of this kind: mostly plausible, sometimes junk."""
    kind = meta["kind"]
    if draw(st.integers(0, 7)) == 0:
        return copy.deepcopy(pick(draw, JUNK))
    if kind == "choice":
        return pick(draw, [*meta["choices"], *meta["choices"], "bogus", None])
    if kind == "bool":
        return pick(draw, [True, False, True, False, 1, "yes"])
    if kind == "int":
        return pick(draw, QUEUES)
    if kind == "axes":
        return pick(draw, [0, 1, 2, -1, -3, 10 ** 12, [1], [1, 1], [], [1, 2], [2, 1], "1"])
    return pick(draw, NUMBERS)


def _operand(draw, doc):
    """A buffer name, sometimes sliced, sometimes unknown."""
    name = pick(draw, names(doc)) or "x"
    how = draw(st.integers(0, 9))
    if how == 0:
        return pick(draw, BAD_NAMES[:4])
    if how <= 2:
        a, b = pick(draw, SLICE_INTS), pick(draw, SLICE_INTS)
        rest = ", " + pick(draw, [":", "0:1", "1:", "::2", "0"]) if draw(st.booleans()) else ""
        return f"{name}[{'' if a is None else a}:{'' if b is None else b}{rest}]"
    return name


def m_field(draw, doc):
    """Set or add one of an instruction's own fields (or, now and then, a foreign one)."""
    ins = pick(draw, instructions(doc))
    if ins is None:
        return
    cls = INSTRUCTIONS.get(ins.get("op")) if isinstance(ins.get("op"), str) else None
    fields = {f.name: f.metadata for f in cls.op_fields()} if cls else {}
    if fields and draw(st.integers(0, 9)):
        key = pick(draw, sorted(fields))
        meta = fields[key]
        if meta["kind"] == "ap" or (meta["kind"] == "ap_or_num" and draw(st.booleans())):
            ins[key] = _operand(draw, doc)
        else:
            ins[key] = _value_for(draw, meta)
    elif draw(st.booleans()):
        ins["engine"] = pick(draw, ENGINES)
    else:
        ins[pick(draw, [*NUMERIC, "alu", "func", "accumulate", "transpose"])] = pick(draw, NUMBERS)


def m_new_instruction(draw, doc):
    """Insert (or put in place of another) a new instruction of any op, its fields filled with
    the trace's buffers (mismatched shapes, memories and dtypes) and plausible values."""
    lst = pick(draw, instr_lists(doc))
    if lst is None:
        return
    cls = INSTRUCTIONS[pick(draw, sorted(INSTRUCTIONS))]
    ins = {"op": cls.OP}
    for f in cls.op_fields():
        if not f.metadata["required"] and draw(st.integers(0, 2)):
            continue
        if f.metadata["kind"] == "ap" or (f.metadata["kind"] == "ap_or_num"
                                          and draw(st.booleans())):
            ins[f.name] = _operand(draw, doc)
        else:
            ins[f.name] = _value_for(draw, f.metadata)
    if cls.ENGINES and draw(st.booleans()):
        ins["engine"] = pick(draw, [e.label for e in (cls.ENGINE, *cls.ENGINES)])
    if draw(st.integers(0, 3)) == 0:
        ins["signal"] = {pick(draw, SEMS): 1}
    at = draw(st.integers(0, len(lst)))
    if lst and at < len(lst) and draw(st.booleans()):
        lst[at] = ins
    else:
        lst.insert(at, ins)


def m_dtype(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is not None:
        entry["dtype"] = pick(draw, DTYPE_NAMES)


def m_memory(draw, doc):
    """sbuf <-> psum for tiles, hbm <-> host for tensors, or a bad memory."""
    tiles = [e for m in tile_maps(doc) for e in m.values() if isinstance(e, dict)]
    tensors = [e for e in _dicts(doc.get("tensors")).values() if isinstance(e, dict)]
    if draw(st.booleans()) and tiles:
        pick(draw, tiles)["memory"] = pick(draw, ["sbuf", "psum", "hbm", "SBUF", None])
    elif tensors:
        pick(draw, tensors)["on"] = pick(draw, ["hbm", "host", "sbuf", None])


def m_shape(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is None:
        return
    shape = entry.get("shape")
    shape = list(shape) if isinstance(shape, list) else [128]
    how = draw(st.integers(0, 4))
    if how == 0 and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = pick(draw, DIMS)
    elif how == 1:
        shape.insert(draw(st.integers(0, len(shape))), pick(draw, DIMS))
    elif how == 2 and shape:
        shape.pop(draw(st.integers(0, len(shape) - 1)))
    elif how == 3:
        shape = pick(draw, [[], [10 ** 12], [128, 10 ** 9], [10 ** 6, 10 ** 6],
                            [1, 1, 1, 1, 1, 1, 1, 1], [128, 1], [129, 4], "128", 128])
    else:
        shape = [pick(draw, DIMS) for _ in range(draw(st.integers(1, 3)))]
    entry["shape"] = shape


def m_init(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is not None:
        entry["init"] = copy.deepcopy(pick(draw, INITS))


def m_view(draw, doc):
    """Make a tensor a view of another (or of itself, or of a tile)."""
    tensors = _dicts(doc.get("tensors"))
    entry = pick(draw, [e for e in tensors.values() if isinstance(e, dict)])
    if entry is not None:
        entry["view"] = pick(draw, names(doc) + ["nope", None])
        if draw(st.booleans()):
            entry.pop("init", None)
        if draw(st.booleans()):
            entry.pop("dtype", None)


def m_sem(draw, doc):
    """Add or change a wait/signal with any semaphore name and value."""
    ins = pick(draw, instructions(doc))
    if ins is None:
        return
    key = pick(draw, ["wait", "signal"])
    sems = ins.get(key) if isinstance(ins.get(key), dict) else {}
    sems[pick(draw, SEMS + BAD_NAMES[:2])] = pick(draw, SEM_VALUES)
    ins[key] = sems if draw(st.integers(0, 9)) else pick(draw, [[], "ld", 1])


def m_sem_cycle(draw, doc):
    """Two instructions of one core that wait for each other (a deadlock unless an error comes
    first); on one engine queue or across engines."""
    lst = pick(draw, [x for x in instr_lists(doc) if sum(isinstance(i, dict) for i in x) >= 2])
    if lst is None:
        return
    dicts = [i for i in lst if isinstance(i, dict)]
    a, b = pick(draw, dicts), pick(draw, dicts)
    if a is b:
        return
    for ins, w, s in ((a, "cyc_a", "cyc_b"), (b, "cyc_b", "cyc_a")):
        ins["wait"] = {**_dicts(ins.get("wait")), w: 1}
        ins["signal"] = {**_dicts(ins.get("signal")), s: 1}


def m_stream(draw, doc):
    """Change the host schedule: cores, new steps, event cycles, bad steps."""
    ss = streams(doc)
    if not ss:
        kernels = list(_dicts(doc.get("kernels"))) or ["main"]
        doc["streams"] = [{"name": "s", "core": 0, "do": [{"launch": pick(draw, kernels)}]}]
        ss = doc["streams"]
    s = pick(draw, ss)
    how = draw(st.integers(0, 5))
    do = s["do"] if isinstance(s.get("do"), list) else []
    s["do"] = do
    if how == 0:
        s["core"] = pick(draw, CORES)
    elif how == 1:  # an event cycle between two streams
        other = {"name": f"other{len(ss)}", "core": pick(draw, [0, 1, 2]),
                 "do": [{"wait": "ev_a"}, {"record": "ev_b"}]}
        do.insert(draw(st.integers(0, len(do))), {"wait": "ev_b"})
        do.insert(draw(st.integers(0, len(do))), {"record": "ev_a"})
        doc["streams"].append(other)
    elif how == 2:  # a stream that waits for an event it records later
        do.insert(0, {"wait": "late"})
        do.append({"record": "late"})
    elif how == 3:
        tensors = list(_dicts(doc.get("tensors"))) + ["nope"]
        do.insert(draw(st.integers(0, len(do))), {"copy": {
            "src": pick(draw, tensors), "dst": pick(draw, tensors)}})
    elif how == 4:
        kernels = list(_dicts(doc.get("kernels"))) + ["main", "nope"]
        do.insert(draw(st.integers(0, len(do))), {"launch": pick(draw, kernels)})
    else:
        do.insert(draw(st.integers(0, len(do))), pick(draw, [
            "synchronize", {"synchronize": None}, {"record": None}, {"wait": "never"},
            {"launch": None}, {"copy": None}, {"bogus": 1}, {"record": "a", "wait": "b"}, 3]))


def m_top(draw, doc):
    """Top-level numbers and choices: lnc, seed, mode, chip, trnsim, per_core lengths."""
    key = pick(draw, ["lnc", "seed", "mode", "chip", "trnsim", "name", "outputs", "timing",
                      "per_core"])
    if key == "lnc":
        doc[key] = pick(draw, [0, 1, 2, 3, -1, None, "2"])
    elif key == "seed":
        doc[key] = pick(draw, [0, -1, 2 ** 64, HUGE_INT, 1.5, None])
    elif key == "mode":
        doc[key] = pick(draw, ["functional", "timing", "fast", None])
    elif key == "chip":
        doc[key] = pick(draw, ["trn1", "trn9", None])
    elif key == "trnsim":
        doc[key] = pick(draw, [1, 2, 0, "1", None])
    elif key == "name":
        doc[key] = pick(draw, JUNK)
    elif key == "outputs":
        doc[key] = pick(draw, [names(doc)[:1], ["nope"], "x", [], None])
    elif key == "timing":
        doc[key] = pick(draw, [[{"from": "start", "to": "nope"}], [{"from": 1}], [], "x"])
    else:
        for k in _dicts(doc.get("kernels")).values():
            pc = k.get("per_core") if isinstance(k, dict) else None
            if isinstance(pc, list) and pc:
                how = draw(st.integers(0, 2))
                if how == 0:
                    pc.append(copy.deepcopy(pc[-1]))
                elif how == 1:
                    pc.pop()
                else:
                    pc.insert(0, [])


GENERAL = [m_junk, m_delete, m_unknown_key, m_op, m_field, m_dtype, m_shape, m_init, m_top,
           m_new_instruction]
OPERAND = [m_operand_slice, m_operand_rename, m_operand_swap, m_memory, m_dtype, m_shape,
           m_field, m_view, m_new_instruction, m_new_instruction]
SYNC = [m_sem, m_sem_cycle, m_stream, m_field, m_top]
HUGE = [m_shape, m_shape, m_init, m_memory, m_view, m_operand_slice]


@st.composite
def mutated(draw, mutations, max_mutations=3):
    """(trace text, chip, mode): a seed with 1..max_mutations mutations applied."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    doc = copy.deepcopy(SEED_DOCS[name])
    for _ in range(draw(st.integers(1, max_mutations))):
        draw(st.sampled_from(mutations))(draw, doc)
    chips = CHIPS[1:] if name == "per_core" and draw(st.integers(0, 7)) else CHIPS  # lnc 2
    return dump(doc), draw(st.sampled_from(chips)), draw(st.sampled_from(MODES))


def assert_survives(example):
    text, chip_name, mode = example
    run_trace(text, chip_name, mode)


@FUZZ
@given(mutated(GENERAL))
def test_fuzz_structure(example):
    """Junk values, missing and unknown keys, unknown ops, bad fields, dtypes, shapes, inits."""
    assert_survives(example)


@FUZZ
@given(mutated(OPERAND))
def test_fuzz_operands(example):
    """Bad and out-of-bounds slices, swapped and renamed operands (PSUM where SBUF is needed,
    HBM tensors as engine operands, ...), wrong memories, dtypes and shapes, views."""
    assert_survives(example)


@FUZZ
@given(mutated(SYNC))
def test_fuzz_sync(example):
    """Semaphore waits/signals, cycles between engines, stream schedules with event cycles,
    queues and cores out of range, lnc and per_core mismatches."""
    assert_survives(example)


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 3))
@given(mutated(HUGE, max_mutations=2))
def test_fuzz_huge_and_degenerate_shapes(example):
    """Shapes of 0, -1, 10**12 elements, [128, 10**9] tiles, 8-dim tensors, ..."""
    assert_survives(example)


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 3))
@given(name=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_fuzz_text(name, data):
    """Character-level damage to the YAML text itself (the loader must name the line)."""
    text = SEEDS[name]
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        how = data.draw(st.integers(0, 3))
        if how == 0:
            text = text[:i] + text[i + data.draw(st.integers(1, 8)):]
        elif how == 1:
            text = text[:i] + data.draw(st.sampled_from(
                list(":-[]{},&*!|>'\"%@`#\t\n ") + ["\x00", "\ufeff", "\u2028", "1e999",
                                                     "!!python/object:os.system"])) + text[i:]
        elif how == 2 and text:
            lines = text.splitlines(keepends=True)
            j = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(j, lines[data.draw(st.integers(0, len(lines) - 1))])
            text = "".join(lines)
        else:
            text = text[:i]
    run_trace(text, data.draw(st.sampled_from(CHIPS)), data.draw(st.sampled_from(MODES)))


# ----------------------------------------------------------------------------------------------
# generated kernels: every op on random (mostly compatible) tiles of every dtype, with in-bounds
# slices, so that more examples get past the checks and into the engines' and DMA's numerics

GEN_FREE = [[1], [2], [6], [64], [512], [2, 3], [4, 2, 8], [2, 64], [3], [2, 512]]
GEN_NUMBERS = [0, 1, -1, 0.5, 2, 3, 1e-3, 100, -7, 2.5, 65504, 1e38, INF, -INF, NAN, HUGE_INT,
               -HUGE_INT, 2 ** 31, 2 ** 53, True]


PREFER = {  # (op, field) -> the generated buffers that fit it (shape and memory)
    ("dma_copy", "src"): ["h0", "h1", "h2", "a0", "a1"],
    ("dma_copy", "dst"): ["a0", "a1", "a2", "h0", "h1"],
    ("matmul", "stationary"): ["ws"], ("matmul", "moving"): ["a0", "a1", "a2"],
    ("matmul", "dst"): ["p0"], ("transpose", "src"): ["a0", "a1", "a2"],
    ("transpose", "dst"): ["tp"], ("bn_stats", "dst"): ["st6"], ("bn_aggr", "src"): ["st6"],
    ("bn_aggr", "dst"): ["ag2"], ("select", "on_false"): ["col", "a1"],
    ("tensor_reduce", "dst"): ["rd", "col"],
    **{(op, f): ["col"] for op in ("activation", "tensor_scalar")
       for f in ("scale", "bias", "reduce_dst", "operand0", "operand1")},
}
GPSIMD_OPS = ("iota", "affine_select")


def _gen_operand(draw, buffers_: dict, op: str, fld: str, engine: str | None) -> str:
    """A buffer that usually fits the field, sometimes with an in-bounds slice."""
    default = ["a0", "a1", "a2"] if op in GPSIMD_OPS or engine == "gpsimd" else [
        "a0", "a1", "a2", "p0"]
    name = pick(draw, PREFER.get((op, fld), default) if draw(st.integers(0, 9))
                else sorted(buffers_))
    shape = buffers_[name]["shape"]
    if draw(st.integers(0, 3)):
        return name
    parts = []
    for d, n in enumerate(shape[:draw(st.integers(1, len(shape)))]):
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
        return {"memory": memory, "shape": shape, "dtype": dtype or dt(),
                "init": pick(draw, ["normal", "random", "arange", "ones", "zeros"])}

    tiles = {f"a{i}": tile("sbuf", [p, *free]) for i in range(3)}
    tiles.update(p0=tile("psum", [p, *free], pick(draw, ["float32", "float32", "bfloat16"])),
                 col=tile("sbuf", [p, 1]), st6=tile(pick(draw, ["sbuf", "psum"]), [p, 6]),
                 ag2=tile("sbuf", [p, 2]), ws=tile("sbuf", [p, p]),
                 rd=tile(pick(draw, ["sbuf", "psum"]), [p, *(free[:-1] or [1])]),
                 tp=tile("psum", [min(n, 128), p], pick(draw, ["float32", tiles["a0"]["dtype"]])))
    tensors = {"h0": {"shape": [p, *free], "dtype": dt(), "init": "normal"},
               "h1": {"shape": [p * n], "dtype": dt(), "init": "arange"},
               "h2": {"view": "h1", "shape": [n, p]}}
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
    doc = {"trnsim": 1, "seed": draw(st.integers(0, 3)), "tensors": tensors, "tiles": tiles,
           "instructions": instrs}
    return dump(doc), draw(st.sampled_from(CHIPS)), draw(st.sampled_from(MODES))


@FUZZ
@given(generated_kernel())
def test_fuzz_generated_kernels(example):
    assert_survives(example)


# ----------------------------------------------------------------------------------------------
# deadlocks must be reported as such, naming what is stuck

RING_INSTRS = {  # one instruction per engine, on tiles a/b of the ring kernel
    "tensor": "{op: transpose, src: a, dst: t}",
    "vector": "{op: tensor_copy, src: a, dst: b}",
    "scalar": "{op: activation, func: exp, src: a, dst: c}",
    "gpsimd": "{op: iota, dst: d}",
    "q0": "{op: dma_copy, src: a, dst: x, queue: 0}",
    "q7": "{op: dma_copy, src: x, dst: e, queue: 7}",
}


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 5))
@given(ring=st.lists(st.sampled_from(sorted(RING_INSTRS)), min_size=2, max_size=6, unique=True),
       extra=st.integers(1, 3), chip_name=st.sampled_from(CHIPS), mode=st.sampled_from(MODES))
def test_semaphore_cycle_between_engines_is_a_deadlock(ring, extra, chip_name, mode):
    """Queue k waits for semaphore s<k> that only queue k+1 signals (after its own wait): a
    cycle. The run must stop with a DeadlockError naming every queue of the cycle."""
    lines = []
    for k, track in enumerate(ring):
        body = RING_INSTRS[track][:-1]
        lines.append(f"  - {body}, wait: {{s{k}: {extra}}}, signal: {{s{(k - 1) % len(ring)}: "
                     f"{extra}}}}}")
    text = textwrap.dedent("""\
        trnsim: 1
        tensors:
          x: {shape: [128, 64], dtype: float32}
        tiles:
          a: {memory: sbuf, shape: [128, 64], dtype: float32, init: normal}
          b: {memory: sbuf, shape: [128, 64], dtype: float32}
          c: {memory: sbuf, shape: [128, 64], dtype: float32}
          d: {memory: sbuf, shape: [128, 64], dtype: float32}
          e: {memory: sbuf, shape: [128, 64], dtype: float32}
          t: {memory: psum, shape: [64, 128], dtype: float32}
        instructions:
        """) + "\n".join(lines) + "\n"
    err = run_trace(text, chip_name, mode)
    assert isinstance(err, DeadlockError), err
    for track in ring:
        assert f"core0.{track} in kernel main waits for semaphore" in str(err), (track, err)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 4))
@given(n=st.integers(1, 5), cores=st.lists(st.integers(0, 3), min_size=5, max_size=5),
       launch=st.booleans(), chip_name=st.sampled_from(["trn2", "trn3"]),
       mode=st.sampled_from(MODES))
def test_streams_waiting_in_a_cycle_is_a_deadlock(n, cores, launch, chip_name, mode):
    """Stream k waits for the event stream k+1 records after its own wait: a cycle of n."""
    out = ["trnsim: 1", "kernels:", "  k:", "    tiles:",
           "      a: {memory: sbuf, shape: [128, 8], dtype: float32}",
           "    instructions:", "      - {op: memset, dst: a, value: 2}", "streams:"]
    for k in range(n):
        steps = [f"{{wait: e{k}}}", f"{{record: e{(k - 1) % n}}}"]
        if launch:
            steps.insert(0, "{launch: k}")
        out.append(f"  - {{name: s{k}, core: {cores[k]}, do: [{', '.join(steps)}]}}")
    err = run_trace("\n".join(out) + "\n", chip_name, mode)
    assert isinstance(err, DeadlockError), err
    for k in range(n):
        assert f"stream s{k} waits for event 'e{k}'" in str(err), (k, err)


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
    proc = subprocess.run([sys.executable, "-c", BIG_PROBE.format(headroom=headroom),
                           json.dumps(traces)], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_huge_tensor_in_functional_mode_is_a_clean_error():
    """The known risk: a 20 GiB `normal` tensor fits trn2's HBM (24 GiB stacks) but not this
    machine's RAM; functional mode must refuse it up front, not allocate (or OOM) its way."""
    outs = probe_big([[("x", [5 * 2 ** 30], "float32", "normal")],  # 20 GiB: fits HBM only
                      [("x", [10 ** 6, 10 ** 6], "float32", "zeros")],  # 3.6 TiB: fits neither
                      [("x", [10 ** 30], "int8", "arange")],  # beyond what numpy can describe
                      [("x", [2 ** 30], "float32", "zeros"),  # 4 + 4 + 4 GiB: each fits the
                       ("y", [2 ** 30], "float32", "zeros"),  # 8 GiB limit, not all three
                       ("z", [2 ** 30], "float32", "random")]], headroom=12 << 30)
    assert len(outs) == 4
    for out in outs:
        assert out.startswith("TrnsimError:") and "--mode timing" in out, out
    assert outs[3].startswith("TrnsimError: tensor z:"), outs[3]


def test_huge_tensor_in_timing_mode_is_only_checked_against_hbm():
    text = "trnsim: 1\ntensors:\n  x: {shape: [5368709120], dtype: float32, init: normal}\n" \
           "instructions: []\n"
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
    assert probe_big([[("x", [32, 2 ** 20], "int8", "arange"),
                       ("y", [32, 2 ** 20], "float8_e4m3", "random")]], 160 << 20) == ["ok"]


# ----------------------------------------------------------------------------------------------
# regressions: found by the fuzzer, fixed in trnsim/engines (alu.py, gpsimd.py)

HUGE_IMMEDIATE = "1" + "0" * 400  # an integer no float can hold: YAML reads it as a Python int


@pytest.mark.parametrize("instruction, tile, expected", [
    (f"{{op: tensor_scalar, src: a, dst: a, op0: add, operand0: {HUGE_IMMEDIATE}}}",
     "float32", np.inf),
    (f"{{op: tensor_scalar, src: a, dst: a, op0: add, operand0: -{HUGE_IMMEDIATE}, "
     f"engine: gpsimd}}", "float32", -np.inf),
    (f"{{op: activation, func: identity, src: a, dst: a, scale: 1, bias: {HUGE_IMMEDIATE}}}",
     "float32", np.inf),
    (f"{{op: activation, func: identity, src: a, dst: a, bias: -{HUGE_IMMEDIATE}}}", "float32",
     -np.inf),
    (f"{{op: memset, dst: a, value: {HUGE_IMMEDIATE}}}", "int32", 2 ** 31 - 1),
    (f"{{op: memset, dst: a, value: -{HUGE_IMMEDIATE}, engine: gpsimd}}", "int16", -2 ** 15),
    (f"{{op: affine_select, on_true: a, dst: a, on_false: {HUGE_IMMEDIATE}, start: -9}}",
     "float32", np.inf),
    (f"{{op: iota, dst: a, start: {HUGE_IMMEDIATE}}}", "float32", np.inf),
    (f"{{op: select, predicate: a, on_true: a, on_false: {HUGE_IMMEDIATE}, dst: a}}",
     "float32", np.inf),
])
@pytest.mark.parametrize("mode", MODES)
def test_integer_immediates_beyond_float_range_saturate(instruction, tile, expected, mode):
    """Regression: an integer immediate too large for a float (operand0, scale, bias, value,
    on_false, start) raised OverflowError ('int too large to convert to float') from numpy in
    functional mode. It now becomes +-inf in fp32, like a float beyond fp32's range does, and is
    saturated by the cast to an integer tile."""
    text = (f"trnsim: 1\ntiles:\n  a: {{memory: sbuf, shape: [128, 4], dtype: {tile}}}\n"
            f"instructions:\n  - {instruction}\n")
    result = run_trace(text, "trn2", mode)
    assert isinstance(result, session.RunResult), result
    if mode == "functional":
        assert (result.tile("main", "a") == expected).all()


@pytest.mark.parametrize("chip_name", CHIPS)
def test_matmul_of_inf_gives_nan_without_a_warning(chip_name):
    """Regression (engines/tensor.py; fuzzer): inf * 0 inside a matmul made numpy print
    'RuntimeWarning: invalid value encountered in matmul' (an exception under -W error); the
    Vector/Scalar/GpSimd engines already computed under np.errstate(all="ignore")."""
    text = ("trnsim: 1\ntiles:\n"
            "  s: {memory: sbuf, shape: [128, 128], dtype: float32}\n"
            "  m: {memory: sbuf, shape: [128, 512], dtype: float32}\n"
            "  d: {memory: psum, shape: [128, 512], dtype: float32}\n"
            "  e: {memory: psum, shape: [128, 128], dtype: float32}\ninstructions:\n"
            "  - {op: memset, dst: s, value: .inf, signal: {a: 1}}\n"
            "  - {op: matmul, stationary: s, moving: m, dst: d, wait: {a: 1}}\n"
            "  - {op: transpose, src: s, dst: e, wait: {a: 1}}\n")
    result = run_trace(text, chip_name, "functional")  # RuntimeWarnings raise in run_trace
    assert np.isnan(result.tile("main", "d")).all()
    assert np.isinf(result.tile("main", "e")).all()


@pytest.mark.parametrize("mode", MODES)
def test_dma_transpose_on_trn1_is_a_sim_error(mode):
    """Regression (dma/checks.py; fuzzer): trn1 has no DMA transpose (its transpose rates are 0),
    yet `transpose: true` passed the checks and the transfer divided by the rate at submit:
    ZeroDivisionError from deep inside SimPy."""
    text = SEEDS["gemm"].replace("queue: 0, signal: {ld: 1}", "queue: 0, transpose: true, "
                                 "signal: {ld: 1}", 1)
    err = run_trace(text, "trn1", mode)
    assert "has no DMA transpose from HBM" in str(err), err
    assert isinstance(run_trace(text, "trn2", mode), session.RunResult)


@pytest.mark.parametrize("mode", MODES)
def test_shape_beyond_float_range_is_a_clean_error(mode):
    """Regression (units.py; fuzzer): a shape of 10**400 elements made fmt_bytes raise
    OverflowError ('integer division result too large for a float') while formatting the very
    error that rejects it (HBM allocation in timing mode, the backing limit in functional)."""
    text = (f"trnsim: 1\ntensors:\n  x: {{shape: [{HUGE_IMMEDIATE}, 128], dtype: bfloat16}}\n"
            f"instructions: []\n")
    err = run_trace(text, "trn1", mode)
    assert isinstance(err, TrnsimError) and "e+3" in str(err), err


@pytest.mark.parametrize("values", [
    np.array([["a", "b"], ["c", "d"]]),  # was ValueError: could not convert string to float
    np.zeros((2, 2), dtype=[("a", "f4"), ("b", "i4")]),  # was TypeError: cannot cast
    np.ones((2, 2), complex),  # was ComplexWarning, and the imaginary part silently dropped
])
def test_init_file_of_non_numbers_is_a_clean_error(tmp_path, values):
    """Regression (memory/init.py): a .npy of the right shape but of strings, records or complex
    numbers passes the loader's shape check; converting it at run time raised from numpy."""
    np.save(tmp_path / "v.npy", values)
    path = tmp_path / "t.yaml"
    path.write_text("trnsim: 1\ntiles:\n  t: {memory: sbuf, shape: [2, 2], dtype: float32, "
                    "init: {file: v.npy}}\ninstructions: [{op: memset, dst: t, value: 1}]\n")
    with pytest.raises(TrnsimError, match=r"tile t: .*v\.npy holds .* values; expected numbers"):
        session.run_program(trace.load(path), chip("trn2"), "functional")


# ----------------------------------------------------------------------------------------------
# regressions for bugs the fuzzer found in the loader and the runtime

NEWLINE_NAMES = {
    # a semaphore name with a line break, in a deadlock (core.deadlock_error)
    "semaphore": """\
trnsim: 1
tiles:
  a: {memory: sbuf, shape: [128, 4], dtype: float32}
instructions:
  - {op: memset, dst: a, value: 1, wait: {"x\\ny": 1}, signal: {y: 1}}
  - {op: iota, dst: a, wait: {y: 1}, signal: {"x\\ny": 1}}
""",
    # stream and event names with line breaks, in a deadlock (runtime.Device._deadlock)
    "stream/event": """\
trnsim: 1
kernels:
  k: {instructions: []}
streams:
  - {name: "a\\nb", do: [{wait: "e\\n1"}, {record: e0}]}
  - {name: b, do: [{wait: e0}, {record: "e\\n1"}]}
""",
    # a kernel name with a line break, in any kernel error (here onchip's SBUF overflow)
    "kernel": """\
trnsim: 1
kernels:
  "k\\nx":
    tiles:
      a: {memory: sbuf, shape: [128, 1000000], dtype: float32}
    instructions: []
""",
}


@pytest.mark.parametrize("what", list(NEWLINE_NAMES))
def test_names_with_line_breaks_keep_errors_on_one_line(what):
    run_trace(NEWLINE_NAMES[what], "trn2", "timing")


SLICED_COPY = """\
trnsim: 1
tensors:
  x: {shape: [4, 4], dtype: float32, init: arange}
  y: {shape: [2, 4], dtype: float32}
  z: {shape: [4, 4], dtype: float32}
streams:
  - {name: s, do: [{copy: {src: "x[0:2, :]", dst: y}}]}
"""


def test_copy_step_honours_its_slices():
    result = run_trace(SLICED_COPY, "trn2", "functional")
    assert isinstance(result, session.RunResult), result
    assert np.array_equal(result.tensor("y"), np.arange(8, dtype=np.float32).reshape(2, 4))


YAMLPOS_BUGS = {
    # int("9" * 5000) hits Python's 4300-digit limit for int(str); ValueError in yaml_events._plain
    "a 5000-digit integer": "trnsim: 1\ntensors:\n  x: {shape: [" + "9" * 5000 + "], dtype: "
                            "float32}\n",
    # loads() of a str with a lone surrogate: UnicodeEncodeError from yaml's CParser (a file read
    # by trace.load cannot hold one: its UTF-8 decoding fails first, with a TraceError)
    "a lone surrogate": "trnsim: 1\nname: a\ud800b\n",
}


@pytest.mark.parametrize("what", list(YAMLPOS_BUGS))
def test_yaml_text_the_loader_cannot_read_is_a_trace_error(what):
    run_trace(YAMLPOS_BUGS[what], "trn2", "timing")
