"""The bundled traces in traces/: each one runs, its report matches its golden, and its values
match numpy.

Golden reports: tests/golden/<trace stem>.json holds the output of
`trnsim run traces/<trace stem>.yaml --json` on the trace's default chip, and
tests/golden/<trace stem>@<chip>.json that of `... --chip <chip>` for the traces of
OTHER_CHIPS. The simulator is deterministic, so the test compares the whole JSON object exactly,
floats included (they survive the JSON round trip bit for bit); a mismatch lists every key path
that differs. test_golden_figures.py and test_golden_figures_ops.py derive the goldens' key figures by hand from the model.

When the model changes on purpose (a cost formula, a config value, a new report key), regenerate
the goldens and review the diff before committing it:

    python tests/e2e/test_bundled_traces.py --update                 # every golden
    python tests/e2e/test_bundled_traces.py --update two_streams     # some, by trace stem...
    python tests/e2e/test_bundled_traces.py --update two_streams@trn3  # ... or stem@chip

or, equivalently, through pytest: `TRNSIM_UPDATE_GOLDEN=1 pytest tests/e2e/test_bundled_traces.py`
(the golden tests then write the files and pass). A new trace in traces/ fails here until its
golden exists.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `python tests/e2e/test_bundled_traces.py --update` from anywhere
    sys.path.insert(0, str(ROOT))

from trnsim.cli import main  # noqa: E402
from trnsim.config import load_chip  # noqa: E402
from trnsim.runtime.session import run_program  # noqa: E402
from trnsim.trace import load  # noqa: E402

TRACES = ROOT / "traces"
GOLDEN = ROOT / "tests" / "golden"
UPDATE_ENV = "TRNSIM_UPDATE_GOLDEN"
BUNDLED = sorted(p.stem for p in TRACES.glob("*.yaml"))
# goldens on chips other than the trace's own (the Llama layer is left out: ~20 s a run)
OTHER_CHIPS = {
    "trn1": ("gemm_double_buffered", "matmul_gelu", "softmax_rows", "two_streams"),
    "trn3": ("gemm_double_buffered", "matmul_gelu", "softmax_rows", "two_streams"),
}
# golden names: <stem> on the trace's chip, <stem>@<chip> on another
GOLDENS = BUNDLED + sorted(
    f"{stem}@{chip}" for chip, stems in OTHER_CHIPS.items() for stem in stems
)


def split_name(name: str) -> tuple[str, str | None]:
    """'two_streams@trn3' -> ('two_streams', 'trn3'); 'two_streams' -> ('two_streams', None)."""
    stem, _, chip = name.partition("@")
    return stem, chip or None


def cli_json(name: str) -> dict:
    """`trnsim run traces/<stem>.yaml --json [--chip <chip>]` for a golden name, parsed (without
    the race check, which test_validates runs: it does not change the report, and on the Llama
    ops traces it takes minutes)."""
    stem, chip = split_name(name)
    args = ["run", str(TRACES / f"{stem}.yaml"), "--json", "--no-race-check"]
    args += ["--chip", chip] if chip else []
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr or result.output
    return json.loads(result.stdout)


def write_golden(name: str, report: dict) -> Path:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    path = GOLDEN / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


def differences(want, got, path: str = "") -> list[str]:
    """Key paths where two JSON values differ (exactly: 1.0 != 1.0000000001, 1 != 1.0)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got)):
            p = f"{path}.{k}" if path else k
            if k not in got:
                out.append(f"{p}: missing (golden {want[k]!r})")
            elif k not in want:
                out.append(f"{p}: new key ({got[k]!r}), not in the golden")
            else:
                out += differences(want[k], got[k], p)
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(got)} items, golden has {len(want)}"]
        return [
            d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{path}[{i}]")
        ]
    if type(want) is not type(got) or want != got:
        return [f"{path}: {got!r}, golden {want!r}"]
    return []


def test_there_are_bundled_traces():
    assert {
        "gemm_double_buffered",
        "two_streams",
        "llama70b_layer_timing",
        "matmul_gelu",
        "softmax_rows",
    } <= set(BUNDLED)


@pytest.mark.parametrize("name", GOLDENS)
def test_golden_report(name):
    report = cli_json(name)
    path = GOLDEN / f"{name}.json"
    if os.environ.get(UPDATE_ENV):
        write_golden(name, report)
        return
    assert path.is_file(), (
        f"no golden report {path.relative_to(ROOT)}; create it with "
        f"`python tests/e2e/test_bundled_traces.py --update {name}`"
    )
    golden = json.loads(path.read_text(encoding="utf-8"))
    diff = differences(golden, report)
    assert not diff, (
        f"{name}: the report differs from {path.relative_to(ROOT)} in "
        f"{len(diff)} places (if the model changed on purpose, regenerate with "
        f"`python tests/e2e/test_bundled_traces.py --update {name}`):\n  " + "\n  ".join(diff[:40])
    )


def test_golden_files_have_traces():
    """No stale goldens: every tests/golden/*.json is a bundled trace's, on its own chip or on
    one of OTHER_CHIPS; and the other chips' goldens are for other chips than the trace's."""
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(GOLDENS)
    for name in GOLDENS:
        stem, chip = split_name(name)
        assert stem in BUNDLED and chip != load(TRACES / f"{stem}.yaml").chip, name


@pytest.mark.parametrize("stem", BUNDLED)
def test_validates(stem):
    result = CliRunner().invoke(main, ["validate", str(TRACES / f"{stem}.yaml")])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"{TRACES / stem}.yaml: ok")


# -- values --------------------------------------------------------------------------------------


def run(stem: str, **kw):
    program = load(TRACES / f"{stem}.yaml")
    return run_program(program, load_chip(program.chip), **kw)


def f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU in float64."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def assert_bf16_close(got, want):
    """Within bf16 rounding of an fp32 result (plus a little for fp32 summation order)."""
    np.testing.assert_allclose(f32(got), want, rtol=2.0**-8, atol=1e-3)


def test_gemm_double_buffered_values():
    r = run("gemm_double_buffered")
    x = f32(r.tensor("xT")).T
    w = f32(r.tensor("w"))
    y = r.tensor("y")
    assert y.shape == (128, 2048) and y.dtype.name == "bfloat16"
    assert_bf16_close(y, x @ w)


def test_softmax_rows_values():
    r = run("softmax_rows")
    x = r.tile("main", "x").astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    y = r.tile("main", "y")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


def test_matmul_gelu_values():
    r = run("matmul_gelu")
    x, w = f32(r.tile("main", "x_t")), f32(r.tile("main", "w_t"))
    acc = x.T.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(r.tile("main", "acc"), acc, rtol=1e-5, atol=1e-4)
    assert_bf16_close(r.tile("main", "o_t"), gelu(r.tile("main", "acc")))


def test_two_streams_values():
    r = run("two_streams")
    np.testing.assert_array_equal(f32(r.tensor("x")), f32(r.tensor("host_x")))
    np.testing.assert_array_equal(f32(r.tensor("w")), f32(r.tensor("host_w")))
    h = r.tensor("h")
    assert_bf16_close(h, gelu(f32(r.tensor("x"))))
    want = f32(h)[:, 0:128].T @ f32(r.tensor("w"))
    assert_bf16_close(r.tensor("y"), want)
    np.testing.assert_array_equal(f32(r.tensor("host_y")), f32(r.tensor("y")))


def test_two_streams_overlap():
    """project (core 2) runs while more_work (core 0) is running: the two streams overlap."""
    s = run("two_streams").summary
    t = {k: v["ns"] for k, v in s["timings"].items()}
    assert t["start->consumer_done"] < t["start->producer_done"] == s["total_time_ns"]
    assert t["start->h_ready"] + t["h_ready->consumer_done"] == pytest.approx(
        t["start->consumer_done"]
    )
    assert set(s["engines"]) == {
        f"core{c}.{e}" for c in (0, 2) for e in ("tensor", "vector", "scalar", "gpsimd")
    }


# -- regenerating ----------------------------------------------------------------------------------


def _update(names: list[str]) -> int:
    """Rewrite the goldens named (a stem: every golden of that trace; stem@chip: one), or all."""
    chosen, unknown = [], []
    for name in names:
        match = [g for g in GOLDENS if g == name or split_name(g)[0] == name]
        (chosen.extend(match) if match else unknown.append(name))
    if unknown:
        print(
            f"error: no golden {', '.join(unknown)}; goldens: {', '.join(GOLDENS)} (a golden "
            f"on another chip needs an entry in OTHER_CHIPS first)",
            file=sys.stderr,
        )
        return 2
    for name in dict.fromkeys(chosen) if names else GOLDENS:
        path = write_golden(name, cli_json(name))
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "--update":
        print(__doc__)
        print(
            "usage: python tests/e2e/test_bundled_traces.py --update [STEM[@CHIP] ...]",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(_update(args[1:]))
