"""Shared by the trace tests: load a trace from text, catch its one-line error, find a line,
and the TRACE_FORMAT.md examples."""

import textwrap

import pytest

from trnsim.errors import TraceError
from trnsim.trace import loads
from trnsim.trace.program import Program


def line(text: str, needle: str) -> int:
    """The 1-based line of the first occurrence of `needle` in `text`."""
    return next(i + 1 for i, s in enumerate(text.splitlines()) if needle in s)


def parse(text: str, **kw) -> Program:
    return loads(textwrap.dedent(text), source="t.yaml", **kw)


def error(text: str, **kw) -> str:
    with pytest.raises(TraceError) as info:
        parse(text, **kw)
    msg = str(info.value)
    assert "\n" not in msg and "; expected " in msg
    return msg


def instructions(text: str, core: int = 0, kernel: str = "main") -> list:
    return parse(text).kernels[kernel].per_core[core].instructions


T = "trnsim: 1\n"
TENS = T + "tensors:\n  x: {shape: [128, 64], dtype: float32}\n"
TILE = TENS + "tiles:\n  t: {memory: sbuf, shape: [128, 64], dtype: float32}\ninstructions:\n"
K = T + "kernels:\n  k:\n"

# ----------------------------------------------------------------------------------------------
# the examples of TRACE_FORMAT.md

TOP = """\
trnsim: 1                 # format version (required)
name: gemm-bf16           # free text
chip: trn2                # default chip config; `--chip` on the command line overrides
seed: 0                   # seeds every random init
mode: functional          # functional (compute values) | timing (shapes only, no values)
lnc: 2                    # optional: logical NeuronCore size (1 or 2); default from the chip config
outputs: [y]              # optional: tensors that `--out-dir DIR` saves
tensors:
  x:   {shape: [4096, 8192], dtype: bfloat16, init: normal}   # zeros | ones | random | normal
  w:   {shape: [8192, 8192], dtype: bfloat16, init: normal}
  y:   {shape: [4096, 8192], dtype: bfloat16}                  # no init: zeros
  host_x: {shape: [4096, 8192], dtype: bfloat16, init: normal, on: host}   # host memory
  q:   {shape: [2048, 8192], dtype: bfloat16}
  q3: {view: q, shape: [2048, 64, 128]}
"""

MLP = """\
kernels:
  mlp:
    ops:
      - matmul: {a: x, b: w, out: h}              # h = x @ w ; batched when ranks > 2
      - gelu:   {x: h, out: h}
      - add:    {a: h, b: bias, out: h}           # numpy broadcasting rules
      - softmax: {x: h, out: p, dim: -1}
"""

GEMM = """\
  tile_gemm:                                       # one 128 x 512 tile of y = x @ w
    tiles:                                         # on-chip buffers of this kernel
      x_t:  {memory: sbuf, shape: [128, 128], dtype: bfloat16}   # first dim = partitions
      w_t:  {memory: sbuf, shape: [128, 512], dtype: bfloat16}
      acc:  {memory: psum, shape: [128, 512], dtype: float32}
      o_t:  {memory: sbuf, shape: [128, 512], dtype: bfloat16}
    instructions:                                  # one list; each goes to its engine's queue
      - {op: dma_copy, src: "xT[0:128, 0:128]", dst: x_t, queue: 0, signal: {ld: 1}}
      - {op: dma_copy, src: "w[0:128, 0:512]", dst: w_t, queue: 1, signal: {ld: 1}}
      - {op: matmul, stationary: x_t, moving: w_t, dst: acc, accumulate: false, wait: {ld: 2}, signal: {mm: 1}}
      - {op: activation, func: gelu, src: acc, dst: o_t, wait: {mm: 1}, signal: {act: 1}}
      - {op: dma_copy, src: o_t, dst: "y[0:128, 0:512]", queue: 0, wait: {act: 1}}
"""  # noqa: E501

GEMM_TENSORS = """\
trnsim: 1
tensors:
  xT: {shape: [8192, 4096], dtype: bfloat16}
  w:  {shape: [8192, 8192], dtype: bfloat16}
  y:  {shape: [4096, 8192], dtype: bfloat16}
kernels:
"""

STREAMS = """\
streams:
  - name: compute
    core: 0                                   # logical NeuronCore (0 .. chip cores / lnc - 1)
    do:
      - record: start_step                    # an event
      - copy: {src: host_x, dst: x}           # host -> device
      - launch: mlp
      - record: done_mlp
  - name: side
    core: 1
    do:
      - wait: done_mlp                        # this stream waits for the event
      - launch: tile_gemm
      - copy: {src: y, dst: host_y}           # device -> host
      - synchronize                           # the host waits here for this stream
timing:                                        # optional: report elapsed time between events
  - {from: start_step, to: done_mlp}
"""
