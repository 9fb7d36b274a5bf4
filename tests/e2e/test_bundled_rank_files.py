"""The bundled trace per rank (traces/ranks/rank{0,4,8,12}.yaml) run end to end with `trnsim run
--check`, the files in any order: each rank's streams, events and kernels its own, the
broadcast timed exactly as the collectives engine times it alone, the all_reduce that waits for
the straggler (rank 12 runs its matmul twice) longer by exactly that matmul, the values equal to
numpy's (every rank ends with the same y, rank 0's w), and `validate` on the files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from trnsim.cli import main
from trnsim.collectives import World
from trnsim.config import load_system

FOLDER = Path(__file__).resolve().parents[2] / "traces" / "ranks"
RANKS = (0, 4, 8, 12)
FILES = [str(FOLDER / f"rank{r}.yaml") for r in (12, 0, 8, 4)]  # any order
SIZE = 512 * 512 * 2  # y and w: [512, 512] bf16


def invoke(*args) -> str:
    result = CliRunner().invoke(main, [*map(str, args)])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def test_rank_files(tmp_path):
    s = json.loads(invoke("run", *FILES, "--check", "--json", "--out-dir", tmp_path))
    assert s["system"] == "trn2-48xl" and s["ranks"] == list(RANKS)
    assert sorted(s["timings"]) == [f"r{r}.start->r{r}.done" for r in (0, 12, 4, 8)]
    bcast, reduce = s["collectives"]
    assert (bcast["op"], bcast["seq"], reduce["op"], reduce["seq"]) == ("broadcast", 0,
                                                                        "all_reduce", 1)  # fmt: skip
    assert bcast["label"].startswith("rank") and ".yaml:" in bcast["label"]
    assert len(s["check"]) == 2 and all(c["ok"] for c in s["check"].values())
    # times: every rank posts the broadcast at once: the engine's time for it alone
    w = World.from_config(load_system("trn2-48xl"))
    alone = w.collective("broadcast", RANKS, SIZE, "bfloat16", root=0)
    assert bcast["time_ns"] * 1000 == alone.time_ps
    # the all_reduce waits for rank 12's second matmul (a chip's one-matmul device time: chips
    # 0-2 run one matmul each), then takes the engine's time alone
    mm_ns = s["chips"]["0"]["device_time_ns"]
    assert s["chips"]["3"]["device_time_ns"] == 2 * mm_ns
    w = World.from_config(load_system("trn2-48xl"))
    ar = w.collective("all_reduce", RANKS, SIZE, "bfloat16")
    assert abs(reduce["time_ns"] - (ar.time_ps / 1000 + mm_ns)) < 1e-6
    comm = s["communication"]["ranks"]
    assert abs(comm["0"]["exposed_ns"] - comm["12"]["exposed_ns"] - mm_ns) < 1e-6
    # values: rank 0's weights everywhere, and one reduced y on every rank
    y0, w0 = (np.load(tmp_path / "rank0" / f"{n}.npy") for n in ("y", "w"))
    for r in RANKS[1:]:
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{r}" / "w.npy"), w0)
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{r}" / "y.npy"), y0)
    xs = [np.load(tmp_path / f"rank{r}" / "x.npy").astype(np.float64) for r in RANKS]
    want = sum(x @ w0.astype(np.float64) for x in xs)
    assert np.abs(y0 - want).max() <= 0.02 * np.abs(want).max()  # bf16 products and hops


def test_validate_rank_files():
    out = invoke("validate", *FILES)
    assert out.endswith(": ok on trn2-48xl: kernels 4, instructions 200, streams 4\n")
