"""The shim's caching allocator, as torch.cuda has one over cudaMalloc.

Blocks come from the runtime (`Device.malloc`); a block a dead tensor gave back waits in a pool
of its size and the next request of that size takes it without a runtime call. `reserved` is
what the shim holds from the runtime, `allocated` what live tensors use; `empty_cache` gives
the pooled blocks back. Each block keeps the runtime's host copy of its bytes (`raw`, functional
mode) and CPU tensors over them, so an op reads and writes device memory without copying.

A live block can be emptied and regrown under its storage (`free_bytes`, `regrow`), as
`UntypedStorage.resize_(0)` / `resize_(n)` do on a GPU (FSDP2 frees its unsharded parameters so,
`trnsim.torch.wrappers`): the block's device memory goes back to the runtime and counts as freed,
and comes back (a new device buffer, counted as allocated) before the storage is used again.
The storage keeps its host address (a storage's data pointer cannot move), so the block keeps
its host bytes meanwhile: device memory is freed, this machine's RAM is not.

A storage's data_ptr() is the host address of its block's bytes, not the device address
(`buf.address`): PyTorch's native code reads a storage's pointer directly (`byteswap`, DLPack,
...), and a made-up address there would take the process down with a SIGSEGV.
"""

from __future__ import annotations

import torch

from trnsim.errors import TrnsimError
from trnsim.units import fmt_bytes

SMALL = 1 << 20  # requests below this are rounded to ROUND_SMALL, above to ROUND_LARGE
ROUND_SMALL = 512  # torch.cuda's granularity for small blocks
ROUND_LARGE = 1 << 20


def rounded(nbytes: int) -> int:
    """The size of the block serving a request of `nbytes` (never 0)."""
    step = ROUND_SMALL if nbytes < SMALL else ROUND_LARGE
    return max(step, -(-nbytes // step) * step)


class Block:
    """A block of device memory held by the shim: its runtime buffer (the device address is
    `buf.address`), its bytes in this machine's memory (`base`), their host address as a
    storage's data_ptr() (`address`, also `host_ptr`) and CPU tensors over them, one per dtype
    (made on first use)."""

    __slots__ = ("buf", "address", "size", "base", "typed", "host_ptr")

    def __init__(self, buf):
        if buf.raw is None:  # a storage must point at real bytes (module doc)
            buf.device.free(buf)
            raise TrnsimError(
                f"{buf.device.name} holds no values (timing mode): the torch shim needs a "
                f"functional device"
            )
        self.buf, self.size = buf, buf.nbytes
        self.base = torch.from_numpy(buf.raw)  # keeps the bytes alive after Device.free
        self.address = self.host_ptr = self.base.data_ptr()
        self.typed: dict = {}

    def as_dtype(self, dtype: torch.dtype) -> torch.Tensor:
        """The block's bytes as a flat CPU tensor of `dtype` (shared, no copy)."""
        t = self.typed.get(dtype)
        if t is None:
            t = self.typed[dtype] = self.base.view(dtype)
        return t


class CachingAllocator:
    """Blocks of one device, pooled by size; statistics under torch.cuda's names."""

    def __init__(self, device, listeners=None):
        self.device = device  # a trnsim.runtime.Device
        self.listeners = listeners  # told of each block handed out (a recording names it)
        self.pools: dict[int, list[Block]] = {}
        # host data_ptr -> every block held (live, pooled, or emptied: `free_bytes`)
        self.blocks: dict[int, Block] = {}
        self.emptied: set[int] = set()  # host data_ptrs of blocks without device memory
        self.allocated = self.allocated_peak = self.reserved = self.reserved_peak = 0
        self.count = self.count_peak = self.count_total = self.ooms = 0
        self.allocated_total = self.freed_total = self.segments_total = 0
        self.reserved_total = self.reserved_freed = 0

    def alloc(self, nbytes: int) -> Block:
        """A block of at least `nbytes`; raises torch.OutOfMemoryError with the figures."""
        size = rounded(nbytes)
        pool = self.pools.get(size)
        blk = pool.pop() if pool else self._new(size, nbytes)
        self.allocated += size
        self.allocated_total += size
        self.count += 1
        self.count_total += 1
        if self.allocated > self.allocated_peak:
            self.allocated_peak = self.allocated
        if self.count > self.count_peak:
            self.count_peak = self.count
        if self.listeners:
            self.listeners.alloc(blk, nbytes)
        return blk

    def release(self, address: int) -> None:
        """A tensor storage on this block died: pool the block (no runtime call)."""
        blk = self.blocks.get(address)
        if blk is None:
            return
        if address in self.emptied:  # already counted as freed; its device memory is gone
            self.emptied.discard(address)
            del self.blocks[address]
            return
        self.pools.setdefault(blk.size, []).append(blk)
        self.allocated -= blk.size
        self.freed_total += blk.size
        self.count -= 1

    def free_bytes(self, address: int) -> bool:
        """Give the device memory of the live block of storage `address` back to the runtime,
        keeping the block (and its host bytes) for `regrow`: `resize_(0)` of a storage. False
        if `address` is not a live block of this allocator."""
        blk = self.blocks.get(address)
        if blk is None or address in self.emptied:
            return False
        self.device.free(blk.buf)
        blk.buf = None
        self.emptied.add(address)
        self.allocated -= blk.size
        self.freed_total += blk.size
        self.count -= 1
        self.reserved -= blk.size
        self.reserved_freed += blk.size
        return True

    def regrow(self, address: int) -> bool:
        """New device memory under the emptied block of storage `address` (its host bytes
        become the runtime buffer's): `resize_(n)` after `resize_(0)`, counted and told to the
        listeners as an allocation. False if the block was not emptied."""
        if address not in self.emptied:
            return False
        blk = self.blocks[address]
        raw = blk.base.numpy()
        blk.buf = self._malloc(blk.size, blk.size, lambda: raw)
        self.emptied.discard(address)
        self.reserved += blk.size
        self.reserved_total += blk.size
        self.segments_total += 1
        self.reserved_peak = max(self.reserved_peak, self.reserved)
        self.allocated += blk.size
        self.allocated_total += blk.size
        self.count += 1
        self.count_total += 1
        self.allocated_peak = max(self.allocated_peak, self.allocated)
        self.count_peak = max(self.count_peak, self.count)
        if self.listeners:
            self.listeners.alloc(blk, blk.size)
        return True

    def _malloc(self, size: int, nbytes: int, values=None):
        """A runtime buffer of `size` bytes (its bytes `values()` when given), emptying the
        pools once if the device is full; torch.OutOfMemoryError if it stays full."""
        for attempt in (0, 1):
            if size <= self.device.memory - self.reserved:
                try:
                    if values is None:
                        return self.device.malloc(size)
                    return self.device._malloc(size, f"malloc of {size} bytes", values=values)
                except TrnsimError:
                    pass
            if attempt == 0:
                self.empty_cache()
        self.ooms += 1
        raise torch.OutOfMemoryError(self._oom_message(nbytes))

    def _new(self, size: int, nbytes: int) -> Block:
        blk = Block(self._malloc(size, nbytes))
        self.blocks[blk.address] = blk
        self.reserved += size
        self.reserved_total += size
        self.segments_total += 1
        self.reserved_peak = max(self.reserved_peak, self.reserved)
        return blk

    def _oom_message(self, nbytes: int) -> str:
        dev = self.device
        limit = dev.max_backing_bytes - dev.ctx.backed
        return (
            f"neuron out of memory. Tried to allocate {fmt_bytes(nbytes)}. {dev.name} has a "
            f"total capacity of {fmt_bytes(dev.memory)}, of which {fmt_bytes(self.reserved)} "
            f"is reserved by the shim and {fmt_bytes(self.allocated)} allocated by live tensors "
            f"(values need this machine's RAM too: {fmt_bytes(max(limit, 0))} left of the "
            f"functional-mode limit)"
        )

    def empty_cache(self) -> None:
        """Give every pooled block back to the runtime."""
        for pool in self.pools.values():
            for blk in pool:
                self.device.free(blk.buf)
                del self.blocks[blk.address]
                self.reserved -= blk.size
                self.reserved_freed += blk.size
        self.pools.clear()

    def reset_peak(self) -> None:
        self.allocated_peak, self.reserved_peak = self.allocated, self.reserved
        self.count_peak = self.count

    def stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats()'s keys (the "all" pool)."""
        pooled = sum(len(p) for p in self.pools.values())
        out = {}
        for key, cur, peak, total, freed in (
            ("allocated_bytes", self.allocated, self.allocated_peak, self.allocated_total,
             self.freed_total),
            ("reserved_bytes", self.reserved, self.reserved_peak, self.reserved_total,
             self.reserved_freed),
            ("allocation", self.count, self.count_peak, self.count_total,
             self.count_total - self.count),
            ("segment", len(self.blocks) - len(self.emptied), len(self.blocks),
             self.segments_total, self.segments_total - len(self.blocks) + len(self.emptied)),
        ):  # fmt: skip
            out[f"{key}.all.current"] = cur
            out[f"{key}.all.peak"] = peak
            out[f"{key}.all.allocated"] = total
            out[f"{key}.all.freed"] = freed
        out["inactive_split.all.current"] = pooled
        out["num_ooms"] = self.ooms
        out["num_alloc_retries"] = 0
        return out
