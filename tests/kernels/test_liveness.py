"""SBUF and PSUM allocated by liveness across the ops of a kernel (`kernels.liveness`,
`memory.onchip.place_live`): tiles of op steps that do not overlap share bytes, a tile a later
op still reads keeps its own, the later tile's accesses wait for the earlier one's, semaphores
are recycled where the core has too few, values at LNC 2 equal LNC 1's with `--check`, and the
race check compares reused bytes by address (a missed ordering is a race, a correct one is not).

Sizes below are per partition; trn2's SBUF is 224 KiB a partition."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.config import load_chip
from trnsim.dtypes import dtype
from trnsim.isa import DmaCopy
from trnsim.kernels import lower_cores
from trnsim.kernels.builder import KernelBuilder, ap
from trnsim.runtime.session import run_program
from trnsim.trace.program import KernelSpec, Program, Step, StreamSpec, TensorSpec
from trnsim.trace.races import find_races
from trnsim.trace.races.reuse import holders

F32 = dtype("float32")
CFG = load_chip("trn2")
KIB = 1024


def _cols(kib: int) -> int:
    return kib * KIB // 4  # fp32 elements of `kib` KiB a partition


def _kernel(steps: list[list[tuple]]) -> tuple[KernelBuilder, Program]:
    """One op step per item of `steps`, each a list of (tile, KiB a partition, tiles of
    earlier steps it reads): a tile is loaded from a tensor of its own (`<tile>_in`) and
    stored to `<tile>_out`; a tile read by a later step is stored again there, to
    `<tile>_again`. Returns the builder and a one-kernel program of its program."""
    tensors = {}
    for step in steps:
        for name, kib, _ in step:
            for k in ("in", "out", "again"):
                t = f"{name}_{k}"
                tensors[t] = TensorSpec(t, (128, _cols(kib)), F32, "normal" if k == "in" else None)
    b = KernelBuilder(tensors)
    made: dict[str, str] = {}
    for row, step in enumerate(steps):
        b.barrier()
        b.begin(row)
        for i, (name, kib, reads) in enumerate(step):
            t = made[name] = b.tile(name, "sbuf", (128, _cols(kib)), F32)
            src = ap(f"{name}_in")
            b.emit(DmaCopy, [src], [ap(t)], src=src, dst=ap(t), queue=2 * i)
            out = ap(f"{name}_out")
            b.emit(DmaCopy, [ap(t)], [out], src=ap(t), dst=out, queue=2 * i + 1)
            for old in reads:
                again = ap(f"{old}_again")
                b.emit(DmaCopy, [ap(made[old])], [again], src=ap(made[old]), dst=again,
                       queue=2 * i + 1)  # fmt: skip
    prog = b.program(CFG.core)
    program = Program("liveness", "trn2", 0, "functional", None, [], tensors,
                      {"k": KernelSpec("k", per_core=[prog])},
                      [StreamSpec("default", 0, [Step("launch", "k")])])  # fmt: skip
    return b, program


def test_two_sequential_ops_share_bytes():
    """Step 0: a (96 KiB) and b (64 KiB) at 0 and 96 KiB. Step 1: c (128 KiB) does not fit
    above them (160 + 128 > 224 KiB), and neither is live: c goes at 0, over a and b, and its
    first access on each queue waits for their last counts. High-water: 160 KiB a partition
    (placed: 160 KiB; live at once: step 0's 160 KiB, step 1's 128), where tiles kept for the
    whole kernel needed 288 KiB; the report's SBUF peak is 160 KiB x 128 partitions."""
    b, program = _kernel([[("a", 96, ()), ("b", 64, ())], [("c", 128, ())]])
    tiles = program.kernels["k"].per_core[0].tiles
    assert {n: (t.offset // KIB, t.live) for n, t in tiles.items()} == {
        "a": (0, (0, 0)), "b": (96, (0, 0)), "c": (0, (1, 1))}  # fmt: skip
    assert holders(tiles) == [("a", "c"), ("b", "c")]
    load_c = next(i for i in b.instructions if i.OP == "dma_copy" and i.dst.name == "c")
    assert dict(load_c.wait) == {"r.a": 1, "w.a": 1, "r.b": 1, "w.b": 1}
    r = run_program(program, CFG, "functional")
    assert r.summary["memory"]["sbuf_peak_bytes"] == 160 * KIB * 128
    for n in "abc":
        np.testing.assert_array_equal(r.tensor(f"{n}_out"), r.tensor(f"{n}_in"))
    assert find_races(program) == []


def test_a_tile_a_later_op_still_reads_keeps_its_bytes():
    """Step 0: k (96 KiB) at 0, a (64 KiB) at 96 KiB; step 1 reads k again and makes n (128
    KiB): k lives over steps 0-1, so n goes above it, at 96 KiB over a (not over k): 96 + 128 =
    224 KiB, the whole SBUF. Live at once: step 1's k + n, 224 KiB."""
    b, program = _kernel([[("k", 96, ()), ("a", 64, ())], [("n", 128, ("k",))]])
    tiles = program.kernels["k"].per_core[0].tiles
    assert {n: (t.offset // KIB, t.live) for n, t in tiles.items()} == {
        "k": (0, (0, 1)), "a": (96, (0, 0)), "n": (96, (1, 1))}  # fmt: skip
    assert holders(tiles) == [("a", "n")]
    r = run_program(program, CFG, "functional")
    assert r.summary["memory"]["sbuf_peak_bytes"] == 224 * KIB * 128
    np.testing.assert_array_equal(r.tensor("k_again"), r.tensor("k_in"))
    np.testing.assert_array_equal(r.tensor("n_out"), r.tensor("n_in"))
    assert find_races(program) == []


def test_a_missed_ordering_on_reused_bytes_is_a_race():
    """c's load (queue 0) with its waits for a's and b's last accesses taken away: nothing
    orders it after a's load (queue 0 too: two transfers of a queue may be in flight together)
    or a's store (queue 1), whose bytes it overwrites; by tile name they are two buffers, by
    address the same bytes. The first race per pair of tiles is reported."""
    b, program = _kernel([[("a", 96, ()), ("b", 64, ())], [("c", 128, ())]])
    load_c = next(i for i in b.instructions if i.OP == "dma_copy" and i.dst.name == "c")
    object.__setattr__(load_c, "wait", ())
    races = find_races(program)
    assert [r.region for r in races] == [
        "tiles a / c (sbuf bytes 0..98304 of each partition: reused)",
        "tiles b / c (sbuf bytes 98304..131072 of each partition: reused)",
    ]
    assert races[0].first == "<program>:0 kernel k queue q0 instruction 0 (dma_copy)"
    assert races[0].second == "<program>:0 kernel k queue q0 instruction 4 (dma_copy)"


def test_a_kernel_of_one_op_step_keeps_its_placement():
    """One op step: tiles one after another, no offsets or spans (as before liveness)."""
    _, program = _kernel([[("a", 96, ()), ("b", 64, ())]])
    tiles = program.kernels["k"].per_core[0].tiles
    assert [(t.offset, t.live) for t in tiles.values()] == [(None, None)] * 2


MULTI = """\
trnsim: 1
name: multi
chip: trn2
lnc: {lnc}
tensors:
  x:  {{shape: [256, 512], dtype: float32, init: normal}}
  g:  {{shape: [512], dtype: float32, init: normal}}
  w:  {{shape: [384, 512], dtype: float32, init: normal}}
  xn: {{shape: [256, 512], dtype: float32}}
  h:  {{shape: [256, 384], dtype: float32}}
  p:  {{shape: [256, 384], dtype: float32}}
  pt: {{shape: [384, 256], dtype: float32}}
  o:  {{shape: [384, 512], dtype: float32}}
  y:  {{shape: [384, 512], dtype: float32}}
ops:
  - rms_norm: {{x: x, weight: g, out: xn}}
  - linear: {{x: xn, weight: w, out: h}}
  - softmax: {{x: h, out: p}}
  - transpose: {{x: p, out: pt}}
  - matmul: {{a: pt, b: xn, out: o}}
  - gelu: {{x: o, out: o}}
  - add: {{a: o, b: w, out: y}}
"""
SMALL = ["--set", "core.sbuf.partition_bytes=40KiB", "--set", "core.semaphores=48"]


def test_a_multi_op_kernel_reusing_bytes_and_semaphores_checks_at_lnc_1_and_2(tmp_path):
    """Seven ops in one kernel on a core of 40 KiB of SBUF and 48 semaphores: tiles share
    bytes and semaphores across ops; `--check` passes at LNC 1 and 2, with equal values."""
    small = dataclasses.replace(
        CFG.core, sbuf=dataclasses.replace(CFG.core.sbuf, partition_bytes=40 * KIB),
        semaphores=48)  # fmt: skip
    outs = {}
    for lnc in (1, 2):
        p = tmp_path / f"multi{lnc}.yaml"
        p.write_text(MULTI.format(lnc=lnc))
        out = tmp_path / f"out{lnc}"
        r = CliRunner().invoke(main, ["run", str(p), "--check", "--json", "--out-dir", str(out),
                                      *SMALL])  # fmt: skip
        assert r.exit_code == 0, r.output
        s = json.loads(r.output)
        assert s["check"] and all(c["ok"] for c in s["check"].values())
        outs[lnc] = out
        from trnsim.trace import load as load_trace

        ops = load_trace(p).kernels["main"].ops
        tensors = load_trace(p).tensors
        cfg = dataclasses.replace(CFG, core=small)
        for prog in lower_cores(ops, tensors, cfg, lnc):
            assert holders(prog.tiles)  # bytes reused
            sems = {s for i in prog.instructions for s, _ in i.wait + i.signal}
            assert len(sems) <= 48
    for name in ("xn", "h", "p", "pt", "o", "y"):
        np.testing.assert_array_equal(np.load(outs[2] / f"{name}.npy"),
                                      np.load(outs[1] / f"{name}.npy"))  # fmt: skip


def test_the_race_check_passes_a_multi_op_kernel_reusing_bytes_and_semaphores(tmp_path):
    """The same kernel checked instruction by instruction (`find_races(library=True)`) at
    LNC 1 and 2: reused bytes and recycled semaphores are ordered."""
    from trnsim.runtime.session import lowered
    from trnsim.trace import load as load_trace

    cfg = dataclasses.replace(CFG, core=dataclasses.replace(
        CFG.core, sbuf=dataclasses.replace(CFG.core.sbuf, partition_bytes=40 * KIB),
        semaphores=48))  # fmt: skip
    for lnc in (1, 2):
        p = tmp_path / f"multi{lnc}.yaml"
        p.write_text(MULTI.format(lnc=lnc))
        program = lowered(load_trace(p), cfg, lnc)
        assert find_races(program, library=True) == []


def test_the_perfetto_trace_shows_sbuf_in_use_over_time():
    """A counter track per core and memory: a and b in use from their loads (160 KiB a
    partition), b done after its store (96 KiB), then a's store ends as c's load starts (c
    waits for it: 128 KiB), and nothing once c is stored."""
    from trnsim.report.perfetto import chrome_trace

    _, program = _kernel([[("a", 96, ()), ("b", 64, ())], [("c", 128, ())]])
    r = run_program(program, CFG, "timing")
    events = chrome_trace(r.device.recorder)["traceEvents"]
    track = [e for e in events if e["ph"] == "C" and e["name"] == "SBUF bytes a partition"]
    assert [e["args"]["bytes"] // KIB for e in track] == [160, 96, 128, 0]
    assert {e["pid"] for e in track} == {0}
    assert track == sorted(track, key=lambda e: e["ts"])
