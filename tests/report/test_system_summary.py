"""report.system_summary and report.perfetto_system on hand-built recorders: exposed and
overlapped communication to the picosecond, the collective rows' bandwidths and link
utilisation, and the system timeline (a process per chip, rows per core's engine, DMA queue and
CC stream, every row nesting)."""

from trnsim.report.lanes import violations
from trnsim.report.perfetto_system import CC_ID_BASE, CORE_STRIDE, system_trace
from trnsim.report.recorder import CollectiveSpan, Recorder
from trnsim.report.system_summary import collective_rows, exposure


def cc(rank, start, end, core=0, stream="cc", op="all_reduce", seq=0):
    return CollectiveSpan(core, stream, rank, op, "ring", 2, 4096, "float32", seq, start, end,
                          f"t.yaml:9 {op}")  # fmt: skip


def test_exposure_counts_compute_on_the_ranks_cores_only():
    rec = Recorder()
    rec.collective(cc(0, 100, 500))
    rec.collective(cc(0, 400, 900, seq=1))  # overlaps the first: counted once
    rec.collective(cc(1, 0, 1000, core=2))
    rec.launch("k", (0, 1), 200, 300)  # rank 0's logical core (LNC 2: cores 0, 1)
    rec.launch("k", (1,), 450, 600)
    rec.launch("k", (2, 3), 0, 50)  # rank 1's
    rec.launch("k", (4, 5), 0, 1000)  # another rank's: hides nothing of ranks 0 and 1
    assert exposure(rec, 0, (0, 1)) == {
        "collective_ns": 0.8,  # [100, 900]
        "overlapped_ns": 0.25,  # [200, 300] and [450, 600]
        "exposed_ns": 0.55,
    }
    assert exposure(rec, 1, (2, 3)) == {
        "collective_ns": 1.0,
        "overlapped_ns": 0.05,
        "exposed_ns": 0.95,
    }
    assert exposure(rec, 2, (4, 5))["collective_ns"] == 0.0


def test_collective_rows():
    (row,) = collective_rows(
        [
            {
                "label": "t.yaml:9 all_reduce g",
                "op": "all_reduce",
                "seq": 3,
                "group": (0, 4),
                "nbytes": 1 << 20,
                "dtype": "bfloat16",
                "algorithm": "ring",
                "start_ps": 5_000_000,
                "end_ps": 25_000_000,  # 20 us
                "algbw": 5e10,
                "busbw": 5e10,
                "link_bytes": {"c0+x": 1e6, "c1-x": 2.56e6},
                "check": None,
            }
        ],
        {"c0+x": 256e9, "c1-x": 256e9, "c0+y": 256e9},
    )
    assert row["time_ns"] == 20_000 and row["start_ns"] == 5_000
    assert (row["links"], row["link_bytes"], row["busiest_link"]) == (2, 3.56e6, "c1-x")
    assert row["link_utilization"] == 2.56e6 / (256e9 * 20e-6)  # 50%
    assert row["mean_link_utilization"] == (1e6 + 2.56e6) / 2 / (256e9 * 20e-6)
    assert "check" not in row and (row["ranks"], row["group"]) == (2, [0, 4])


def test_system_timeline():
    a, b = Recorder(), Recorder()
    a.span(0, "tensor", "matmul", 0, 100, kernel="k")
    a.span(1, "q3", "dma_copy", 0, 80, kernel="k")
    a.span(1, "q3", "dma_copy", 50, 120, kernel="k")  # in flight together: a second lane
    a.collective(cc(0, 10, 200, core=0, stream="grads"))
    a.collective(cc(0, 300, 400, core=0, stream="grads", seq=1))
    a.collective(cc(1, 10, 200, core=2, stream="grads"))
    b.collective(cc(4, 10, 200, core=0, stream="comm"))
    b.hbm_sample(0, 1, 5e11)
    t = system_trace({0: a, 1: b}, "trn2")
    ev = t["traceEvents"]
    assert violations(t) == []
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert procs == {0: "chip 0 (trn2)", 1: "chip 1 (trn2)"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert names == {
        (0, 0): "core0 tensor",
        (0, CORE_STRIDE + 103): "core1 dma q3",
        (0, CORE_STRIDE + 103 + 10_000): "core1 dma q3 #2",
        (0, CC_ID_BASE): "core0 cc grads",
        (0, 2 * CORE_STRIDE + CC_ID_BASE): "core2 cc grads",
        (1, CC_ID_BASE): "core0 cc comm",
    }
    grads = [
        e for e in ev if e.get("cat") == "collective" and e["pid"] == 0 and e["tid"] == CC_ID_BASE
    ]
    assert [(e["ts"], e["dur"], e["args"]["seq"]) for e in grads] == [
        (10 / 1e6, 190 / 1e6, 0),
        (300 / 1e6, 100 / 1e6, 1),
    ]
    (hbm,) = [e for e in ev if e["ph"] == "C"]
    assert (hbm["pid"], hbm["name"], hbm["args"]) == (1, "HBM stack1 GB/s", {"GB/s": 500.0})
