"""The chip's DMA system driven directly: exact timelines worked out by hand from the config,
streaming rates against the bandwidth bounds, fair sharing of HBM stacks, values, errors.

Notation (all read from the config): S(k) = transfer_setup + (k - 1) x engine_stagger, the setup
of a transfer touching k engines (a queue sets up one transfer at a time, overlapping earlier
transfers' data); L = load_completion_latency (data end to completion); d = descriptor_cost,
B = engine_bandwidth (store_bandwidth into HBM), E = DMA engines per core, H = HBM bandwidth
per stack = hbm.bandwidth / stacks.
"""

import math
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
import simpy

from trnsim.config import load_chip
from trnsim.dma import DmaSystem
from trnsim.dtypes import dtype, to_dtype
from trnsim.errors import SimError
from trnsim.isa import Ap, DmaCopy, Engine
from trnsim.memory.buffer import Buffer, bind
from trnsim.memory.hbm import Hbm
from trnsim.report.recorder import Recorder
from trnsim.report.summary import QueueStats, dma_queue_stats
from trnsim.units import seconds_to_ps

BF16, FP32 = dtype("bfloat16"), dtype("float32")


def make(chip="trn2", functional=False, overrides=()):
    cfg = load_chip(chip, overrides)
    env = simpy.Environment()
    hbm = Hbm(cfg, functional)
    rec = Recorder()
    return SimpleNamespace(
        cfg=cfg,
        env=env,
        hbm=hbm,
        rec=rec,
        dma=DmaSystem(env, cfg, hbm, rec),
        functional=functional,
        ends=[],
    )


def tensor(s, name, shape, dt=BF16, stack=None, values=None, memory="hbm"):
    addr = s.hbm.allocate(math.prod(shape) * dt.itemsize, name, stack) if memory == "hbm" else 0
    arr = None
    if s.functional:
        arr = np.zeros(shape, dt.np) if values is None else np.asarray(values).astype(dt.np)
    return Buffer(name, memory, tuple(shape), dt, arr, addr)


def tile(s, name, shape, dt=BF16, memory="sbuf", core=0):
    arr = np.zeros(shape, dt.np) if s.functional else None
    return Buffer(name, memory, tuple(shape), dt, arr, 0, core)


def copy(src, dst, src_index=(), dst_index=(), queue=0, transpose=False, index=0):
    s = bind(Ap(src.name, tuple(src_index)), src, "src")
    d = bind(Ap(dst.name, tuple(dst_index)), dst, "dst")
    return DmaCopy(index=index, engine=Engine.DMA, src=s, dst=d, queue=queue, transpose=transpose)


def submit(s, ins, core=0, then=None):
    def done():
        s.ends.append((core, ins.queue, ins.index, s.env.now))
        if then is not None:
            then()

    s.dma.check(ins, core)
    s.dma.submit(core, ins.queue, ins, "k", done)


def data_ps(cfg, descriptors, nbytes, factor=1.0, store=False):
    """One engine's data phase alone: descriptors x d + bytes / (B x factor), in ps."""
    d = cfg.core.dma
    bw = d.store_bandwidth if store else d.engine_bandwidth
    return (descriptors * d.descriptor_cost + nbytes / (bw * factor)) * 1e12


def setup_ps(cfg, engines=1):
    """S(k): the setup of a transfer touching `engines` engines, in ps."""
    d = cfg.core.dma
    return seconds_to_ps(d.transfer_setup) + (engines - 1) * seconds_to_ps(d.engine_stagger)


def latency_ps(cfg, store=False):
    d = cfg.core.dma
    return seconds_to_ps(d.store_completion_latency if store else d.load_completion_latency)


# -- exact timelines ---------------------------------------------------------------------------


def test_one_32kib_transfer_on_one_engine():
    """[8, 2048] bf16 = 32 KiB into partitions 0-7: engine 0 alone, 8 rows of 4 KiB = 8
    descriptors. End = S(1) + 8 d + 32768 / B + L (rounded up to the ps): 615 + 16 + 1424.7 +
    300 ns on trn2."""
    s = make()
    x = tensor(s, "x", [8, 2048])
    t = tile(s, "t", [128, 2048])
    submit(s, copy(x, t, dst_index=[(0, 8, None)]))
    s.env.run()
    expect = setup_ps(s.cfg) + data_ps(s.cfg, 8, 32768) + latency_ps(s.cfg)
    (span,) = s.rec.spans
    assert abs(span.end_ps - expect) <= 1
    assert (span.track, span.op, span.start_ps, span.bytes, span.dtype) == (
        "q0",
        "dma_copy",
        0,
        32768,
        "bfloat16",
    )
    assert s.rec.hbm_bytes_read == 32768 and s.rec.hbm_bytes_written == 0
    # the stack counter: one sample when data starts (32768 B over the data phase), 0 when the
    # data ends (L before completion)
    (t0, st, rate), (t1, _, zero) = s.rec.hbm_samples
    assert (t0, st, t1, zero) == (setup_ps(s.cfg), 0, span.end_ps - latency_ps(s.cfg), 0.0)
    assert rate == pytest.approx(32768 / (data_ps(s.cfg, 8, 32768) * 1e-12))
    # the data phase on its one engine, and what the setup cost beyond the bytes: nothing
    (move,) = s.rec.dma_moves
    assert (move.engines, move.start_ps, move.end_ps, move.overhead_ps) == (
        (0,),
        setup_ps(s.cfg),
        span.end_ps - latency_ps(s.cfg),
        0,
    )


def test_two_transfers_on_one_queue_serialize():
    """Same queue, same engine: the 2nd's setup follows the 1st's (ready at 2 S, overlapping the
    1st's data) and its data starts when the 1st's ends (D = one data phase > S): ends at
    S + D + L and S + 2D + L."""
    s = make()
    x = tensor(s, "x", [8, 2048])
    t = tile(s, "t", [128, 2048])
    for i in range(2):
        submit(s, copy(x, t, dst_index=[(0, 8, None)], index=i))
    s.env.run()
    f, d = setup_ps(s.cfg) + latency_ps(s.cfg), data_ps(s.cfg, 8, 32768)
    assert d > setup_ps(s.cfg)
    (_, _, _, e1), (_, _, _, e2) = s.ends
    assert abs(e1 - (f + d)) <= 1 and abs(e2 - (f + 2 * d)) <= 2
    st = dma_queue_stats(s.rec.spans)
    assert st == {(0, 0): QueueStats(busy_ps=e2, bytes=65536, transfers=2)}


def test_two_queues_share_one_engine():
    """Queues 0 and 1 on engine 0 at once: each sets up its own (ready at S), then round-robin
    = half the engine each, so both end at S + 2D + L; each queue is busy from submission to
    its end."""
    s = make()
    x = tensor(s, "x", [8, 2048])
    t = tile(s, "t", [128, 2048])
    for q in range(2):
        submit(s, copy(x, t, dst_index=[(0, 8, None)], queue=q, index=q))
    s.env.run()
    f, d = setup_ps(s.cfg) + latency_ps(s.cfg), data_ps(s.cfg, 8, 32768)
    assert [e for *_, e in s.ends] == [s.ends[0][3]] * 2
    assert abs(s.ends[0][3] - (f + 2 * d)) <= 2
    assert [v.busy_ps for v in dma_queue_stats(s.rec.spans).values()] == [s.ends[0][3]] * 2


def test_transpose_runs_at_its_rate():
    """fp32 [128, 64] in HBM -> [64, 128] in SBUF (partitions 0-63: engines 0-7), one 512 B
    row per partition, 8 per engine, at B x transpose_hbm_rate, after S(8)."""
    s = make()
    x = tensor(s, "x", [128, 64], FP32)
    t = tile(s, "t", [64, 128], FP32)
    submit(s, copy(x, t, transpose=True))
    s.env.run()
    rate = s.cfg.core.dma.transpose_hbm_rate
    expect = setup_ps(s.cfg, 8) + data_ps(s.cfg, 8, 8 * 512, rate) + latency_ps(s.cfg)
    assert abs(s.ends[0][3] - expect) <= 1


def test_one_queue_moves_one_transfer_at_a_time():
    """Queues are FIFO as a whole: a transfer on engine 0 (partitions 0-7) then one on engine 1
    (partitions 8-15), both on queue 0, do not overlap although their engines differ: ends at
    S + D + L and S + 2D + L."""
    s = make()
    x = tensor(s, "x", [8, 2048])
    t = tile(s, "t", [128, 2048])
    submit(s, copy(x, t, dst_index=[(0, 8, None)], index=0))
    submit(s, copy(x, t, dst_index=[(8, 16, None)], index=1))
    s.env.run()
    f, d = setup_ps(s.cfg) + latency_ps(s.cfg), data_ps(s.cfg, 8, 32768)
    (_, _, _, e1), (_, _, _, e2) = s.ends
    assert abs(e1 - (f + d)) <= 1 and abs(e2 - (f + 2 * d)) <= 2


def test_uneven_transfer_ends_with_its_bottleneck_piece():
    """[12, 2048] bf16 into partitions 0-11: engine 0 moves 8 rows (32 KiB), engine 1 four
    (16 KiB). One flow at the pace of engine 0's piece, after S(2): ends at S(2) + 8 d +
    32768 / B + L, as the slowest piece alone would; the stack carries all 48 KiB over that
    data phase."""
    s = make()
    x = tensor(s, "x", [12, 2048])
    t = tile(s, "t", [128, 2048])
    submit(s, copy(x, t, dst_index=[(0, 12, None)]))
    s.env.run()
    f, d = setup_ps(s.cfg, 2) + latency_ps(s.cfg), data_ps(s.cfg, 8, 32768)
    (span,) = s.rec.spans
    assert abs(span.end_ps - (f + d)) <= 1 and span.bytes == 49152
    (_, _, rate), _ = s.rec.hbm_samples
    assert rate == pytest.approx(49152 / (d * 1e-12))


def test_uneven_transfer_moves_its_pieces_in_lockstep():
    """The one approximation of a flow per transfer. A = [12, 2048] into partitions 0-11 on
    queue 0 (engine 0: D of work, engine 1: D/2, used at coefficient 1/2); B = [8, 2048] into
    partitions 8-15 on queue 1 (engine 1: D). Engine 1 saturates when r/2 + r = 1: both run
    at 2/3 and end at S + 1.5 D + L. (Per piece, A's half-size piece on engine 1 would have
    lagged behind its engine-0 piece without delaying A: A at S + D + L, B at S + 1.5 D + L.)
    Without the engine stagger, so that both become ready at once."""
    s = make(overrides=["core.dma.engine_stagger=0"])
    x = tensor(s, "x", [12, 2048])
    t = tile(s, "t", [128, 2048])
    u = tile(s, "u", [128, 2048])
    submit(s, copy(x, t, dst_index=[(0, 12, None)], queue=0, index=0))
    submit(s, copy(x, u, src_index=[(0, 8, None)], dst_index=[(8, 16, None)], queue=1, index=1))
    s.env.run()
    f, d = setup_ps(s.cfg) + latency_ps(s.cfg), data_ps(s.cfg, 8, 32768)
    assert [i for _, _, i, _ in s.ends] == [0, 1]  # same ps: core, queue order
    assert all(abs(e - (f + 1.5 * d)) <= 2 for *_, e in s.ends)


def test_small_transfers_go_at_one_per_setup():
    """Eight [128, 128] bf16 loads (256 B per partition: 16 engines x 8 descriptors of 256 B) on
    one queue: each data phase D = 8 d + 2048 / B is shorter than S(16), so the queue is
    setup-bound: transfer i ends at (i + 1) S(16) + D + L, and each costs S(16) - D beyond its
    bytes (D rounded up to the ps)."""
    s = make()
    x = tensor(s, "x", [128, 128])
    t = tile(s, "t", [128, 128])
    for i in range(8):
        submit(s, copy(x, t, index=i))
    s.env.run()
    s16, d = setup_ps(s.cfg, 16), data_ps(s.cfg, 8, 2048)
    assert d < s16
    for i, (*_, end) in enumerate(s.ends):
        assert abs(end - ((i + 1) * s16 + d + latency_ps(s.cfg))) <= 1
    assert [m.overhead_ps for m in s.rec.dma_moves] == [s16 - math.ceil(d)] * 8
    assert s.rec.dma_moves[0].engines == tuple(range(16))


def test_each_queue_sets_up_its_own_transfers():
    """The setup bound is per queue (docs/model.md): the same eight small loads over two queues
    are set up two at a time; the two queues' data phases then share the 16 engines (2 D each):
    the last ends at 4 S(16) + 2 D + L, about twice as fast as on one queue."""
    s = make()
    x = tensor(s, "x", [128, 128])
    t = tile(s, "t", [128, 128])
    for i in range(8):
        submit(s, copy(x, t, queue=i % 2, index=i))
    s.env.run()
    s16, d = setup_ps(s.cfg, 16), data_ps(s.cfg, 8, 2048)
    assert abs(max(e for *_, e in s.ends) - (4 * s16 + 2 * d + latency_ps(s.cfg))) <= 2


def test_a_store_moves_at_the_store_rate():
    """SBUF -> HBM [8, 2048] bf16 on engine 0: S(1) + 8 d + 32768 / store_bandwidth + the store
    completion latency."""
    s = make()
    x = tensor(s, "x", [8, 2048])
    t = tile(s, "t", [128, 2048])
    submit(s, copy(t, x, src_index=[(0, 8, None)]))
    s.env.run()
    expect = setup_ps(s.cfg) + data_ps(s.cfg, 8, 32768, store=True) + latency_ps(s.cfg, True)
    assert abs(s.ends[0][3] - expect) <= 1
    assert s.cfg.core.dma.store_bandwidth > s.cfg.core.dma.engine_bandwidth


def test_host_copies_share_the_link():
    """Two 1 MiB host->HBM copies at once: latency, then each at half the link: both end at
    latency + 2 MiB / host bandwidth."""
    s = make()
    h = [tensor(s, f"h{i}", [512, 1024], memory="host") for i in range(2)]
    x = [tensor(s, f"x{i}", [512, 1024]) for i in range(2)]
    for i in range(2):
        src, dst = bind(Ap(h[i].name), h[i], "s"), bind(Ap(x[i].name), x[i], "d")
        s.dma.submit_host(0, src, dst, lambda: s.ends.append(s.env.now))
    s.env.run()
    link = s.cfg.host_link
    expect = seconds_to_ps(link.latency) + 2 * 2**20 / link.bandwidth * 1e12
    assert all(abs(e - expect) <= 1 for e in s.ends)
    assert s.rec.hbm_bytes_written == 2 * 2**20
    assert s.rec.spans == []  # host copies are timed by their stream, not on a DMA queue
    assert dma_queue_stats(s.rec.spans) == {}


# -- streaming rates ---------------------------------------------------------------------------


def stream(s, cores, transfers=64, queues=4, stack_of=None):
    """Each core reads `transfers` [128, 4096] bf16 tiles (1 MiB) round-robin on `queues`
    queues from a tensor on its home stack (or `stack_of(core)`). Returns bytes/s per core."""
    per_core = {}
    for c in cores:
        stack = s.hbm.home_stack(c) if stack_of is None else stack_of(c)
        x = tensor(s, f"x{c}", [128 * transfers, 4096], stack=stack)
        tiles = [tile(s, f"t{q}", [128, 4096], core=c) for q in range(queues)]
        for i in range(transfers):
            q = i % queues
            submit(
                s,
                copy(x, tiles[q], src_index=[(128 * i, 128 * (i + 1), None)], queue=q, index=i),
                core=c,
            )
        per_core[c] = transfers * 128 * 4096 * 2
    s.env.run()
    end = {c: max(e for cc, *_, e in s.ends if cc == c) for c in cores}
    return {c: per_core[c] / (end[c] * 1e-12) for c in cores}


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_one_core_stream_reaches_its_bound(chip):
    """One core: min(E x B, S) (trn2: 16 x 23 GB/s = 368 GB/s < 725 GB/s per stack) within
    2%: F is paid once (pipelined) and 2 ns per 8 KiB row costs 0.6-0.8%."""
    s = make(chip)
    rate = stream(s, [0], transfers=256)[0]
    cfg = s.cfg
    bound = min(
        cfg.core.dma.engines * cfg.core.dma.engine_bandwidth, cfg.hbm.bandwidth / cfg.hbm.stacks
    )
    assert bound * 0.98 <= rate <= bound
    assert len(s.rec.spans) == 256


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
def test_whole_chip_stream_reaches_its_bound(chip):
    """All cores streaming from their home stacks: min(cores x E x B, HBM bandwidth) within 5%
    (trn2: 2.944 TB/s of DMA vs 2.9 TB/s of HBM: HBM-bound; trn3: 4.224 vs 4.9: DMA-bound)."""
    s = make(chip)
    cfg = s.cfg
    rates = stream(s, range(cfg.cores))
    bound = min(cfg.cores * cfg.core.dma.engines * cfg.core.dma.engine_bandwidth, cfg.hbm.bandwidth)
    assert bound * 0.95 <= sum(rates.values()) <= bound * 1.0001
    peak = max(r for _, _, r in s.rec.hbm_samples)
    assert peak <= cfg.hbm.bandwidth / cfg.hbm.stacks * (1 + 1e-9)


@pytest.mark.parametrize("n_cores", [2, 4])
def test_cores_on_one_stack_share_it_fairly(n_cores):
    """n cores all reading from stack 0: each wants E x B (368 GB/s on trn2) but the stack
    gives S / n (2: 362.5 GB/s each; 4: 181.25), equally; the stack counter shows S."""
    s = make()
    cfg = s.cfg
    rates = stream(s, range(n_cores), stack_of=lambda c: 0)
    share = cfg.hbm.bandwidth / cfg.hbm.stacks / n_cores
    assert share < cfg.core.dma.engines * cfg.core.dma.engine_bandwidth  # the stack is the limit
    for r in rates.values():
        assert share * 0.98 <= r <= share
    assert max(rates.values()) - min(rates.values()) <= 1e-6 * share
    busy = [r for _, st, r in s.rec.hbm_samples if st == 0]
    assert max(busy) == pytest.approx(cfg.hbm.bandwidth / cfg.hbm.stacks)


def test_deterministic():
    runs = []
    for _ in range(2):
        s = make()
        stream(s, [0, 1, 2], transfers=8, queues=3, stack_of=lambda c: c % 2)
        runs.append((s.rec.recorded, s.rec.hbm_samples, dma_queue_stats(s.rec.spans)))
    assert runs[0] == runs[1]


# -- values ------------------------------------------------------------------------------------


def test_round_trip_hbm_sbuf_hbm():
    s = make(functional=True)
    vals = np.random.default_rng(0).normal(size=(128, 256)).astype(ml_dtypes.bfloat16)
    x = tensor(s, "x", [128, 256], values=vals)
    y = tensor(s, "y", [128, 256])
    t = tile(s, "t", [128, 256])
    submit(s, copy(x, t), then=lambda: submit(s, copy(t, y, index=1)))
    s.env.run()
    assert np.array_equal(y.array, vals)
    assert s.rec.hbm_bytes_read == s.rec.hbm_bytes_written == 128 * 256 * 2


def test_cast_goes_through_fp32():
    s = make(functional=True)
    vals = np.random.default_rng(1).normal(size=(16, 64)).astype(np.float32)
    x = tensor(s, "x", [16, 64], BF16, values=vals)
    t = tile(s, "t", [16, 64], FP32)
    y = tensor(s, "y", [16, 64], BF16)
    submit(s, copy(x, t), then=lambda: submit(s, copy(t, y, index=1)))
    s.env.run()
    assert np.array_equal(t.array, x.array.astype(np.float32))
    assert np.array_equal(y.array, to_dtype(t.array, BF16))
    assert s.rec.spans[0].bytes == 16 * 64 * 4  # the engine moves the larger (fp32) side


def test_transpose_values():
    s = make(functional=True)
    vals = np.arange(32 * 128, dtype=np.float32).reshape(32, 128)
    x = tensor(s, "x", [32, 128], BF16, values=vals)
    t = tile(s, "t", [128, 32])
    submit(s, copy(x, t, transpose=True))
    s.env.run()
    assert np.array_equal(t.array, x.array.T)


def test_sliced_hbm_source_and_reshaping_copies():
    s = make(functional=True)
    vals = np.arange(128 * 1024).reshape(128, 1024) % 251
    x = tensor(s, "x", [128, 1024], FP32, values=vals)
    t = tile(s, "t", [128, 256], FP32)
    y = tensor(s, "y", [256, 128], FP32)
    submit(
        s,
        copy(x, t, src_index=[(0, 128, None), (256, 512, None)]),
        then=lambda: submit(s, copy(t, y, index=1)),
    )
    z = tensor(s, "z", [64, 128], FP32)  # HBM -> HBM, shape change: flat order
    submit(s, copy(x, z, src_index=[(8, 16, None)], index=2))
    s.env.run()
    assert np.array_equal(t.array, vals[:, 256:512])
    assert np.array_equal(y.array, vals[:, 256:512].reshape(256, 128))
    assert np.array_equal(z.array, vals[8:16].reshape(64, 128))


# -- errors ------------------------------------------------------------------------------------


def _check(s, ins):
    with pytest.raises(SimError) as e:
        s.dma.check(ins, 0)
    assert str(e.value).startswith("instruction 3 (dma_copy): ")
    return str(e.value)


def test_errors():
    s = make()
    x = tensor(s, "x", [128, 512])
    t = tile(s, "t", [128, 256])
    p = tile(s, "p", [128, 512], FP32, memory="psum")
    h = tensor(s, "h", [128, 512], memory="host")
    assert _check(s, copy(x, t, index=3)).endswith(
        "src 'x' has 65536 elements [128, 512] but dst 't' has 32768 [128, 256]"
    )
    assert "PSUM" in _check(s, copy(x, p, index=3))
    assert "PSUM" in _check(s, copy(p, x, index=3))
    assert "host" in _check(s, copy(h, x, index=3))
    queues = s.cfg.core.dma.queues_per_engine
    msg = _check(s, copy(x, tile(s, "u", [128, 512]), queue=queues, index=3))
    assert msg.endswith(f"queue {queues} is out of range 0..{queues - 1}")
    sq = tile(s, "sq", [128, 128])
    src = tensor(s, "src", [64, 256])
    assert "needs dst shape [256, 64]" in _check(
        s, copy(src, sq, src_index=[(0, 64, None)] + [(0, 256, None)], transpose=True, index=3)
    )
    assert "2-D" in _check(
        s, copy(tensor(s, "v", [128]), tile(s, "w", [128]), transpose=True, index=3)
    )
    assert "cannot cast" in _check(
        s, copy(tensor(s, "a", [64, 128]), tile(s, "b", [128, 64], FP32), transpose=True, index=3)
    )
    i8 = dtype("int8")
    assert "2- or 4-byte" in _check(
        s, copy(tensor(s, "c", [64, 128], i8), tile(s, "d", [128, 64], i8), transpose=True, index=3)
    )
    assert "expected SBUF" in _check(
        s, copy(tensor(s, "e", [64, 128]), tensor(s, "f", [128, 64]), transpose=True, index=3)
    )


@pytest.mark.parametrize("src_memory", ["hbm", "sbuf"])
def test_transpose_on_a_chip_without_dma_transpose_is_rejected(src_memory):
    """Regression (fuzzer): trn1 (NC-v2) has transpose_hbm/sbuf_rate 0 (no DMA transpose);
    a transpose passed the check and then divided by that rate (ZeroDivisionError) when the
    transfer was submitted."""
    s = make("trn1")
    src = tensor(s, "x", [128, 64], FP32) if src_memory == "hbm" else tile(s, "x", [128, 64], FP32)
    msg = _check(s, copy(src, tile(s, "t", [64, 128], FP32), transpose=True, index=3))
    assert msg.endswith(
        f"trn1 (NC-v2) has no DMA transpose from {src_memory.upper()}; "
        f"transpose with the tensor engine instead"
    )


def test_host_copy_errors():
    s = make()
    x, y = tensor(s, "x", [4, 4]), tensor(s, "y", [4, 4])
    with pytest.raises(SimError, match="host memory"):
        s.dma.submit_host(0, bind(Ap("x"), x, "s"), bind(Ap("y"), y, "d"), lambda: None)
