"""PyTorch's own op tests on `neuron`: every op_db entry's sample inputs run on the device and
on CPU, compared (PyTorch's default tolerances, NaNs equal), forward at float32 and at one
other dtype, and the gradients at float32 (docs/torch.md, "Conformance with PyTorch's op
tests"). Each test runs in a worker process (pool.py), so a sample that crashes fails its op.

By default the forward float32 test of each entry runs; TRNSIM_CONFORMANCE=full adds the other
dtype and the backward ones. What fails today is a strict xfail (known_failures.py, written by
`python -m tests.torch.conformance.survey`); what is not run is in exclusions.py."""

import atexit
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db needs it

from tests.torch.conformance.exclusions import EXCLUSIONS  # noqa: E402
from tests.torch.conformance.known_failures import KNOWN_FAILURES  # noqa: E402
from tests.torch.conformance.pool import Worker  # noqa: E402

FULL = os.environ.get("TRNSIM_CONFORMANCE", "") == "full"

WORKER = Worker()  # one per pytest process (and per xdist worker), reused by every test
atexit.register(WORKER.close)
PLAN = WORKER.ask({"plan": True})["plan"]


def _cases():
    for entry in PLAN:
        key = entry["key"]
        if entry["excluded"]:
            yield pytest.param(key, "-", id=key, marks=pytest.mark.skip(entry["excluded"]))
            continue
        for phase in entry["phases"]:
            marks = []
            if not FULL and phase != entry["phases"][0]:  # the first: forward, float32
                marks.append(pytest.mark.skip("TRNSIM_CONFORMANCE=full runs it"))
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
    assert not set(EXCLUSIONS) - set(phases)
    stale = [(k, p) for k, ps in KNOWN_FAILURES.items() for p in ps if p not in phases.get(k, ())]
    assert not stale, "rerun python -m tests.torch.conformance.survey"
    assert not set(KNOWN_FAILURES) & set(EXCLUSIONS)


def test_every_entry_without_a_cpu_kernel_is_excluded_with_its_reason():
    assert [e["key"] for e in PLAN if not e["phases"] and not e["excluded"]] == []
