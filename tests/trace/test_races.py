"""The static race and deadlock check (trnsim.trace.races, docs/races.md)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.errors import DeadlockError
from trnsim.trace import load, loads
from trnsim.trace.races import RaceError, check_races, find_races

TRACES = Path(__file__).parents[2] / "traces"
SMALL = ["gemm_double_buffered", "softmax_rows", "matmul_gelu", "two_streams"]


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.yaml")), ids=lambda p: p.stem)
def test_bundled_traces_are_race_free(path):
    assert find_races(load(path)) == []


def drops(name):
    """(program, instruction index, dropped wait) for every wait of every bundled kernel."""
    prog = load(TRACES / f"{name}.yaml")
    for kernel in prog.kernels.values():
        for core in kernel.per_core:
            for i, ins in enumerate(core.instructions):
                for w in ins.wait:
                    core.instructions[i] = replace(ins, wait=tuple(x for x in ins.wait if x != w))
                    yield prog, ins, w
                    core.instructions[i] = ins


@pytest.mark.parametrize("name", SMALL)
def test_dropping_any_wait_of_a_bundled_trace_is_a_race_naming_the_waiter(name):
    n = 0
    for prog, ins, w in drops(name):
        races = find_races(prog)
        label = f":{ins.line} kernel "
        assert races, (name, ins.index, w)
        assert any(
            label in r.first + r.second and f"instruction {ins.index} " in r.first + r.second
            for r in races
        ), (name, ins.index, w, races[0].message)
        n += 1
    assert n >= 1


def test_softmax_without_its_wait_names_both_instructions_and_the_tile():
    text = (TRACES / "softmax_rows.yaml").read_text().replace("wait: {red: 1}, ", "")
    (race,) = find_races(loads(text, "sm.yaml"))
    assert (
        race.first == "sm.yaml:43 kernel main queue scalar instruction 2 (activation)"
        or "instruction 2 (activation)" in race.first + race.second
    )
    assert "instruction 1 (tensor_scalar)" in race.first + race.second
    assert "neg_m" in race.region
    with pytest.raises(RaceError, match="race: .*neg_m.*--allow-races"):
        check_races(loads(text, "sm.yaml"))
    assert len(check_races(loads(text, "sm.yaml"), allow=True)) == 1


def test_other_waits_still_ordering_means_no_race():
    # the activation waits for both signals; dropping the redundant vector wait changes nothing
    text = """
trnsim: 1
tiles:
  a: {memory: sbuf, shape: [128, 64], dtype: float32}
  b: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
  - {op: memset, dst: a, signal: {s: 1}}
  - {op: tensor_copy, src: a, dst: b, wait: {s: 1}, signal: {t: 1}}
  - {op: activation, func: exp, src: b, dst: a, engine: scalar, wait: {t: 1}}
"""
    assert find_races(loads(text)) == []
    racy = text.replace("wait: {t: 1}", "wait: {s: 1}")
    assert len(find_races(loads(racy))) == 2  # b read-after-write, a write-after-read


def test_several_signallers_order_only_what_every_interleaving_guarantees():
    text = """
trnsim: 1
tiles:
  a: {memory: sbuf, shape: [128, 64], dtype: float32}
  b: {memory: sbuf, shape: [128, 64], dtype: float32}
  c: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
  - {op: memset, dst: a, signal: {s: 1}}
  - {op: memset, dst: b, engine: gpsimd, signal: {s: 1}}
  - {op: tensor_copy, src: a, dst: c, engine: scalar, wait: {s: WAIT}}
"""
    assert find_races(loads(text.replace("WAIT", "2"))) == []
    (race,) = find_races(loads(text.replace("WAIT", "1")))  # the gpsimd memset may come first
    assert "vector instruction 0 (memset)" in race.first + race.second


def test_dma_transfers_on_one_queue_are_not_ordered():
    text = """
trnsim: 1
tensors:
  x: {shape: [128, 64], dtype: float32}
  y: {shape: [128, 64], dtype: float32}
tiles:
  t: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
  - {op: dma_copy, src: x, dst: t, queue: 0}
  - {op: dma_copy, src: t, dst: y, queue: 0}
"""
    (race,) = find_races(loads(text))
    assert "queue q0 instruction 0" in race.first and "queue q0 instruction 1" in race.second


STREAMS = """
trnsim: 1
tensors:
  x: {shape: [128, 64], dtype: float32}
kernels:
  fill:
    instructions:
      - {op: memset, dst: t}
      - {op: dma_copy, src: t, dst: x, wait: {}, queue: 0}
    tiles: {t: {memory: sbuf, shape: [128, 64], dtype: float32}}
streams:
  - {name: a, core: 0, do: [launch: fill, record: e]}
  - {name: b, core: 1, do: [WAIT copy: {src: x, dst: x}]}
"""


def test_launches_on_streams_race_on_tensors_unless_an_event_orders_them():
    fixed = STREAMS.replace("[WAIT ", "[wait: e, ")
    prog = loads(STREAMS.replace("WAIT ", ""))
    names = {r.first.split(" (")[0] for r in find_races(prog)}
    assert any("stream b copy" in n or "kernel fill" in n for n in names)
    assert find_races(prog)  # the copy may run while the kernel writes x
    # (the kernel itself races: its DMA does not wait for the memset)
    inner = [r for r in find_races(loads(fixed)) if "stream" in r.first + r.second]
    assert inner == []


def test_stream_event_cycle_is_a_deadlock():
    text = STREAMS.replace(
        "[launch: fill, record: e]", "[wait: f, launch: fill, record: e]"
    ).replace("[WAIT copy: {src: x, dst: x}]", "[wait: e, record: f]")
    with pytest.raises(DeadlockError, match="stream a waits for event 'f'"):
        find_races(loads(text, "t.yaml"))


def test_engine_waiting_for_its_own_later_signal_is_a_deadlock():
    text = """
trnsim: 1
tiles:
  a: {memory: sbuf, shape: [128, 64], dtype: float32}
instructions:
  - {op: memset, dst: a, wait: {s: 1}}
  - {op: memset, dst: a, signal: {s: 1}}
"""
    with pytest.raises(
        DeadlockError,
        match=r"t.yaml:6 kernel main queue core0.vector "
        r"instruction 0 \(memset\) waits for semaphore 's' >= 1 that only its "
        r"own later instructions signal",
    ):
        find_races(loads(text, "t.yaml"))


def test_cli_validate_and_run_refuse_a_race_unless_allowed(tmp_path):
    text = (TRACES / "softmax_rows.yaml").read_text().replace("wait: {red: 1}, ", "")
    path = tmp_path / "sm.yaml"
    path.write_text(text)
    for cmd in (["validate"], ["run"]):
        res = CliRunner().invoke(main, [*cmd, str(path)])
        assert res.exit_code == 2, res.output
        assert "error: race:" in res.output and "neg_m" in res.output
        res = CliRunner().invoke(main, [*cmd, str(path), "--allow-races"])
        assert res.exit_code == 0, res.output
        assert "warning: race:" in res.output
    res = CliRunner().invoke(main, ["run", str(path), "--no-race-check"])  # the opt-out
    assert res.exit_code == 0 and "race:" not in res.output, res.output


def ring(steps, nbuf=4, queues=2, drop=None):
    """benchmarks/bench_load.py's ring, small: step i loads a slice of w into buffer b = i %
    nbuf (DMA queue b % queues, signal ld<b>); a matmul and a store (queue `queues`) wait for
    ld<b> >= round + 1 and signal use<b>; the next load into b waits for use<b> >= 2 * round.
    `drop` = (step, "load" | "matmul" | "store") removes that instruction's wait."""
    ins = []
    for i in range(steps):
        b, done = i % nbuf, i // nbuf
        rows = f"{i * 128}:{(i + 1) * 128}"
        load_ = {
            "op": "dma_copy",
            "src": f"w[{rows}, :]",
            "dst": f"wb{b}",
            "queue": b % queues,
            "signal": {f"ld{b}": 1},
        }
        if done:
            load_["wait"] = {f"use{b}": 2 * done}
        mm = {
            "op": "matmul",
            "stationary": "x",
            "moving": f"wb{b}",
            "dst": f"acc{i % 2}",
            "wait": {f"ld{b}": done + 1},
            "signal": {f"use{b}": 1},
        }
        st = {
            "op": "dma_copy",
            "src": f"wb{b}",
            "dst": f"y[{rows}, :]",
            "queue": queues,
            "wait": {f"ld{b}": done + 1},
            "signal": {f"use{b}": 1},
        }
        for name, x in (("load", load_), ("matmul", mm), ("store", st)):
            if drop == (i, name):
                x.pop("wait", None)
        ins += [load_, mm, st]
    tiles = {
        "x": {"memory": "sbuf", "shape": [128, 128], "dtype": "bfloat16"},
        "acc0": {"memory": "psum", "shape": [128, 512], "dtype": "float32"},
        "acc1": {"memory": "psum", "shape": [128, 512], "dtype": "float32"},
    }
    for b in range(nbuf):
        tiles[f"wb{b}"] = {"memory": "sbuf", "shape": [128, 512], "dtype": "bfloat16"}
    shape = [steps * 128, 512]
    doc = {
        "trnsim": 1,
        "chip": "trn2",
        "tensors": {
            "w": {"shape": shape, "dtype": "bfloat16"},
            "y": {"shape": shape, "dtype": "bfloat16"},
        },
        "tiles": tiles,
        "instructions": ins,
    }
    return loads(json.dumps(doc), "ring.yaml")


@pytest.mark.parametrize("nbuf,queues", [(4, 2), (2, 1), (2, 2), (3, 1), (4, 1)])
def test_a_ring_of_dma_signalled_buffers_is_race_free(nbuf, queues):
    assert find_races(ring(16, nbuf, queues)) == []


@pytest.mark.parametrize("what", ["load", "matmul", "store"])
@pytest.mark.parametrize("step", [1, 6, 9, 15])
def test_a_ring_missing_any_wait_races_naming_the_waiter(what, step):
    if what == "load" and step < 4:
        step += 4  # the first round's loads have no wait
    races = find_races(ring(16, drop=(step, what)))
    assert races
    index = 3 * step + ("load", "matmul", "store").index(what)
    assert any(f"instruction {index} " in r.first + r.second for r in races), races[0].message


OPS_STREAMS = """trnsim: 1
chip: trn2
lnc: 1
tensors:
  x: {shape: [128, 256], dtype: float32}
  y: {shape: [128, 256], dtype: float32}
kernels:
  a:
    ops:
      - exp: {x: x, out: y}
  b:
    ops:
      - relu: {x: y, out: y}
streams:
  - name: s0
    do:
      - launch: a
      - record: done
  - name: s1
    do:
      - WAIT
      - launch: b
"""


def test_lowered_kernels_on_two_streams_race_by_their_ops_tensors():
    """The CLI counts a lowered kernel by its ops' tensors (library=False): b's write of y on
    s1 races a's on s0 unless s1 waits for s0's event; the instruction-level analysis of the
    library's kernels (library=True, what tests/kernels run) finds the same race."""
    from trnsim.config import load_chip
    from trnsim.runtime.session import lowered

    cfg = load_chip("trn2")
    racy = lowered(loads(OPS_STREAMS.replace("- WAIT\n      ", ""), "o.yaml"), cfg, 1)
    (race,) = find_races(racy, library=False)
    assert (
        "o.yaml:10 kernel a op exp" in race.message and "o.yaml:13 kernel b op relu" in race.message
    )
    assert find_races(racy, library=True)
    ordered = lowered(loads(OPS_STREAMS.replace("WAIT", "wait: done"), "o.yaml"), cfg, 1)
    assert find_races(ordered, library=False) == [] and find_races(ordered) == []
