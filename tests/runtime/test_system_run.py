"""runtime.system_run: a trace on a system of chips. Per-rank memory, collective values against
numpy and times against the engine alone, the errors of a trace without a system, deadlocks and
order mismatches at run time, and timeline reuse (off on a system, on for one chip, and a chip
of a system running a one-chip trace gives that trace's own figures)."""

import textwrap

import numpy as np
import pytest

from trnsim.collectives import World
from trnsim.config import load_chip, load_system
from trnsim.errors import DeadlockError, TrnsimError
from trnsim.runtime.session import run_program
from trnsim.runtime.system_run import run_on_system, system_of
from trnsim.trace import loads

SYSTEM = load_system("trn2-48xl")

DDP = """\
trnsim: 1
system: trn2-48xl
tensors:
  x: {shape: [128, 256], dtype: float32, init: normal}
  w: {shape: [256, 128], dtype: float32, init: normal}
  g: {shape: [128, 128], dtype: float32}
kernels:
  fwd:
    ops:
      - matmul: {a: x, b: w, out: g}
streams:
"""


def ddp(ranks=(0, 1, 4, 5), skip=None, op=None):
    text = DDP
    group = list(ranks)
    for r in ranks:
        steps = ["launch: fwd"]
        if r != skip:
            steps.append(f"collective: {{op: {op if r == op_rank(ranks) and op else 'all_reduce'}, "
                         f"group: {group}, tensor: g}}")  # fmt: skip
        text += f"  - {{name: r{r}, rank: {r}, do: [{', '.join(steps)}]}}\n"
    return loads(text, source="ddp.yaml")


def op_rank(ranks):
    return ranks[-1]


def test_ddp_values_and_time():
    p = ddp()
    r = run_on_system(p, system_of(p), check=True)
    total = sum(r.tensor("x", k).astype(np.float64) @ r.tensor("w", k) for k in (0, 1, 4, 5))
    for k in (0, 1, 4, 5):
        np.testing.assert_allclose(r.tensor("g", k), total, rtol=1e-4, atol=1e-3)
    assert not np.array_equal(r.tensor("x", 0), r.tensor("x", 1))  # each rank its own inits
    (row,) = r.summary["collectives"]
    alone = World.from_config(SYSTEM).collective("all_reduce", (0, 1, 4, 5), 128 * 128 * 4)
    assert row["time_ns"] * 1000 == alone.time_ps and row["algorithm"] == alone.algorithm
    assert row["check"]["ok"] and list(r.summary["check"]) == ["ddp.yaml:12 all_reduce g #0"]
    assert r.summary["ranks"] == [0, 1, 4, 5] and list(r.summary["chips"]) == ["0", "1"]
    comm = r.summary["communication"]
    assert comm["ranks"]["4"]["collective_ns"] == row["time_ns"]  # nothing ran beside it
    assert comm["exposed_fraction"] == 1.0 and comm["overlapped_ns"] == 0.0


def test_a_group_some_rank_never_reaches_is_a_deadlock():
    with pytest.raises(DeadlockError) as e:
        run_on_system(ddp(skip=5), SYSTEM, mode="timing")
    assert "collective all_reduce #0 on group (0, 1, 4, 5): ranks (5) never reached it; ranks " \
           "(0, 1, 4) wait for them (streams r0, r1, r4)" in str(e.value)  # fmt: skip


def test_ranks_issuing_different_collectives_is_an_error():
    with pytest.raises(TrnsimError) as e:
        run_on_system(ddp(op="all_gather"), SYSTEM, mode="timing")
    assert "collective #0 on group (0, 1, 4, 5): rank 5 issued all_gather" in str(e.value)


def test_one_chip_refuses_ranks_and_collectives():
    with pytest.raises(TrnsimError) as e:
        run_program(ddp(), load_chip("trn2"))
    assert str(e.value).startswith(
        "ddp.yaml:12: streams[0].rank: a rank needs a system of chips; expected a run on the "
        "trace's system (trn2-48xl): trnsim run, or trnsim.runtime.system_run.run_on_system"
    )
    text = DDP.replace("system: trn2-48xl\n", "") + (
        "  - {name: s, do: [{collective: {op: all_reduce, tensor: g}}]}\n"
    )
    with pytest.raises(TrnsimError) as e:
        run_program(loads(text, source="t.yaml"), load_chip("trn2"))
    assert str(e.value) == (
        "t.yaml:11: streams[0].do[0].collective: a collective needs a system of chips; "
        "expected system: NAME in the trace, or trnsim run --system NAME"
    )
    text = "trnsim: 1\nstreams:\n  - name: s\n    rank: 3\n    do: []\n"
    with pytest.raises(TrnsimError) as e:
        run_program(loads(text, source="t.yaml"), load_chip("trn2"))
    assert str(e.value).startswith("t.yaml:4: streams[0].rank: a rank needs a system of chips")


def test_system_of():
    p = ddp()
    assert system_of(p).name == "trn2-48xl"
    assert system_of(p, "trn1-32xl", ["nodes=2"]).chips == 32
    assert system_of(loads("trnsim: 1\n")) is None


ONE_CHIP = """\
trnsim: 1
mode: timing
tensors:
  x: {shape: [512, 512], dtype: bfloat16}
  y: {shape: [512, 512], dtype: bfloat16}
kernels:
  k:
    ops:
      - gelu: {x: x, out: y}
streams:
  - name: s
    do: [launch: k, launch: k, launch: k]
"""


def test_reuse_is_off_on_a_system_and_a_chip_keeps_its_figures(monkeypatch):
    monkeypatch.setenv("TRNSIM_REUSE", "1")
    p = loads(textwrap.dedent(ONE_CHIP), source="one.yaml")
    alone = run_program(p, load_chip("trn2"))
    assert alone.device.ctx.reuse.replays == 2  # reuse on for one chip
    on = run_on_system(p, SYSTEM)
    assert on.device.ctx.reuse is None and on.system.root.reuse is None
    chip = on.summary["chips"]["0"]
    for key in ("device_time_ns", "engines", "dma", "hbm", "top_instructions"):
        assert chip[key] == alone.summary[key], key
    assert on.summary["total_time_ns"] == alone.summary["total_time_ns"]


def test_bf16_collective_check_and_in_place_gather():
    text = textwrap.dedent("""\
        trnsim: 1
        system: trn2-48xl
        tensors:
          g: {shape: [64, 64], dtype: bfloat16, init: normal}
          full: {shape: [256, 64], dtype: bfloat16, init: normal}
        streams:
        """)  # fmt: skip
    idle = loads(text + "".join(f"  - {{name: r{k}, rank: {k}, do: []}}\n" for k in range(4)))
    for k in range(4):
        text += (f"  - {{name: r{k}, rank: {k}, do: [{{collective: {{op: all_reduce, group: "
                 f"[0, 1, 2, 3], tensor: g}}}}, {{collective: {{op: all_gather, group: [0, 1, 2, "
                 f"3], tensor: full}}}}]}}\n")  # fmt: skip
    before = run_on_system(idle, SYSTEM)  # the inputs: each rank's inits, seeded alike
    r = run_on_system(loads(text, source="b.yaml"), SYSTEM, check=True)
    assert all(c["ok"] for c in r.summary["check"].values()) and len(r.summary["check"]) == 2
    gs = [before.tensor("g", k).astype(np.float32) for k in range(4)]
    np.testing.assert_allclose(r.tensor("g", 2).astype(np.float32), np.sum(gs, axis=0),
                               rtol=0.02, atol=0.05)  # fmt: skip
    fulls = [before.tensor("full", k) for k in range(4)]
    gathered = np.concatenate([f[k * 64 : (k + 1) * 64] for k, f in enumerate(fulls)])
    np.testing.assert_array_equal(r.tensor("full", 3), gathered)
