"""A check that runs beside the simulation: `trnsim run`'s race check in a forked process.

The race check of a large written-out trace costs about as much as simulating it (1.7 s of a
100,000-instruction trace's 4.6 s here), and the two need nothing from each other: on a machine
with a second core, a child process forked after loading checks while the parent simulates.
What the user sees does not change: the check's warnings are printed before the report, and its
error (a race, a deadlock) is the command's error, whatever the simulation did meanwhile. A child
that finds an error signals the parent (SIGUSR1). The handler, installed before the fork (a
child that fails at once must not find the default action, which kills the parent), only sets a
flag; the parent's work calls `poll()` now and then (the simulation, where it reports progress),
which raises the error there. A child killed by a signal (the kernel's out-of-memory killer,
say) is reported as such: running its check again in the parent would repeat what killed it. A
child that exits without an answer (its value could not be pickled) has the check rerun here.

Where forking is not possible or not worth it (no `os.fork`, one CPU, other threads alive, a
small check) the check simply runs first, in-process.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from trnsim.errors import TrnsimError

__all__ = ["Background", "Interrupted", "ChildKilled"]


class ChildKilled(TrnsimError):
    """The forked check was killed by a signal before it answered."""


class Interrupted(BaseException):
    """Raised in the parent, wherever it is, when the child reports an error: a BaseException,
    so no `except Exception` on the way re-wraps it; `Background.__exit__` unwraps it."""

    def __init__(self, error: BaseException):
        super().__init__(error)  # (SimPy re-raises a copy, type(e)(*e.args): keep it in args)
        self.error = error


def can_fork() -> bool:
    """A fork is safe and useful: POSIX fork, a second CPU for this process, no other thread
    (a thread's locks would be copied held)."""
    if not hasattr(os, "fork") or not hasattr(signal, "SIGUSR1"):
        return False
    if threading.active_count() > 1 or threading.current_thread() is not threading.main_thread():
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cpus or 1) > 1


class Background:
    """`fn()` run in a forked child from construction on (or, when `fork` is false or
    `can_fork()` is not, run right away in-process); `result()` is its value, or raises what it
    raised. Use as a context manager around the parent's own work, so that the child's early
    error and the parent's signal handler are dealt with on every way out; call `poll()` in
    that work to stop it early when the child has failed.

    `what` names the check in the message when its process is killed."""

    def __init__(self, fn: Callable[[], Any], fork: bool = True, what: str = "the check"):
        self._fn, self._what = fn, what
        self._done: tuple | None = None
        self._old_handler = None
        self._flagged = False
        if not (fork and can_fork()):
            self._done = _outcome(fn)
            return
        r, w = os.pipe()
        sys.stdout.flush()  # nothing buffered is written twice
        sys.stderr.flush()
        self._old_handler = signal.signal(signal.SIGUSR1, self._on_signal)  # before the fork
        pid = os.fork()
        if pid == 0:  # the child: answer, and never return into the parent's code
            try:
                os.close(r)
                _answer(w, fn)
            finally:
                os._exit(0)
        os.close(w)
        self._pid, self._read = pid, r  # _done stays None until the answer is read

    @property
    def pending(self) -> bool:
        """The child is still at work (its answer not read yet): worth polling for."""
        return self._done is None

    def poll(self) -> None:
        """Raise `Interrupted` (the child's error inside) if the child has signalled a failure;
        cheap otherwise (a flag)."""
        if not self._flagged:
            return
        self._flagged = False
        if self._done is None:
            self._collect()
        if not self._done[0]:
            raise Interrupted(self._done[1])

    def __enter__(self) -> Background:
        return self

    def __exit__(self, kind, value, tb) -> bool:
        """Reap the child. Its error comes before the parent's own (as when the check ran
        first); an interruption (Ctrl-C) kills it instead."""
        if kind is not None and not issubclass(kind, (Exception, Interrupted)):
            self._kill()
            return False
        if self._done is None:
            self._collect()
        self._restore()
        if kind is not None and issubclass(kind, Interrupted):
            raise value.error from None
        if not self._done[0]:
            raise self._done[1] from None
        return False

    def result(self) -> Any:
        """The child's value, waiting for it; its exception re-raised."""
        if self._done is None:
            self._collect()
        self._restore()
        ok, value = self._done
        if ok:
            return value
        raise value

    def _collect(self) -> None:
        """Read the child's answer and reap it; a child killed by a signal is an error of its
        own, one that exited without an answer has `fn` rerun here."""
        data = _read_all(self._read)
        os.close(self._read)
        _, status = os.waitpid(self._pid, 0)
        try:
            self._done = pickle.loads(data)
        except Exception:  # no answer
            if os.WIFSIGNALED(status):
                self._done = (False, _killed(self._what, os.WTERMSIG(status)))
            else:  # it could not pickle its value or exception
                self._done = _outcome(self._fn)

    def _kill(self) -> None:
        if self._done is None:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            os.close(self._read)
            self._done = (False, KeyboardInterrupt())
        self._restore()

    def _on_signal(self, _signum, _frame) -> None:
        """SIGUSR1 from the child: it wrote an error. Only noted: `poll` raises it where the
        parent's work can stop (raising from a handler could land anywhere, mid-write)."""
        self._flagged = True

    def _restore(self) -> None:
        if self._old_handler is not None:
            signal.signal(signal.SIGUSR1, self._old_handler)
            self._old_handler = None


def _killed(what: str, sig: int) -> ChildKilled:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    why = " (by the out-of-memory killer, most likely)" if sig == signal.SIGKILL else ""
    return ChildKilled(
        f"{what}, in a process of its own, was killed by {name}{why} before it answered; "
        f"rerun with --no-race-check to skip it, or on a machine with more memory"
    )


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except Exception as e:
        return False, e


def _answer(w: int, fn: Callable[[], Any]) -> None:
    """In the child: run fn, write its pickled outcome, signal the parent if it failed."""
    ok, value = _outcome(fn)
    try:
        data = pickle.dumps((ok, value))
    except Exception:  # an unpicklable value or exception: the parent reruns fn
        return
    view = memoryview(data)
    while view:  # (a pipe: the parent reads it, no file is written)
        view = view[os.write(w, view) :]
    os.close(w)
    if not ok:
        os.kill(os.getppid(), signal.SIGUSR1)


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
