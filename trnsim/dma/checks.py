"""What makes a DMA copy impossible: checked once, when a kernel is built, never per transfer.

Rules (isa.md section 8.5): endpoints in HBM or SBUF (DMA does not reach PSUM; host memory is
reached only by stream copy steps, over the host link); equal element counts (shapes may
differ: the copy follows both access patterns in flat order); a dtype change is a cast through
fp32. A gather (`indices`, integers in SBUF) reads src in HBM as rows of dst.size /
indices.size elements and copies the rows they name. A transpose needs 2-D src and dst with
dst = src transposed, one 2- or 4-byte dtype on both sides (no cast), dst in SBUF, and a chip
with DMA transpose from the source's memory (a transpose rate > 0: NC-v2 has none).
"""

from __future__ import annotations

from trnsim.config import ChipConfig
from trnsim.dma.descriptors import run_elements
from trnsim.errors import SimError
from trnsim.isa import DmaCopy
from trnsim.memory.buffer import Ref

DMA_MEMORIES = ("hbm", "sbuf")


def check_copy(ins: DmaCopy, cfg: ChipConfig) -> None:
    """Raise SimError, starting with the instruction's label, if `ins` cannot run."""
    where = ins.label
    for name in ("src", "dst"):
        ref = getattr(ins, name)
        if not isinstance(ref, Ref):
            raise SimError(f"{where}: {name} '{ref}' is not bound to a buffer")
        if ref.memory == "psum":
            raise SimError(
                f"{where}: {name} '{ref}' is in PSUM, which DMA cannot reach; "
                f"copy it to SBUF with an engine first"
            )
        if ref.memory not in DMA_MEMORIES:
            raise SimError(
                f"{where}: {name} '{ref}' is in {ref.memory} memory; a kernel's DMA "
                f"reaches HBM and SBUF only (host copies are stream copy steps)"
            )
    src, dst = ins.src, ins.dst
    if ins.indices is not None:
        check_gather(ins, cfg)
    elif src.size != dst.size:
        raise SimError(
            f"{where}: src '{src}' has {src.size} elements {list(src.shape)} but dst "
            f"'{dst}' has {dst.size} {list(dst.shape)}"
        )
    queues = cfg.core.dma.queues_per_engine
    if not 0 <= ins.queue < queues:
        raise SimError(f"{where}: queue {ins.queue} is out of range 0..{queues - 1}")
    if ins.transpose:
        check_transpose(ins, src, dst)
        d = cfg.core.dma
        rate = d.transpose_hbm_rate if src.memory == "hbm" else d.transpose_sbuf_rate
        if not rate > 0:  # 0 = the chip has no DMA transpose (NC-v2)
            raise SimError(
                f"{where}: {cfg.name} ({cfg.core.version}) has no DMA transpose from "
                f"{src.memory.upper()}; transpose with the tensor engine instead"
            )


def check_gather(ins: DmaCopy, cfg: ChipConfig) -> None:
    """A gather: integer indices in SBUF (where the descriptor generator reads them); src in
    HBM, read in flat order as rows of R = dst.size / indices.size elements, each contiguous;
    dst's i-th block of R elements is row indices[i]; no transpose."""
    where, src, dst, idx = ins.label, ins.src, ins.dst, ins.indices
    if not isinstance(idx, Ref) or idx.memory != "sbuf" or idx.dtype.is_float:
        raise SimError(f"{where}: indices '{idx}' must be integers in SBUF (the rows to gather)")
    n = idx.size
    row = dst.size // n if n else 0
    if not row or dst.size != n * row or src.size % row or ins.transpose:
        raise SimError(
            f"{where}: a gather by {n} indices needs dst of a multiple of {n} elements, rows "
            f"that divide src's {src.size}, no transpose; dst '{dst}' has {dst.size}"
        )
    if src.memory != "hbm" or run_elements(src) % row:
        raise SimError(
            f"{where}: a gather reads rows of {row} elements contiguous in HBM; src '{src}' "
            "is not laid out so"
        )


def check_transpose(ins: DmaCopy, src: Ref, dst: Ref) -> None:
    """The DMA transpose rules (2-D, dst = src.T, 2- or 4-byte dtype, same dtype, dst in SBUF)."""
    where = ins.label
    if len(src.shape) != 2 or len(dst.shape) != 2:
        raise SimError(
            f"{where}: transpose needs 2-D src and dst, got src '{src}' "
            f"{list(src.shape)} and dst '{dst}' {list(dst.shape)}"
        )
    if dst.shape != src.shape[::-1]:
        raise SimError(
            f"{where}: transpose of src '{src}' {list(src.shape)} needs dst shape "
            f"{list(src.shape[::-1])}, got '{dst}' {list(dst.shape)}"
        )
    if src.dtype.name != dst.dtype.name:
        raise SimError(
            f"{where}: transpose cannot cast: src is {src.dtype.name}, dst is {dst.dtype.name}"
        )
    if src.dtype.itemsize not in (2, 4):
        raise SimError(f"{where}: transpose needs a 2- or 4-byte dtype, got {src.dtype.name}")
    if dst.memory != "sbuf":
        raise SimError(f"{where}: transpose dst '{dst}' is in {dst.memory.upper()}, expected SBUF")


def check_host_copy(src: Ref, dst: Ref) -> None:
    """A host copy moves between host memory and HBM, with equal element counts."""
    if sorted((src.memory, dst.memory)) != ["hbm", "host"]:
        raise SimError(
            f"host copy {src} -> {dst}: one side must be in host memory and the other "
            f"in HBM, got {src.memory} -> {dst.memory}"
        )
    if src.size != dst.size:
        raise SimError(
            f"host copy {src} -> {dst}: src has {src.size} elements but dst has {dst.size}"
        )
