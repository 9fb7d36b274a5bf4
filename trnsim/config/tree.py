"""The chip configuration tree: frozen dataclasses, one per part, `ChipConfig` at the root.

Every field carries its unit kind and a one-line description in its metadata (`unit`, `help`);
the loader (`trnsim.config.load`) uses them to parse quantities with units (`2.4GHz`, `224KiB`,
`2.9TB/s`, `1.3us`) into base units (Hz, bytes, bytes/s, seconds). Build one with
`trnsim.config.load_chip`.

Unit kinds: `count` (int), `ratio` (float), `bool`, `str`, `bytes` (int), `Hz` (int), `B/s`
(float, bytes per second), `s` (float, seconds), `cycles` (int, engine cycles), `FLOP/s` (float).
A field whose unit is `section` holds a nested dataclass; `list` is a tuple of counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def q(unit: str, help: str, loader: bool = False, **kw):
    """A config field with a unit kind and a description (gem5's `Param.X(default, help)`).
    `loader=True`: the loader fills the field from other keys, the YAML never gives it (it needs
    a default)."""
    metadata = {"unit": unit, "help": help, **({"loader": True} if loader else {})}
    return field(metadata=metadata, **kw)


# ----------------------------------------------------------------------------------------------
# per NeuronCore


@dataclass(frozen=True)
class TensorEngineConfig:
    """The PE array: a systolic matmul/transpose engine reading SBUF and writing PSUM."""

    clock_hz: int = q("Hz", "TensorE clock")
    rows: int = q("count", "PE array rows = contraction (partition) size per matmul")
    cols: int = q("count", "PE array columns = max stationary free size (M)")
    moving_free_max: int = q("count", "max moving free size N with an fp32 PSUM destination")
    moving_free_max_bf16_dst: int = q("count", "max moving free size N with a bf16 PSUM dst")
    bf16_dst: bool = q("bool", "matmul may write bf16 into PSUM (NC-v4)")
    stationary_min_cycles: int = q("cycles", "the 64 in max(min(64, N_stat), N_moving)")
    mm_init_latency_cycles: int = q(
        "cycles", "MM_INIT_LATENCY: floor of a matmul's initiation interval"
    )
    load_stationary_cycles: int = q("cycles", "LoadStationary II, hidden when in background")
    fp32_rate: float = q("ratio", "fp32 throughput relative to bf16 (1/4)")
    fp8_double_row: bool = q("bool", "fp8 double-row mode: K=256 per pass at bf16 speed")
    fp8_rate: float = q("ratio", "fp8 throughput relative to bf16 (2 with double-row)")
    mx_rate: float = q("ratio", "MX (mxfp8/mxfp4) throughput relative to bf16; 0 if absent")
    transpose_fp32_rate: float = q("ratio", "fp32 transpose-mode throughput relative to bf16")
    warmup: bool = q("bool", "dI/dt throttle: bursts after idle start slow and ramp to full")
    warmup_start_rate: float = q("ratio", "throughput of a cold PE array relative to full")
    warmup_time: float = q("s", "busy time from cold to full throughput (and idle to cool)")


@dataclass(frozen=True)
class VectorEngineConfig:
    """VectorE (DVE): two-input elementwise ops, reductions, copies, memset, select."""

    clock_hz: int = q("Hz", "VectorE clock")
    min_ii_cycles: int = q("cycles", "MIN_II: minimum initiation interval")
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")
    commit_latency_cycles: int = q(
        "cycles", "after its issue interval, cycles until a result can be read by the next"
    )
    perf_mode: bool = q("bool", "bf16/fp16 fast modes (NC-v3+)")
    copy_fast_factor: float = q("ratio", "tensor_copy/tensor_scalar speedup, SBUF->SBUF 16-bit")
    copy_fast_factor_strided: float = q("ratio", "same, non-contiguous or one side in PSUM")
    tt_fast_factor: float = q("ratio", "tensor_tensor speedup, both SBUF, all 16-bit")
    max_free_elements: int = q("count", "max elements per partition, Scalar/GpSimd ops")
    dve_max_free_elements: int = q("count", "max elements per partition, VectorE ops")
    psum_max_free_elements: int = q("count", "max elements per partition when in PSUM")
    bn_stats_max_free: int = q("count", "max src elements per partition of bn_stats")


@dataclass(frozen=True)
class ScalarEngineConfig:
    """ScalarE (ACT): func(x * scale + bias) with an optional free-axis reduction."""

    clock_hz: int = q("Hz", "ScalarE clock")
    min_ii_cycles: int = q("cycles", "MIN_II")
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")
    commit_latency_cycles: int = q(
        "cycles", "after its issue interval, cycles until a result can be read by the next"
    )
    reduce_cycles: int = q("cycles", "ActReadAccumulator: extra cycles to read the reduction")
    perf_mode_factor: float = q("ratio", "16-bit tensor_copy/tensor_scalar speedup (1 if none)")
    copy_bit_exact: bool = q("bool", "tensor_copy of equal dtypes is bit-exact, not via fp32")
    tensor_scalar_any_ops: bool = q("bool", "any tensor_scalar op pair, not just multiply/add")
    reduce_max: bool = q("bool", "activation may reduce with max as well as add")
    reciprocal_bias: bool = q("bool", "activation reciprocal may take a bias")


@dataclass(frozen=True)
class GpSimdEngineConfig:
    """GpSimd (Pool): eight SIMD cores, 16 partitions each; iota, masks, integer-exact ops."""

    clock_hz: int = q("Hz", "GpSimd clock")
    min_ii_cycles: int = q("cycles", "MIN_II")
    start_cycles: int = q("cycles", "GPSIMD_START: fixed start cost of iota/affine_select")
    transcendental_cycles_per_element: int = q(
        "cycles", "cycles per element of a transcendental ALU op (pow), vs 1 for the others"
    )
    fixed_overhead_cycles: int = q("cycles", "static overhead added to a dependent instruction")
    commit_latency_cycles: int = q(
        "cycles", "after its issue interval, cycles until a result can be read by the next"
    )


@dataclass(frozen=True)
class SbufConfig:
    """State buffer: on-chip SRAM, partitions x bytes, read and written by all engines."""

    partitions: int = q("count", "partitions (lanes)")
    partition_bytes: int = q("bytes", "bytes per partition")


@dataclass(frozen=True)
class PsumConfig:
    """Partial-sum buffer: fp32 accumulators, partitions x banks x bytes."""

    partitions: int = q("count", "partitions")
    banks: int = q("count", "banks per partition (accumulation groups)")
    bank_bytes: int = q("bytes", "bytes per bank per partition")


@dataclass(frozen=True)
class DmaConfig:
    """The core's DMA engines: each serves a slice of partitions and has its own queues."""

    engines: int = q("count", "DMA engines per NeuronCore")
    queues_per_engine: int = q("count", "hardware queues per DMA engine")
    engine_bandwidth: float = q("B/s", "bytes/s of one DMA engine moving a load (not to HBM)")
    store_bandwidth: float = q("B/s", "bytes/s of one DMA engine moving a store (to HBM)")
    transfer_setup: float = q("s", "per-transfer setup on its queue, one transfer at a time")
    engine_stagger: float = q("s", "setup added per further engine a transfer touches")
    load_completion_latency: float = q("s", "end of a load's data to its semaphore signal")
    store_completion_latency: float = q("s", "end of a store's data to its semaphore signal")
    descriptor_cost: float = q("s", "processing cost of each descriptor")
    max_descriptor_bytes: int = q("bytes", "largest contiguous run one descriptor moves")
    packet_bytes: int = q("bytes", "round-robin arbitration granularity between queues")
    transpose_hbm_rate: float = q("ratio", "DMA transpose HBM->SBUF throughput vs copy")
    transpose_sbuf_rate: float = q("ratio", "DMA transpose SBUF->SBUF throughput vs copy")


@dataclass(frozen=True)
class CoreConfig:
    """One physical NeuronCore."""

    version: str = q("str", "NeuronCore version (NC-v2, NC-v3, NC-v4)")
    tensor: TensorEngineConfig = q("section", "Tensor engine")
    vector: VectorEngineConfig = q("section", "Vector engine")
    scalar: ScalarEngineConfig = q("section", "Scalar engine")
    gpsimd: GpSimdEngineConfig = q("section", "GpSimd engine")
    sbuf: SbufConfig = q("section", "SBUF")
    psum: PsumConfig = q("section", "PSUM")
    dma: DmaConfig = q("section", "DMA engines")
    semaphores: int = q("count", "hardware semaphores per core")
    core_barrier: bool = q("bool", "core_barrier between the two cores of an LNC 2 pair (v3+)")
    barrier_latency: float = q(
        "s", "a core's semaphore write reaching its LNC 2 peer (core_barrier's crossing)"
    )
    vector_gpsimd_share_sbuf: bool = q("bool", "Vector and GpSimd cannot access SBUF at once")
    vector_scalar_share_psum: bool = q("bool", "Vector and Scalar cannot access PSUM at once")
    partition_start_steps: tuple[int, ...] = q(
        "list", "n partitions start at a multiple of the least step >= n"
    )


# ----------------------------------------------------------------------------------------------
# per chip


@dataclass(frozen=True)
class HbmConfig:
    """Device memory: stacks, each shared by a group of physical cores."""

    stacks: int = q("count", "HBM stacks")
    stack_capacity: int = q("bytes", "capacity of one stack")
    bandwidth: float = q("B/s", "total chip HBM bandwidth (shared equally by the stacks)")
    cores_per_stack: int = q("count", "physical NeuronCores served by one stack")
    alignment: int = q("bytes", "allocation alignment of device tensors")


@dataclass(frozen=True)
class HostLinkConfig:
    """The host <-> device link (PCIe)."""

    bandwidth: float = q("B/s", "host<->device bandwidth per chip")
    latency: float = q("s", "one-way latency of a host transfer")
    launch_overhead: float = q("s", "host time to launch one kernel (or replay one graph)")
    copy_overhead: float = q("s", "host time to enqueue one copy (memcpy_async)")
    event_overhead: float = q("s", "host time to record an event or enqueue an event wait")
    graph_launch_overhead: float = q(
        "s", "device time before each kernel of a replayed graph (instead of a host launch)"
    )


@dataclass(frozen=True)
class ChipLinkConfig:
    """Chip-to-chip links (NeuronLink)."""

    links: int = q("count", "links per chip")
    bandwidth: float = q("B/s", "total chip-to-chip bandwidth per chip")
    topology: str = q("str", "topology description")


@dataclass(frozen=True)
class CcConfig:
    """Collective communication on the chip (R-OVL, R-CC): CC cores orchestrate, the cores' own
    DMA engines move the data in CC packets; reductions and duplication are done by the DMA."""

    cores_per_core: int = q("count", "CC cores per physical NeuronCore")
    packet_bytes: int = q("bytes", "CC DMA packet: the unit a DMA engine switches rings at")
    reduce_rate: float = q("ratio", "rate of a reducing DMA (read, add, write) vs a copy")
    reduce_dtype: str = q("str", "dtype the DMA adds in (inputs cast to it, result cast back)")
    duplication: bool = q("bool", "a DMA may write one read to two places (1 read, 2 writes)")
    strict_priority: bool = q(
        "bool", "DMA arbitration by strict priority (else round-robin at packet boundaries)"
    )
    compute_packet_bytes: int = q(
        "bytes",
        "compute DMA packet (= core.dma.packet_bytes, filled by the loader)",
        loader=True,
        default=0,
    )


@dataclass(frozen=True)
class PeakFlopsConfig:
    """Published dense peak FLOP/s of the whole chip, per input dtype (0 = not published)."""

    bfloat16: float = q("FLOP/s", "dense bf16/fp16")
    float8: float = q("FLOP/s", "dense fp8")
    float32: float = q("FLOP/s", "dense fp32")
    mx: float = q("FLOP/s", "dense MX (mxfp8/mxfp4)")


@dataclass(frozen=True)
class ChipConfig:
    """A Trainium chip: N physical NeuronCores sharing HBM, grouped into logical cores."""

    name: str = q("str", "chip name")
    description: str = q("str", "one-line description")
    cores: int = q("count", "physical NeuronCores per chip")
    lnc: int = q("count", "default logical NeuronCore size (physical cores per logical)")
    lnc_allowed: tuple[int, ...] = q("list", "allowed logical NeuronCore sizes")
    core: CoreConfig = q("section", "per-NeuronCore parameters")
    hbm: HbmConfig = q("section", "HBM")
    dma_bandwidth: float = q("B/s", "published chip DMA bandwidth")
    host_link: HostLinkConfig = q("section", "host link")
    chip_links: ChipLinkConfig = q("section", "chip-to-chip links")
    cc: CcConfig = q("section", "collective communication (CC cores, CC DMA)")
    peak_flops: PeakFlopsConfig = q("section", "published chip peaks")
    source: str = q("str", "path of the YAML file this config was loaded from", default="")
