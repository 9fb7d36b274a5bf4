"""The error types users see. The CLI prints `error: <message>` on one line for any of them."""


class TrnsimError(Exception):
    """Base of every user-facing error; the CLI prints str(e) on one line and exits 2."""


class TraceError(TrnsimError):
    """A trace file is malformed: the message names the file, the line and the key."""


class SimError(TrnsimError):
    """An instruction cannot execute (bounds, capacity, shapes, dtypes, limits)."""


class DeadlockError(SimError):
    """The event queue ran dry while some queue still waits on a semaphore."""
