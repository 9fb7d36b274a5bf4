"""One rule for a DMA queue's order (docs/races.md): a queue completes its transfers of one
direction (into SBUF/PSUM, or into HBM) in order. The race check relies on it, and the simulator
does it: these tests hold the two to the same rule, on traces where it decides the answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from trnsim.config import load_chip
from trnsim.runtime.session import run_program
from trnsim.trace import loads
from trnsim.trace.races import find_races

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import counting_matmul  # noqa: E402

HEAD = """\
trnsim: 1
chip: trn2
mode: functional
tensors:
  x: {shape: [128, 64], dtype: float32, init: arange}
  y: {shape: [128, 64], dtype: float32}
  z: {shape: [128, 64], dtype: float32}
tiles:
  a: {memory: sbuf, shape: [128, 64], dtype: float32}
  b: {memory: sbuf, shape: [128, 64], dtype: float32}
  c: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
"""


def _ends(result) -> dict:
    """Instruction index -> (start, end) in ps, of the one kernel's spans."""
    return {s.index: (s.start_ps, s.end_ps) for s in result.device.recorder.spans}


def test_a_wait_on_a_queues_count_orders_the_first_transfers_of_one_direction():
    # two loads on q0; `s >= 1` can only be the first one's completion: c reads a, loaded
    text = HEAD + (
        "  - {op: dma_copy, queue: 0, src: x, dst: a, signal: {s: 1}}\n"
        "  - {op: dma_copy, queue: 0, src: x, dst: b, signal: {s: 1}}\n"
        "  - {op: tensor_copy, src: a, dst: c, wait: {s: 1}, signal: {t: 1}}\n"
        "  - {op: dma_copy, queue: 1, src: c, dst: y, wait: {t: 1}}\n"
    )
    program = loads(text, "inorder.yaml")
    assert find_races(program) == []
    r = run_program(program, load_chip("trn2"), "functional", lnc=1)
    spans = _ends(r)
    assert spans[0][1] <= spans[1][1]  # the queue completed them in order
    assert spans[2][0] >= spans[0][1]  # so the copy started after a was loaded
    np.testing.assert_array_equal(r.tensors["y"].array, r.tensors["x"].array)


def test_a_store_and_a_load_of_one_queue_complete_in_either_order():
    # a load into a (300 ns completion latency on trn2), then a store (0 ns) on the same queue:
    # the store completes first, so `s >= 1` does not say a is loaded; the check reports it
    # (a long load, whose data phase outlasts the store's setup, and a small store)
    text = HEAD.replace("64]", "4096]") + (
        "  - {op: dma_copy, queue: 0, src: x, dst: a, signal: {s: 1}}\n"
        "  - {op: dma_copy, queue: 0, src: 'b[:, 0:2]', dst: 'z[:, 0:2]', signal: {s: 1}}\n"
        "  - {op: tensor_copy, src: a, dst: c, wait: {s: 1}}\n"
    )
    program = loads(text, "mixed.yaml")
    (race,) = find_races(program)
    assert "instruction 0 (dma_copy)" in race.first and "instruction 2" in race.second
    r = run_program(program, load_chip("trn2"), "functional", lnc=1)
    spans = _ends(r)
    assert spans[1][1] < spans[0][1]  # the store completed before the load
    assert spans[2][0] < spans[0][1]  # and let the copy read a before it was loaded


def test_a_count_that_climbs_through_the_same_queue_is_race_free_at_any_depth():
    # the counting-semaphore matmul of benchmarks/counting_matmul.py: each matmul waits for
    # {q0: i+1, q1: i+1} while up to 3 later loads of each queue may already have issued
    doc = counting_matmul.document(mt=2, nt=2, kt=8)
    program = loads(json.dumps(doc), "cm.json")
    assert find_races(program) == []
    # dropping a buffer's reuse wait is a race again (the check stays precise, not blind)
    ins = doc["instructions"]
    k = next(i for i, x in enumerate(ins) if x.get("wait", {}).get("tensor") == 3)
    ins[k]["wait"] = {"q0": 3}
    races = find_races(loads(json.dumps(doc), "cm.json"))
    assert races and any(f"instruction {k} " in r.first + r.second for r in races)
