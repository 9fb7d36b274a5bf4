"""The runtime's errors, of CUDA's kinds, so that a caller can tell a bad argument (refused at
the call, nothing enqueued) from an error inside the device (raised by a later synchronizing
call). Both are `TrnsimError`s: the CLI prints them on one line."""

from trnsim.errors import TrnsimError


class InvalidValueError(TrnsimError):
    """An argument of a runtime call is wrong (CUDA's cudaErrorInvalidValue): a size that is not
    a non-negative int, an unknown dtype, a view passed to `free`, a kernel's tensor unbound or
    of a shape it cannot use. Raised by the call itself; nothing was enqueued or changed."""


class UseAfterFreeError(InvalidValueError):
    """A call uses memory already freed (a buffer, a view of it, or a graph that captured it):
    CUDA's invalid-value error for a freed pointer, raised at the call as any bad argument."""
