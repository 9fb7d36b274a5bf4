"""The parent's side of a conformance worker (worker.py): starts it, sends it one entry's phase
at a time and reads the answer, with a deadline. A worker that dies (a SIGSEGV in a sample) or
overruns fails that request with what it was doing and the end of its stderr, and the next
request gets a new worker. Only the standard library here: op_db stays out of pytest's process."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# s per entry's phase: the slowest takes under 10 s; a hang must not eat CI's 90 minutes
TIMEOUT = float(os.environ.get("TRNSIM_CONFORMANCE_TIMEOUT", "120"))
START_TIMEOUT = 300.0  # s to import torch, trnsim.torch and op_db (at the first request)


class Worker:
    """One worker process, started on first use and again after it died."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.stderr = None
        self.buffer = b""

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["PYTHONFAULTHANDLER"] = "1"
        self.stderr = tempfile.TemporaryFile()
        self.buffer = b""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.torch.conformance.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=ROOT,
            env=env,
        )
        ready = self._read(time.monotonic() + START_TIMEOUT)
        if not isinstance(ready, dict) or not ready.get("ready"):
            tail = self._stop()
            raise RuntimeError(f"the conformance worker did not start:\n{tail}")

    def _read(self, deadline: float) -> dict | str:
        """The next answer, or "died" when the worker closed its end, or "timeout" when the
        deadline passed (it is still running then)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return "timeout"
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return "died"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _stop(self) -> str:
        """Kill the worker; the last 40 lines of its stderr since the request it was on."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        tail = text[text.rfind("\n--- ") + 1 :].splitlines()[-40:]
        self.stderr.close()
        self.proc = None
        return "\n".join(tail)

    def ask(self, request: dict, timeout: float = TIMEOUT) -> dict:
        """Send one request; its result (for a phase) or plan."""
        if self.proc is not None and self.proc.poll() is not None:
            self._stop()  # died between requests
        if self.proc is None:
            self._start()
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        at, failures = None, []
        while True:
            answer = self._read(deadline)
            if isinstance(answer, str):
                died = self._died(request, at, timeout, answer == "timeout")
                return _merge(failures, died) if failures else died
            if "progress" in answer:
                at = answer
            elif "failure" in answer:
                failures.append(answer["failure"])
            elif "result" in answer:
                return _merge(failures, answer["result"]) if failures else answer["result"]
            else:
                return answer

    def _died(self, request: dict, at: dict | None, timeout: float, hung: bool) -> dict:
        """The failed result of a request whose worker died or hung (it is killed)."""
        code = None
        if not hung:
            try:  # its answers' pipe closes as it exits
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                hung = True
        tail = self._stop()
        where = f"sample {at['progress']} of {at['of']}" if at else "making the samples"
        if hung:
            summary = f"{where}: timeout: no answer in {timeout:.0f} s"
            kind = "timeout"
        else:
            name = f"exit status {code}"
            if code < 0:
                name = signal.Signals(-code).name if -code in signal.valid_signals() else name
            summary = f"{where}: crash: the worker died ({name})"
            kind = "crash"
        detail = f"{request.get('key')} {request.get('phase')}: {summary}\nworker stderr:\n{tail}"
        return {"ok": False, "kind": kind, "error": kind, "summary": summary, "detail": detail}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self._stop()


def _merge(failures: list[dict], result: dict) -> dict:
    """A keep-going run's result: the first failure's, with every failing sample's summary."""
    if "summary" in result:  # a crash, a timeout or a harness error after them
        failures = [*failures, result]
    merged = {**result, **failures[0], "ok": False}
    merged["failures"] = [f["summary"] for f in failures]
    merged["detail"] = "\n\n".join(f["detail"] for f in failures)
    return merged
