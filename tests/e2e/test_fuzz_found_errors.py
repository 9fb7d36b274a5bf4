"""Regressions the fuzzer found in errors: checks that crashed instead of rejecting (DMA
transpose on trn1), and names or YAML text that broke the one-line error rule."""

from __future__ import annotations

import pytest

from tests.e2e.fuzzing import MODES, SEEDS, run_trace
from trnsim.errors import TraceError
from trnsim.runtime import session

# ----------------------------------------------------------------------------------------------
# checks that let a bad instruction through to a crash


@pytest.mark.parametrize("mode", MODES)
def test_dma_transpose_on_trn1_is_a_sim_error(mode):
    """Regression (dma/checks.py; fuzzer): trn1 has no DMA transpose (its transpose rates are 0),
    yet `transpose: true` passed the checks and the transfer divided by the rate at submit:
    ZeroDivisionError from deep inside SimPy."""
    text = SEEDS["gemm"].replace(
        "queue: 0, signal: {ld: 1}", "queue: 0, transpose: true, signal: {ld: 1}", 1
    )
    err = run_trace(text, "trn1", mode)
    assert "has no DMA transpose from HBM" in str(err), err
    assert isinstance(run_trace(text, "trn2", mode), session.RunResult)


# ----------------------------------------------------------------------------------------------
# names and YAML text that broke the one-line error rule (loader and runtime)

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


NEWLINE_NAME_ERRORS = {  # the loader now rejects such a name where it is declared
    "semaphore": "fuzz.yaml:5: instructions[0].wait.x y: semaphore name 'x\\ny' has a line break",
    "stream/event": "fuzz.yaml:5: streams[0].name: stream name 'a\\nb' has a line break",
    "kernel": "fuzz.yaml:3: kernels.k x: kernel name 'k\\nx' has a line break",
}


@pytest.mark.parametrize("what", list(NEWLINE_NAMES))
def test_names_with_line_breaks_keep_errors_on_one_line(what):
    """Each trace is an error (a deadlock or an SBUF overflow, or now the name itself): the run
    must fail, with one line (run_trace checks it) naming the file, line and key."""
    err = run_trace(NEWLINE_NAMES[what], "trn2", "timing")
    assert isinstance(err, TraceError), err
    assert str(err).startswith(NEWLINE_NAME_ERRORS[what]), err


YAMLPOS_BUGS = {  # what: (text, the start of the error)
    # int("9" * 5000) hits Python's 4300-digit limit for int(str); ValueError in yaml_events._plain
    "a 5000-digit integer": (
        "trnsim: 1\ntensors:\n  x: {shape: [" + "9" * 5000 + "], dtype: float32}\n",
        "fuzz.yaml:3: tensors.x.shape[0]: cannot read",
    ),
    # loads() of a str with a lone surrogate: UnicodeEncodeError from yaml's CParser (a file read
    # by trace.load cannot hold one: its UTF-8 decoding fails first, with a TraceError)
    "a lone surrogate": (
        "trnsim: 1\nname: a\ud800b\n",
        "fuzz.yaml:2: syntax: character '\\ud800' is not allowed",
    ),
}


@pytest.mark.parametrize("what", list(YAMLPOS_BUGS))
def test_yaml_text_the_loader_cannot_read_is_a_trace_error(what):
    text, message = YAMLPOS_BUGS[what]
    err = run_trace(text, "trn2", "timing")
    assert isinstance(err, TraceError), err
    assert str(err).startswith(message), err
