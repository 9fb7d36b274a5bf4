"""The exact offline path and the per-step report of a torch.distributed job on `neuron`
(docs/distributed.md, "Record and replay" and "The report"): 2 rank processes (spawn, a
FileStore) train an MLP with DDP, record two steps each (`trnsim.torch.record` with values:
one trace per rank) and report. The replay of both files together (`trnsim run --system
trn2-48xl ddp_rank*.yaml`, the offline path) gives the live (lockstep) run's collectives and
step times; the report's figures are checked against the chip's CollectiveSpans and a World's
own timing of the same collective, not against typed numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("torch.distributed")
import dist_record_workers  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from trnsim.cli import main  # noqa: E402
from trnsim.collectives import World  # noqa: E402
from trnsim.config import load_system  # noqa: E402

SIZE = 2
SYSTEM = "trn2-48xl"
T = dist_record_workers.T_WIDTH


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_record")
    ctx = mp.start_processes(dist_record_workers.ddp_recorded,
                             args=(SIZE, str(out / "store"), str(out)), nprocs=SIZE, join=False,
                             start_method="spawn")  # fmt: skip
    while not ctx.join(timeout=300):  # guards against a hang only
        pass
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(SIZE)]
    return out, ranks


def _cli(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


@pytest.fixture(scope="module")
def replay(job):
    """Both ranks' files replayed together (in the shell's order: rank 1's file first) in
    functional mode, with --check and the outputs saved."""
    out, _ = job
    files = [out / "ddp_rank1.yaml", out / "ddp_rank0.yaml"]
    got = json.loads(_cli("run", "--system", SYSTEM, *files, "--check", "--json",
                          "--out-dir", out / "replay"))  # fmt: skip
    return got


def _steps(doc) -> list[dict]:
    return [s for st in doc["streams"] for s in st["do"] if isinstance(s, dict)]


def test_each_rank_writes_its_own_file_with_its_collectives(job):
    out, ranks = job
    for r, seen in enumerate(ranks):
        assert seen["path"] == str(out / f"ddp_rank{r}.yaml")
        doc = yaml.safe_load((out / f"ddp_rank{r}.yaml").read_text())
        assert doc["rank"] == r and doc["system"] == SYSTEM and doc["mode"] == "functional"
        assert all(name.startswith(f"r{r}_") for name in doc["tensors"])
        colls = [s for s in _steps(doc) if "collective" in s]
        # one per timed collective of the block (DDP's one bucket a step), on the CC stream
        assert len(colls) == len(seen["spans"]) == seen["summary"]["collectives"] == 2
        for s, span in zip(colls, seen["spans"]):
            c = s["collective"]
            assert s["stream"] == span[1] == "cc 0"
            assert (c["op"], c["group"], c["reduce_op"]) == (span[3], [0, 1], "sum")
            t = doc["tensors"][c["tensor"]]  # the bucket itself: its values are replayed
            assert np.prod(t["shape"]) * 4 == span[6]


def test_replay_gives_the_live_collectives(job, replay):
    """Each collective of the replay is the live run's: op, group, bytes, dtype, algorithm and
    time to the picosecond (the ranks arrive together in both, so the World's time is the
    rank's span)."""
    _, ranks = job
    rows = replay["collectives"]
    assert len(rows) == 2
    for row, span in zip(rows, ranks[0]["spans"]):
        _core, _stream, _rank, op, algorithm, n, nbytes, dtype, _seq, start, end, _ = span
        assert (row["op"], row["ranks"], row["bytes"], row["dtype"], row["algorithm"]) == (
            op, n, nbytes, dtype, algorithm)  # fmt: skip
        assert round(row["time_ns"] * 1000) == end - start
    assert all(r["seq"] == i for i, r in enumerate(rows))


def test_replay_gives_each_rank_the_live_step_times(job, replay):
    """Per rank, the replay's times from the first event to the end of each step are the live
    ones to the picosecond (the recording's tensors, views of their storage blocks, lower as
    the live run's measurement of the same ops on plain tensors: `kernels.flat_split`)."""
    _, ranks = job
    timings = replay["timings"]
    for r, seen in enumerate(ranks):
        ends = sorted(v["ns"] * 1000 for k, v in timings.items() if k.startswith(f"r{r}."))
        live = seen["times_ps"]
        assert len(ends) == 2
        assert [round(e) for e in ends] == live[:2]


def test_replay_values_check_and_equal_the_live_weights(job, replay):
    """Functional replay: --check passes for every collective (the bucket's all_reduce over
    both ranks' values, against numpy), and the first Linear's weight after the two steps is
    the live one (the replay computes the library's ops itself: float32 rounding apart)."""
    out, ranks = job
    assert replay["check"] and all(c["ok"] for c in replay["check"].values()), replay["check"]
    for r, seen in enumerate(ranks):
        w = np.load(out / "replay" / f"rank{r}" / f"r{r}_w0.npy")
        np.testing.assert_allclose(w, seen["w0"].numpy(), rtol=1e-5, atol=1e-6)


def test_report_rows_are_the_world_s(job):
    """The report's rows: the CollectiveSpans' op, bytes, algorithm and window; busbw and time
    as a World of the system gives them for the same collective (both ranks arriving together)."""
    _, ranks = job
    rep = ranks[0]["report"]
    spans = ranks[0]["spans"]
    rows = [r for r in rep.collectives if (r["start_ps"], r["end_ps"]) in
            {(s[9], s[10]) for s in spans}]  # fmt: skip
    assert len(rows) == len(spans)
    w = World.from_config(load_system(SYSTEM))
    for row, span in zip(rows, spans):
        assert (row["op"], row["bytes"], row["algorithm"]) == (span[3], span[6], span[4])
        res = w.collective(row["op"], range(SIZE), row["bytes"], row["dtype"])
        assert row["time_ps"] == res.time_ps
        assert row["busbw"] == pytest.approx(res.busbw, rel=1e-12)
        assert row["algorithm"] == res.algorithm


def test_report_steps_add_up_against_the_spans_and_events(job):
    """Per step: the recorded steps end at the script's events; communication is the union of
    the CollectiveSpans that arrived in the step; exposed + overlapped = communication; time =
    compute + exposed + idle. (This MLP's one bucket is reduced after the backward pass: none of
    it is overlapped; eager launches leave the core idle between kernels.)"""
    _, ranks = job
    for seen in ranks:
        steps = seen["report"].steps
        ends = [s["end_ps"] for s in steps]
        events = seen["events_ps"]
        i = ends.index(events[1])
        assert ends[i + 1] == events[2] and steps[i]["start_ps"] == events[0]
        for s, span in zip(steps[i : i + 2], seen["spans"]):
            assert s["communication_ps"] == span[10] - span[9]
            assert [c["start_ps"] for c in s["collectives"]] == [span[9]]
            assert s["exposed_ps"] + s["overlapped_ps"] == s["communication_ps"]
            assert s["compute_ps"] + s["exposed_ps"] + s["idle_ps"] == s["time_ps"]
            assert s["overlapped_ps"] == 0 and s["compute_ps"] > 0
        assert "steps (between optimizer steps" in seen["text"]
        assert "all_reduce" in seen["text"]


def test_report_perfetto_has_the_collectives_on_their_cc_stream(job):
    """report(perfetto=...) in a job: a process for the rank's chip (chip 0: ranks 0 and 1 are
    its logical cores 0 and 1, physical cores 0 and 2 at LNC 2), a CC-stream row with one slice
    per collective the rank timed, and its kernels."""
    out, ranks = job
    for r, seen in enumerate(ranks):
        trace = json.loads((out / f"rank{r}.json").read_text())
        names = {e["args"].get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
        core = 2 * r
        assert {"chip 0 (trn2)", f"core{core} cc 0", f"core{core} kernels"} <= names
        cc = [e for e in trace["traceEvents"] if e.get("cat") == "collective"]
        assert len(cc) == len(seen["report"].collectives)
        assert {e["pid"] for e in cc} == {0}
        by_start = {round(e["ts"] * 1e6): e for e in cc}
        for span in seen["spans"]:
            e = by_start[span[9]]
            assert e["name"] == "all_reduce" and round(e["dur"] * 1e6) == span[10] - span[9]
        assert trace["otherData"]["rank"] == r


# -- the timing acceptance, derived by hand (the live lockstep path) ---------------------------


@pytest.fixture(scope="module")
def timed(job):
    """The same rank processes, after the recording: a device-bound bias-free MLP's second step
    trained plainly, the reducer's ops alone, and the same with DDP (dist_record_workers.
    ddp_timed)."""
    out, _ = job
    return [torch.load(out / f"rank{r}_timing.pt", weights_only=False) for r in range(SIZE)]


def _span(events) -> int:
    return events[2] - events[1]


def test_ddp_step_is_compute_plus_all_reduce_plus_the_hook_s_ops(timed):
    """Live (lockstep) path, 2 ranks on trn2-48xl (logical cores 0 and 1 of chip 0), DDP with
    one 512 KiB bucket. The model is device-bound (the host runs ahead: the plain step's launch
    windows fill it), and the bucket is ready only once backward is done, so by hand:
        DDP step = plain step (the same script without DDP: its compute alone)
                 + the bucket's all_reduce as a World of the system times it (both ranks
                   arriving together: nothing overlaps it, the copies back wait for it)
                 + the reducer's own device ops (a mul into the bucket per gradient, a copy
                   back per gradient), each measured alone.
    Each piece comes from the model, not from typed numbers; equal to the picosecond."""
    w = World.from_config(load_system(SYSTEM))
    for seen in timed:
        assert seen["buckets"] == 1
        plain = _span(seen["plain_events"])
        assert plain == sum(b - a for a, b, _ in seen["plain_windows"])  # device-bound
        hook = seen["hook_windows"]
        assert sorted(n for _, _, n in hook) == ["copy", "copy", "mul.out", "mul.out"]
        nbytes = 2 * 256 * 256 * 4  # the two weights' gradients, float32
        ar = w.collective("all_reduce", range(SIZE), nbytes, "float32").time_ps
        assert _span(seen["ddp_events"]) == plain + ar + sum(b - a for a, b, _ in hook)
        # the extra launches are the reducer's ops, with the durations they have alone
        extra = list(seen["ddp_windows"])
        for _, _, name in seen["plain_windows"]:
            extra.remove(next(x for x in extra if x[2] == name))
        assert sorted((n, b - a) for a, b, n in extra) == sorted((n, b - a) for a, b, n in hook)


def test_ddp_step_report_splits_it_as_derived(timed):
    """torch.neuron.report()'s row of that step: time as above, compute = the plain step's
    compute + the reducer's ops, communication = the all_reduce, all of it exposed (one bucket,
    reduced after backward: nothing left to overlap it), no idle time (device-bound)."""
    w = World.from_config(load_system(SYSTEM))
    ar = w.collective("all_reduce", range(SIZE), 2 * 256 * 256 * 4, "float32")
    for seen in timed:
        (step,) = [s for s in seen["report"].steps if s["end_ps"] == seen["ddp_events"][2]]
        assert step["start_ps"] == seen["ddp_events"][1]
        hook = sum(b - a for a, b, _ in seen["hook_windows"])
        assert step["time_ps"] == _span(seen["ddp_events"])
        assert step["compute_ps"] == _span(seen["plain_events"]) + hook
        assert step["communication_ps"] == step["exposed_ps"] == ar.time_ps
        assert step["overlapped_ps"] == 0 and step["idle_ps"] == 0
        (row,) = step["collectives"]
        assert (row["op"], row["bytes"], row["algorithm"]) == ("all_reduce", 2 * 256 * 256 * 4,
                                                               ar.algorithm)  # fmt: skip


def test_ddp_step_on_a_two_chip_ring_is_compute_plus_the_ring_s_closed_form_plus_the_hook(timed):
    """Live (lockstep) path, the same 2 rank processes and the same step, one rank per chip:
    trn2-48xl with TRNSIM_SYSTEM_SET's overrides `ranks_per_chip=1 collectives.algorithm=ring`
    (rank 0 on chip 0, rank 1 on chip 1, x neighbours of the 4x4 torus). What the World picks
    unforced: a Mesh (the bucket's 512 KiB is below `collectives.mesh_max`, 1 MB, R-CC's
    published selection; RDH from 1 MB, Ring only beyond `rdh_max`, as KangaRing cannot pair
    one rank a chip), hence the override. The torus has one ring through 2 chips (c0+x and
    c1-x: the other way round passes chips 2 and 3), so k = 1.
    The ring all-reduce of S bytes on N = 2 ranks, by hand from the system config (link L,
    hop latency A, start cost C, an HBM stack's bandwidth h, the rank's engines moving at
    n s and reducing at n s rr, `slices` = 2): reduce-scatter, one step: each rank sends its
    other half S/2 in 2 slices of q = S/4 on one DMA ring, at L (the link binds: L < n s, h);
    a slice is delivered A after its last byte, then added into the receiver's buffer at h/2
    (2 accesses of its stack: HBM binds, h/2 < n s rr). Slice 1's move ends (2q/L) before
    slice 0 arrives (q/L + A: A > q/L), and a reduction (q/(h/2)) ends before the next slice
    arrives (q/L apart: L < h/2), so nothing shares a resource: RS = 2q/L + A + q/(h/2).
    All-gather, one step: each sends its reduced half S/2, at L (each stack reads S/2 and
    writes S/2 at L: 2L < h), delivered A later. So
        AR = C + (S/(2L) + A + S/(2h)) + (S/(2L) + A) = C + 2A + S/L + S/(2h)
    and, as on one chip, the DDP step = the plain step + AR + the reducer's own ops."""
    cfg = load_system(SYSTEM, dist_record_workers.TWO_CHIPS)
    assert [cfg.rank_place(r) for r in range(SIZE)] == [(0, 0), (1, 0)]
    nbytes = 2 * T * T * 4  # the two weights' gradients, float32: one bucket
    unforced = load_system(SYSTEM, ["ranks_per_chip=1"])
    assert World.from_config(unforced).collective("all_reduce", range(SIZE), nbytes).algorithm \
        == "mesh" and nbytes < unforced.collectives.mesh_max  # fmt: skip
    link, dma, hbm = cfg.topology.link, cfg.chip.core.dma, cfg.chip.hbm
    L, A, C = link.bandwidth, link.latency, cfg.collectives.start_cost  # noqa: N806
    h = hbm.bandwidth / hbm.stacks
    ns = cfg.lnc * dma.engines * dma.store_bandwidth
    rr = cfg.chip.cc.reduce_rate
    q = nbytes / 4
    assert cfg.collectives.slices == 2 and L < min(ns, h / 2) and A > q / L and h / 2 < ns * rr
    formula_ps = (C + 2 * A + nbytes / L + nbytes / (2 * h)) * 1e12
    ar = World.from_config(cfg).collective("all_reduce", range(SIZE), nbytes, "float32")
    assert (ar.algorithm, ar.rings) == ("ring", 1)
    assert abs(ar.time_ps - formula_ps) <= 2  # the fluid model's ps rounding
    for seen in timed:
        plain = _span(seen["plain_events"])
        hook = sum(b - a for a, b, _ in seen["hook_windows"])
        step = _span(seen["ring_events"])
        assert step == plain + ar.time_ps + hook
        assert abs(step - (plain + formula_ps + hook)) <= 2
        (row,) = [s for s in seen["ring_report"].steps if s["end_ps"] == seen["ring_events"][2]]
        assert row["communication_ps"] == row["exposed_ps"] == ar.time_ps
        assert row["overlapped_ps"] == 0 and row["idle_ps"] == 0
        (c,) = row["collectives"]
        assert (c["op"], c["bytes"], c["algorithm"], c["group"]) == (
            "all_reduce", nbytes, "ring", [0, 1])  # fmt: skip
