"""HBM: the chip's device memory, an address space of `stacks x stack_capacity` bytes.

The stack of an address is `address // stack_capacity`; a tensor never straddles two stacks, so
the DMA model can charge a transfer's HBM traffic to one stack per endpoint. Physical cores
`[s * cores_per_stack, (s + 1) * cores_per_stack)` have stack `s` as their home stack.

The allocator is first-fit over address-sorted free lists (one per stack), with freed blocks
coalesced with their free neighbours. Sizes are rounded up to `cfg.hbm.alignment`, so every
block (and so every address handed out) is aligned. There is no backing store here: the caller
builds the `Buffer`, and `new_array` gives it a numpy array in functional mode and None in timing
mode, so models far larger than this machine's RAM can be declared.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from trnsim.config import ChipConfig
from trnsim.errors import SimError
from trnsim.units import fmt_bytes


class Hbm:
    """The chip's HBM stacks and their allocator. All sizes and addresses are in bytes."""

    def __init__(self, cfg: ChipConfig, functional: bool):
        h = cfg.hbm
        self.functional = functional
        self.stacks = h.stacks
        self.stack_capacity = h.stack_capacity
        self.cores_per_stack = h.cores_per_stack
        self.alignment = max(1, h.alignment)
        self.capacity = h.stacks * h.stack_capacity
        # usable span of a stack: whole alignment units from the stack's base (which is aligned
        # when the capacity is a multiple of the alignment, as every real capacity is)
        self._span = h.stack_capacity - h.stack_capacity % self.alignment
        # per stack: sorted block starts, and start -> size
        self._starts: list[list[int]] = []
        self._sizes: list[dict[int, int]] = []
        for s in range(self.stacks):
            base = s * self.stack_capacity
            self._starts.append([base] if self._span else [])
            self._sizes.append({base: self._span} if self._span else {})
        self._blocks: dict[int, tuple[int, str]] = {}  # address -> (rounded size, name)
        self.used = 0
        """Bytes allocated now (sizes rounded up to the alignment)."""
        self.peak = 0
        """The largest `used` seen so far, in bytes."""

    # -- queries -------------------------------------------------------------------------------

    @property
    def free_bytes(self) -> int:
        """Bytes not allocated, over all stacks."""
        return sum(sum(sz.values()) for sz in self._sizes)

    @property
    def largest_free_block(self) -> int:
        """The largest single allocation that can succeed now, in bytes."""
        return max((max(sz.values(), default=0) for sz in self._sizes), default=0)

    def stack_of(self, address: int) -> int:
        """The HBM stack holding byte `address`."""
        if not 0 <= address < self.capacity:
            raise SimError(
                f"HBM address {address:#x} is outside the {fmt_bytes(self.capacity)} "
                f"of device memory"
            )
        return address // self.stack_capacity

    def home_stack(self, core: int) -> int:
        """The stack nearest physical core `core` (each stack serves `cores_per_stack` cores)."""
        return min(core // self.cores_per_stack, self.stacks - 1)

    def size_of(self, address: int) -> int:
        """The (rounded) size of the block allocated at `address`."""
        return self._blocks[address][0]

    def new_array(self, shape: tuple[int, ...], np_dtype) -> np.ndarray | None:
        """A zeroed backing array for a tensor in functional mode; None in timing mode."""
        return np.zeros(shape, dtype=np_dtype) if self.functional else None

    # -- allocation ----------------------------------------------------------------------------

    def allocate(self, nbytes: int, name: str, stack: int | None = None) -> int:
        """Reserve `nbytes` (at least one alignment unit) and return the block's address.

        First fit in `stack` (default: stack 0), then in the other stacks in order. Raises
        SimError when no free block is large enough.
        """
        if nbytes < 0:
            raise SimError(f"cannot allocate {name}: negative size {nbytes}")
        if stack is not None and not 0 <= stack < self.stacks:
            raise SimError(
                f"cannot allocate {name}: stack {stack} is out of range 0..{self.stacks - 1}"
            )
        a = self.alignment
        size = max(a, -(-nbytes // a) * a)
        first = 0 if stack is None else stack
        for s in [first] + [x for x in range(self.stacks) if x != first]:
            addr = self._take(s, size)
            if addr is not None:
                self._blocks[addr] = (size, name)
                self.used += size
                self.peak = max(self.peak, self.used)
                return addr
        raise SimError(
            f"cannot allocate {name}: {fmt_bytes(nbytes)} requested, "
            f"{fmt_bytes(self.free_bytes)} free, largest free block "
            f"{fmt_bytes(self.largest_free_block)}"
        )

    def free(self, address: int) -> None:
        """Release the block at `address`, merging it with free neighbours in its stack."""
        if address not in self._blocks:
            raise SimError(f"free of HBM address {address:#x}, which is not allocated")
        size, _ = self._blocks.pop(address)
        self.used -= size
        s = address // self.stack_capacity
        starts, sizes = self._starts[s], self._sizes[s]
        i = bisect_left(starts, address)
        start, end = address, address + size
        if i < len(starts) and starts[i] == end:  # the next block is free: absorb it
            end += sizes.pop(starts.pop(i))
        if i > 0 and starts[i - 1] + sizes[starts[i - 1]] == start:  # the previous one too
            start = starts[i - 1]
            sizes[start] = end - start
        else:
            starts.insert(i, start)
            sizes[start] = end - start

    def _take(self, s: int, size: int) -> int | None:
        """First fit of `size` bytes in stack `s`: the lowest free block that is large enough."""
        starts, sizes = self._starts[s], self._sizes[s]
        for i, start in enumerate(starts):
            have = sizes[start]
            if have >= size:
                del sizes[start]
                if have > size:  # the rest stays free, in the same place in the order
                    starts[i] = start + size
                    sizes[start + size] = have - size
                else:
                    del starts[i]
                return start
        return None
