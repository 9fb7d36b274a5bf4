"""The program's exit (`app._exit`): sys.exit's statuses and messages, atexit hooks, flushed
output, without the interpreter's teardown."""

import subprocess
import sys

import pytest

PRELUDE = (
    "import atexit, sys\n"
    "from trnsim.cli.app import _exit\n"
    "atexit.register(lambda: print('hook', end=''))\n"
    "print('out', end='')\n"  # left in the buffer: _exit must flush it
)


@pytest.mark.parametrize(
    "code, status, stderr",
    [("None", 0, ""), ("0", 0, ""), ("2", 2, ""), ("'bye'", 1, "bye\n")],
)
def test_exit_status_output_and_hooks(code, status, stderr):
    r = subprocess.run(
        [sys.executable, "-c", PRELUDE + f"_exit({code})\nprint('not reached')"],
        capture_output=True,
        text=True,
    )
    assert (r.returncode, r.stdout, r.stderr) == (status, "outhook", stderr)


def test_exit_with_other_threads_is_the_usual_one():
    """A live non-daemon thread is joined, as sys.exit does (os._exit would drop its work)."""
    body = (
        "import threading, time\n"
        "t = threading.Thread(target=lambda: (time.sleep(0.2), print('thread', end='')))\n"
        "t.start()\n"
        "_exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (3, "outthreadhook")
