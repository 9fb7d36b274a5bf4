"""The error types users see. The CLI prints `error: <message>` on one line for any of them."""


class TrnsimError(Exception):
    """Base of every user-facing error; the CLI prints str(e) on one line and exits 2."""


class TraceError(TrnsimError):
    """A trace file is malformed: the message names the file, the line and the key."""


class SimError(TrnsimError):
    """An instruction cannot execute (bounds, capacity, shapes, dtypes, limits). `line` is the
    trace line of the instruction at fault when known (0 otherwise); the planner puts it, with
    the trace file, at the front of the message."""

    def __init__(self, message: str = "", line: int = 0):
        super().__init__(message)
        self.line = line


class DeadlockError(SimError):
    """The event queue ran dry while some queue still waits on a semaphore."""


class OutOfMemoryError(SimError):
    """A device allocation does not fit: the message says what was requested, what is free and
    the largest free block (torch.cuda.OutOfMemoryError's counterpart). A SimError, as the HBM
    allocator's errors were before the device API had its own."""
