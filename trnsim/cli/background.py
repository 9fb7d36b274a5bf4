"""A check that runs beside the simulation: `trnsim run`'s race check in a forked process.

The race check of a large written-out trace costs about as much as simulating it (1.7 s of a
100,000-instruction trace's 4.6 s here), and the two need nothing from each other: on a machine
with a second core, a child process forked after loading checks while the parent simulates.
What the user sees does not change: the check's warnings are printed before the report, and its
error (a race, a deadlock) is the command's error, whatever the simulation did meanwhile. A child
that finds an error signals the parent (SIGUSR1), which stops simulating at once and raises it;
a child that dies without an answer has the check rerun in the parent.

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

__all__ = ["Background", "Interrupted"]


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
    error and the parent's signal handler are dealt with on every way out."""

    def __init__(self, fn: Callable[[], Any], fork: bool = True):
        self._fn = fn
        self._done: tuple | None = None
        self._old_handler = None
        if not (fork and can_fork()):
            self._done = _outcome(fn)
            return
        r, w = os.pipe()
        sys.stdout.flush()  # nothing buffered is written twice
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: answer, and never return into the parent's code
            try:
                os.close(r)
                _answer(w, fn)
            finally:
                os._exit(0)
        os.close(w)
        self._pid, self._read = pid, r  # _done stays None until the answer is read
        self._old_handler = signal.signal(signal.SIGUSR1, self._on_error)

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
        """Read the child's answer (or rerun `fn` here if it died without one) and reap it."""
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the answer is read here, not raised
        data = _read_all(self._read)
        os.close(self._read)
        os.waitpid(self._pid, 0)
        try:
            self._done = pickle.loads(data)
        except Exception:  # no answer: the child was killed or could not pickle it
            self._done = _outcome(self._fn)

    def _kill(self) -> None:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        if self._done is None:
            os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            os.close(self._read)
            self._done = (False, KeyboardInterrupt())
        self._restore()

    def _on_error(self, _signum, _frame) -> None:
        """SIGUSR1 from the child: it wrote an error; stop the parent's work with it (unless
        its answer was unreadable and the rerun here succeeded)."""
        self._collect()
        if not self._done[0]:
            raise Interrupted(self._done[1])

    def _restore(self) -> None:
        if self._old_handler is not None:
            signal.signal(signal.SIGUSR1, self._old_handler)
            self._old_handler = None


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
