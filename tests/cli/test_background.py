"""`cli.background`: a check run in a forked child beside the parent's work, with the value,
the error and its precedence as if it had run first in-process."""

import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import trnsim.cli.traces as traces_cmd
from trnsim.cli import main
from trnsim.cli.background import Background, can_fork
from trnsim.errors import DeadlockError, SimError

TRACES = Path(__file__).resolve().parents[2] / "traces"
forks = pytest.mark.skipif(not can_fork(), reason="no fork or a single CPU here")


@forks
def test_the_value_comes_from_a_child_process():
    parent = os.getpid()
    with Background(os.getpid) as bg:
        child = bg.result()
    assert child != parent


def test_without_fork_it_runs_in_process_at_once():
    calls = []
    bg = Background(lambda: calls.append(1) or 7, fork=False)
    assert calls == [1]  # before result()
    with bg:
        assert bg.result() == 7


def _fail():
    raise SimError("t.yaml:3: bad", line=3)


@forks
def test_the_childs_error_is_re_raised_with_its_type_message_and_fields():
    with pytest.raises(SimError, match="t.yaml:3: bad") as e:
        with Background(_fail) as bg:
            bg.result()
    assert e.value.line == 3


@forks
def test_an_early_error_stops_the_parents_work():
    start = time.monotonic()
    with pytest.raises(SimError, match="bad"):
        with Background(_fail):
            while time.monotonic() - start < 20:  # the parent's long work
                sum(range(1000))
    assert time.monotonic() - start < 10


@forks
def test_an_early_error_inside_a_simpy_process_comes_out_as_itself():
    """SimPy re-raises a copy of what a process raised (type(e)(*e.args)): the interruption
    must survive the copy."""
    import simpy

    def busy(env):
        start = time.monotonic()
        while time.monotonic() - start < 20:
            sum(range(1000))
        yield env.timeout(1)

    env = simpy.Environment()
    env.process(busy(env))
    with pytest.raises(SimError, match="t.yaml:3: bad"):
        with Background(_fail):
            env.run()


@pytest.mark.parametrize("fork", [True, False])
def test_the_check_error_comes_before_the_parents_own(fork):
    def late():
        time.sleep(0.2)
        raise DeadlockError("deadlock: q0")

    with pytest.raises(DeadlockError, match="deadlock: q0"):
        with Background(late, fork=fork):
            raise ValueError("the simulation's own error")


@forks
def test_a_child_that_dies_without_answer_is_rerun_in_the_parent():
    parent = os.getpid()

    def dies_in_child():
        if os.getpid() != parent:
            os._exit(9)
        return "parent"

    with Background(dies_in_child) as bg:
        assert bg.result() == "parent"


# -- trnsim run: the same output whichever way the check runs -------------------------------


def _run(monkeypatch, path, *args, fork_from):
    monkeypatch.setattr(traces_cmd, "FORK_RACE_CHECK", fork_from)
    return CliRunner().invoke(main, ["run", str(path), *args])


@forks
@pytest.mark.parametrize("args", [(), ("--allow-races",)])
def test_run_reports_a_race_the_same_forked_or_not(monkeypatch, tmp_path, args):
    text = (TRACES / "softmax_rows.yaml").read_text().replace("wait: {red: 1}, ", "")
    path = tmp_path / "sm.yaml"
    path.write_text(text)
    inline = _run(monkeypatch, path, *args, fork_from=10**9)
    forked = _run(monkeypatch, path, *args, fork_from=0)
    assert (forked.exit_code, forked.stdout, forked.stderr) == (
        inline.exit_code,
        inline.stdout,
        inline.stderr,
    )
    assert "race:" in forked.stderr and forked.exit_code == (0 if args else 2)


@forks
def test_run_of_a_race_free_trace_is_the_same_forked_or_not(monkeypatch):
    path = TRACES / "gemm_double_buffered.yaml"
    inline = _run(monkeypatch, path, "--json", fork_from=10**9)
    forked = _run(monkeypatch, path, "--json", fork_from=0)
    assert forked.exit_code == 0 and forked.stdout == inline.stdout and forked.stderr == ""
