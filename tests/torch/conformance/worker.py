"""A conformance worker process: reads requests (one JSON object a line) on stdin and answers
on the stdout it started with; the op's own prints go to stderr. Its own process, so that a
sample that kills it (SIGSEGV) fails that entry only (pool.py notices and starts another).

Requests: {"plan": true} -> {"plan": [...]}; {"key": K, "phase": P} -> {"progress": i, "of": n}
lines, then {"result": {"ok": bool, ...}} (the first failing sample's); with "all": true every
sample runs, each failing one sent as {"failure": {...}} as it fails. {"selftest": "segv"} or
"hang" crashes or hangs (the pool's own test); torch and op_db are imported at the first other
request."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
import traceback
import warnings


def main() -> None:
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints of ops and libraries go to stderr, not into the answers
    faulthandler.enable()  # a crash prints the Python stack on stderr, for the pool to quote
    warnings.simplefilter("ignore")

    def send(obj) -> None:
        answer.write(json.dumps(obj) + "\n")

    send({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("selftest") == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if request.get("selftest") == "hang":
            time.sleep(3600)
        compare = _compare()
        if request.get("plan"):
            send({"plan": compare.plan()})
            continue
        key, phase, everything = request["key"], request["phase"], request.get("all", False)
        print(f"--- {key} {phase}", file=sys.stderr, flush=True)

        def failed(e: compare.SampleFailure) -> None:
            send({"failure": failure(e)})

        try:
            progress = lambda i, n: send({"progress": i, "of": n})  # noqa: E731
            counts = compare.run(key, phase, progress, failed if everything else None)
            result = {"ok": True, **counts}  # the pool counts the failures sent
        except compare.SampleFailure as e:
            result = {"ok": False, **failure(e)}
        except Exception as e:  # making the samples failed, say
            result = {"ok": False, "kind": "harness", "error": type(e).__name__}
            result |= {"summary": f"harness: {compare.one_line(e)}"}
            result["detail"] = traceback.format_exc()
        send({"result": result})


def _compare():
    """The comparison module, imported once (torch, trnsim.torch, op_db: seconds)."""
    import torch

    torch.set_num_threads(1)  # several workers share 2 cores; small samples gain nothing
    from tests.torch.conformance import compare

    return compare


def failure(e) -> dict:
    """A SampleFailure as the pool reads it."""
    cause = "".join(traceback.format_exception(e.error)[-12:])
    return {"kind": e.side, "error": type(e.error).__name__, "summary": e.summary,
            "detail": f"{e}\n{cause}"}  # fmt: skip


if __name__ == "__main__":
    main()
