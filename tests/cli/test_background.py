"""`cli.background`: a check run in a forked child beside the parent's work, with the value,
the error and its precedence as if it had run first in-process."""

import os
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import trnsim.cli.traces as traces_cmd
from trnsim.cli import main
from trnsim.cli.background import Background, ChildKilled, can_fork
from trnsim.errors import DeadlockError, SimError

TRACES = Path(__file__).resolve().parents[2] / "traces"


@pytest.fixture
def _fork_possible():
    """Skip where `Background` would run in-process: no fork or one CPU, or a thread alive, as
    autograd's device thread stays after a test that ran backward on `neuron` earlier in this
    process (checked when the test runs, not when the file is collected)."""
    if not can_fork():
        pytest.skip("no fork, a single CPU, or another thread alive: Background runs in-process")


forks = pytest.mark.usefixtures("_fork_possible")


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
def test_an_early_error_stops_the_parents_work_where_it_polls():
    start = time.monotonic()
    with pytest.raises(SimError, match="bad"):
        with Background(_fail) as bg:
            while time.monotonic() - start < 60:  # the parent's long work
                sum(range(1000))
                bg.poll()
    assert time.monotonic() - start < 30


@forks
def test_a_child_that_fails_at_once_never_kills_the_parent():
    """The handler is installed before the fork: a SIGUSR1 sent before the parent runs on
    must find it (the default action would end the parent)."""
    for _ in range(30):
        with pytest.raises(SimError, match="bad"):
            with Background(_fail):
                pass


@forks
def test_the_signal_only_sets_a_flag_the_error_comes_from_poll_or_exit():
    with pytest.raises(SimError, match="bad"):
        with Background(_fail) as bg:
            deadline = time.monotonic() + 30
            while not bg._flagged and time.monotonic() < deadline:
                time.sleep(0.01)  # the signal arrives here, and raises nothing
            assert bg._flagged
    assert signal.getsignal(signal.SIGUSR1) is not bg._on_signal  # restored


@forks
def test_a_child_killed_by_a_signal_is_reported_not_rerun():
    parent, calls = os.getpid(), []

    def bomb():
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would
        calls.append(1)

    with pytest.raises(ChildKilled, match=r"the race check.*killed by SIGKILL.*--no-race-check"):
        with Background(bomb, what="the race check") as bg:
            bg.result()
    assert calls == []  # not run again in the parent


@forks
def test_an_early_error_inside_a_simpy_process_comes_out_as_itself():
    """SimPy re-raises a copy of what a process raised (type(e)(*e.args)): the interruption
    must survive the copy."""
    import simpy

    def busy(env, bg):
        start = time.monotonic()
        while time.monotonic() - start < 60:
            sum(range(1000))
            bg.poll()
        yield env.timeout(1)

    env = simpy.Environment()
    with pytest.raises(SimError, match="t.yaml:3: bad"):
        with Background(_fail) as bg:
            env.process(busy(env, bg))
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


@forks
def test_run_stops_the_simulation_where_it_reports_progress(monkeypatch, tmp_path):
    """The simulation polls the forked check in its progress callback: a race found by the
    child ends a simulation that would otherwise go on (here, one that only polls)."""
    text = (TRACES / "softmax_rows.yaml").read_text().replace("wait: {red: 1}, ", "")
    path = tmp_path / "sm.yaml"
    path.write_text(text)
    polls = []

    def endless(program, cfg, mode, progress=None, check=False):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            polls.append(1)
            progress(0, len(polls))
            time.sleep(0.001)
        raise AssertionError("the simulation was not stopped")

    monkeypatch.setattr(traces_cmd, "run_program", endless)
    result = _run(monkeypatch, path, fork_from=0)
    assert result.exit_code == 2 and "race:" in result.stderr, result.output
    assert polls  # it ran, and was stopped from its progress callback
