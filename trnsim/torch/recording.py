"""Where the shim tells an active recording (`trnsim.torch.record`) what the device ran: the
op timer (`timing`: ops, copies, the host waiting) and `torch.neuron`'s streams and events
(`module`) call `active`'s methods while a `with trnsim.torch.record(...)` block runs."""

active = None  # the `record.Recording` in progress, or None
