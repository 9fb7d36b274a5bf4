"""Run every phase of every op_db entry (the full suite) in worker processes, print the counts
and rewrite known_failures.py from what failed: `python -m tests.torch.conformance.survey`.
Run it after fixing ops (the strict xfails that then pass say which) or upgrading PyTorch.

Options: -j N workers (default 2), --json FILE (every result and its time), --no-write, and
entry keys to run only those (known_failures.py is then updated for them alone)."""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
from collections import Counter
from pathlib import Path

from tests.torch.conformance.exclusions import RANDOM
from tests.torch.conformance.pool import START_TIMEOUT, Worker

HERE = Path(__file__).resolve().parent
OUT = HERE / "known_failures.py"

HEADER = '''"""What the conformance suite finds failing today, per entry and phase: each test here is a
strict xfail (fixing the op makes it fail, telling you to remove its line). Written by
`python -m tests.torch.conformance.survey`; the line is the first failing sample's error."""

# fmt: off
KNOWN_FAILURES: dict[str, dict[str, str]] = {
'''


def run_all(items: list[tuple[str, str]], jobs: int, log=print) -> dict:
    """{(key, phase): result with its "seconds"}, `jobs` workers in parallel."""
    todo: queue.Queue = queue.Queue()
    for item in items:
        todo.put(item)
    results: dict = {}
    lock = threading.Lock()

    def work() -> None:
        worker = Worker()
        try:
            while True:
                try:
                    key, phase = todo.get_nowait()
                except queue.Empty:
                    return
                start = time.monotonic()
                result = worker.ask({"key": key, "phase": phase, "all": True})
                result["seconds"] = round(time.monotonic() - start, 3)
                with lock:
                    results[key, phase] = result
                    mark = "ok" if result["ok"] else f"FAIL {result['summary']}"
                    log(f"[{len(results)}/{len(items)}] {key} {phase} {mark}")
        finally:
            worker.close()

    threads = [threading.Thread(target=work) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def write(failures: dict[str, dict[str, str]]) -> None:
    lines = [HEADER]
    for key in sorted(failures):
        lines.append(f"    {key!r}: {{\n")
        for phase, summary in sorted(failures[key].items()):
            lines.append(f"        {phase!r}: {summary!r},\n")
        lines.append("    },\n")
    lines.append("}\n# fmt: on\n")
    OUT.write_text("".join(lines), encoding="utf-8")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", help="entries to run (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--json", help="write every result here")
    parser.add_argument("--no-write", action="store_true", help="leave known_failures.py")
    parser.add_argument("-q", "--quiet", action="store_true", help="no line per test")
    args = parser.parse_args(argv)

    start = time.monotonic()
    planner = Worker()
    plan = planner.ask({"plan": True}, timeout=START_TIMEOUT)["plan"]
    planner.close()
    chosen = [e for e in plan if not args.keys or e["key"] in args.keys]
    unknown = set(args.keys) - {e["key"] for e in plan}
    if unknown:
        raise SystemExit(f"not in op_db: {sorted(unknown)}")
    items = [
        (e["key"], p)
        for e in chosen
        if not e["excluded"]
        for p in e["phases"]
        if p not in e["excluded_phases"]
    ]
    results = run_all(items, args.jobs, log=(lambda s: None) if args.quiet else print)

    failures: dict[str, dict[str, str]] = {}
    if args.keys:  # update the entries run, keep the others
        from tests.torch.conformance.known_failures import KNOWN_FAILURES

        failures = {k: dict(v) for k, v in KNOWN_FAILURES.items() if k not in args.keys}
    for (key, phase), r in results.items():
        if not r["ok"]:
            failures.setdefault(key, {})[phase] = r["summary"]

    report(chosen, results, time.monotonic() - start, args.jobs)
    if args.json:
        rows = [{"key": k, "phase": p, **r} for (k, p), r in sorted(results.items())]
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if not args.no_write:
        write(failures)
        print(f"wrote {OUT.relative_to(HERE.parents[2])}: {len(failures)} entries")


def kind_of(result: dict) -> str:
    """crash, timeout, wrong values, wrong device, NotImplementedError, internal error."""
    if result["kind"] in ("crash", "timeout", "harness"):
        return result["kind"]
    if result["kind"] in ("values differ", "wrong device", "cpu only", "cpu differs from itself"):
        return {"values differ": "wrong values"}.get(result["kind"], result["kind"])
    if result["error"] == "NotImplementedError":
        return "NotImplementedError"
    if result["error"] == "RuntimeError":
        return "RuntimeError"
    return "internal error"


def report(plan: list[dict], results: dict, seconds: float, jobs: int) -> None:
    excluded = [e for e in plan if e["excluded"]]
    alone = sum(len(e["excluded_phases"]) for e in plan if not e["excluded"])
    print(f"\n{len(plan)} op_db entries: {len(plan) - len(excluded)} run, "
          f"{len(excluded)} excluded (and {alone} phases alone); "
          f"{len(results)} tests in {seconds:.0f} s on {jobs} workers")  # fmt: skip
    group = {}
    for e in plan:
        for p in e["phases"]:
            group[e["key"], p] = "backward float32" if p.startswith("backward") else "forward"
        if e["phases"]:
            group[e["key"], e["phases"][0]] = "forward main dtype"
    per_phase: dict[str, Counter] = {}
    for item, r in results.items():
        per_phase.setdefault(group[item], Counter())["passed" if r["ok"] else "failed"] += 1
    names = {"forward": "forward other dtype"}
    for g in ("forward main dtype", "forward", "backward float32"):
        c = per_phase.get(g, Counter())
        print(f"  {names.get(g, g):20} {c['passed']:4} passed {c['failed']:4} failed")
    keys_failing = {k for (k, _), r in results.items() if not r["ok"]}
    print(f"  entries with a failure: {len(keys_failing)}")
    kinds = Counter(kind_of(r) for r in results.values() if not r["ok"])
    print("  failures by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    rand = Counter(r["ok"] for (k, _), r in results.items() if k in RANDOM)
    print(f"  random entries' tests (same seed on both sides): {rand[True]} passed, "
          f"{rand[False]} failed")  # fmt: skip
    vacuous = sorted(f"{k} {p}" for (k, p), r in results.items() if r["ok"] and not r["compared"])
    if vacuous:
        print(f"  passed with no sample compared ({len(vacuous)}): {', '.join(vacuous)}")
    slow = sorted(results.items(), key=lambda kv: -kv[1]["seconds"])[:10]
    print("  slowest: " + ", ".join(f"{k} {p} {r['seconds']:.1f}s" for (k, p), r in slow))


if __name__ == "__main__":
    main()
