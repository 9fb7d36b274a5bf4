"""PyTorch's own op tests on `neuron`: every op_db entry's sample inputs run on the device and
on CPU, compared (PyTorch's default tolerances, NaNs equal), forward at float32 and at one
other dtype, and the gradients at float32 (docs/torch.md, "Conformance with PyTorch's op
tests"). Each test runs in a worker process (pool.py), so a sample that crashes fails its op.

Every phase runs by default (about 1,800 tests, under 2 minutes on 2 cores);
TRNSIM_CONFORMANCE=quick runs the forward float32 test of each entry only (a third of the time),
TRNSIM_CONFORMANCE=off none. What fails today is a strict xfail (known_failures.py, written by
`python -m tests.torch.conformance.survey`); what is not run is in exclusions.py."""

import atexit
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db needs it

from tests.torch.conformance.exclusions import EXCLUSIONS  # noqa: E402
from tests.torch.conformance.known_failures import KNOWN_FAILURES  # noqa: E402
from tests.torch.conformance.pool import START_TIMEOUT, Worker  # noqa: E402

MODE = os.environ.get("TRNSIM_CONFORMANCE", "full")
if MODE not in ("full", "quick", "off"):
    raise ValueError(f"TRNSIM_CONFORMANCE={MODE!r}: full (the default), quick or off")
if MODE == "off":
    pytest.skip("TRNSIM_CONFORMANCE=off", allow_module_level=True)

WORKER = Worker()  # one per pytest process (and per xdist worker), reused by every test
atexit.register(WORKER.close)
PLAN = WORKER.ask({"plan": True}, timeout=START_TIMEOUT)["plan"]


def _cases():
    for entry in PLAN:
        key = entry["key"]
        if entry["excluded"]:
            yield pytest.param(key, "-", id=key, marks=pytest.mark.skip(entry["excluded"]))
            continue
        for phase in entry["phases"]:
            marks = []
            if phase in entry["excluded_phases"]:
                marks.append(pytest.mark.skip(entry["excluded_phases"][phase]))
            if MODE == "quick" and phase != entry["phases"][0]:  # the first: forward float32
                marks.append(pytest.mark.skip("TRNSIM_CONFORMANCE=quick"))
            summary = KNOWN_FAILURES.get(key, {}).get(phase)
            if summary:
                why = f"known failure: {summary} (fixed? remove it from known_failures.py)"
                marks.append(pytest.mark.xfail(strict=True, reason=why))
            yield pytest.param(key, phase, id=f"{phase}-{key}", marks=marks)


@pytest.mark.parametrize("key, phase", list(_cases()))
def test_op(key, phase):
    result = WORKER.ask({"key": key, "phase": phase})
    if not result["ok"]:
        pytest.fail(f"{key} {phase}: {result['summary']}\n\n{result['detail']}", pytrace=False)


def test_the_lists_name_real_entries():
    """An exclusion or known failure of an entry op_db no longer has (or a phase it no longer
    runs) is stale: PyTorch renamed or dropped it."""
    phases = {e["key"]: set(e["phases"]) for e in PLAN}
    runs = {f"{k} {p}" for k, ps in phases.items() for p in ps}
    assert not set(EXCLUSIONS) - set(phases) - runs  # an entry, or an entry and a phase
    known = {f"{k} {p}" for k, ps in KNOWN_FAILURES.items() for p in ps}
    assert not known - runs, "rerun python -m tests.torch.conformance.survey"
    assert not {k.split()[0] for k in known} & set(EXCLUSIONS)
    assert not known & set(EXCLUSIONS)


def test_every_entry_without_a_cpu_kernel_is_excluded_with_its_reason():
    assert [e["key"] for e in PLAN if not e["phases"] and not e["excluded"]] == []


def test_a_crash_or_a_hang_fails_one_request_and_the_next_gets_a_new_worker():
    worker = Worker()
    try:
        crash = worker.ask({"selftest": "segv", "key": "k", "phase": "p"})
        assert crash["kind"] == "crash" and "SIGSEGV" in crash["summary"], crash
        assert "k p: making the samples: crash: the worker died (SIGSEGV)" in crash["detail"]
        hang = worker.ask({"selftest": "hang"}, timeout=1)
        assert hang["kind"] == "timeout" and "no answer in 1 s" in hang["summary"], hang
        again = worker.ask({"selftest": "segv"})
        assert again["kind"] == "crash"
    finally:
        worker.close()
