"""The full model (DMA engines, HBM stacks, reduce rate, slices, intra-chip hops) against hand
values for small cases, and a collective sharing a DMA engine with a compute load.

Notation: n = engines of a rank (lnc x 16), s = dma.store_bandwidth, e = dma.engine_bandwidth,
h = an HBM stack's bandwidth (hbm.bandwidth / stacks), rr = cc.reduce_rate. A move from rank
a costs a's engines S/(n s) (and a stack read, and a write where it lands); a reduce costs the
receiver's engines S/(n s rr) and 2 accesses of its stack."""

import math
from types import SimpleNamespace

import pytest

from tests.collectives.helpers import A, C, close
from tests.dma.test_system import copy, tensor, tile
from trnsim.collectives import Settings, World
from trnsim.config import load_chip
from trnsim.system import CcParams, System, Torus

FAST = 1e15  # B/s: a link that binds nothing
MIB = 1 << 20


def world(chip_overrides=(), rpc=1, lnc=1, slices=1, cc=None, dims=(2,)):
    chip = load_chip("trn2", chip_overrides)
    sysm = System(chip, Torus(dims, (FAST, A)), rpc, lnc=lnc, cc=cc)
    return World(sysm, Settings(start_cost=C, slices=slices)), chip


def rates(chip, lnc=1):
    d = chip.core.dma
    return lnc * d.engines, d.store_bandwidth, d.engine_bandwidth, chip.hbm.bandwidth / 4


def test_send_recv_bound_by_the_engines():
    """HBM fast: the sender's 16 engines bind: C + A + S/(n s)."""
    w, chip = world(["hbm.bandwidth=1000TB/s"])
    n, s, _, _ = rates(chip)
    r = w.collective("send_recv", (0, 1), 8 * MIB)
    assert close(r.time_ps, C + A + 8 * MIB / (n * s))


def test_send_recv_bound_by_hbm():
    """HBM slow (1 TB/s for 4 stacks): the read on the sender's stack and the write on the
    receiver's each take S/h, in parallel (different chips): C + A + S/h."""
    w, chip = world(["hbm.bandwidth=1TB/s"])
    h = rates(chip)[3]
    r = w.collective("send_recv", (0, 1), 8 * MIB)
    assert close(r.time_ps, C + A + 8 * MIB / h)


def test_ring_all_reduce_of_two_ranks_with_the_reduce_rate():
    """2 chips, a rank each, HBM fast. RS: each sends S/2 (engines: S/(2ns)), then the
    receiver adds it at rr of the rate (S/(2 n s rr)); AG: each sends S/2. So
    C + [A + S/(2ns) + S/(2ns rr)] + [A + S/(2ns)]."""
    w, chip = world(["hbm.bandwidth=1000TB/s"])
    n, s, _, _ = rates(chip)
    rr = chip.cc.reduce_rate
    S = 8 * MIB
    r = w.collective("all_reduce", (0, 1), S, "bfloat16", algorithm="ring")
    move, red = S / 2 / (n * s), S / 2 / (n * s * rr)
    assert close(r.time_ps, C + (A + move + red) + (A + move))


@pytest.mark.parametrize("slices", [1, 2])
def test_slices_overlap_the_reduction_with_the_link(slices):
    """2 ranks, links at L = 100 GB/s bind the moves (the engines move n s = 430 GB/s), no
    hop latency, HBM fast. Unsliced RS: the move of S/2 at L, then its reduction alone at
    n s rr: S/(2L) + S/(2 n s rr). In 2 slices of q = S/4: slice 0 moves (q/L); slice 1 moves
    at L while slice 0 is reduced with the engine time the move leaves, (n s - L) rr =
    165 GB/s, done before the move (q/L): then slice 1's reduction alone: 2q/L + q/(n s rr).
    AG: one copy of S/2 at L. Total C + RS + S/(2L)."""
    link = 100e9
    chip = load_chip("trn2", ["hbm.bandwidth=1000TB/s"])
    sysm = System(chip, Torus((2,), (link, 0.0)), 1, lnc=1)
    w = World(sysm, Settings(start_cost=C, slices=slices))
    n, s, _, _ = rates(chip)
    rr = chip.cc.reduce_rate
    assert link < (n * s - link) * rr  # slice 0's reduction ends before slice 1's move
    S = 8 * MIB
    r = w.collective("all_reduce", (0, 1), S, "bfloat16", algorithm="ring")
    if slices == 1:
        rs = S / (2 * link) + S / (2 * n * s * rr)
    else:
        rs = S / (2 * link) + S / (4 * n * s * rr)
    assert close(r.time_ps, C + rs + S / (2 * link))


def test_intra_chip_hops_cost_dma_and_hbm_but_no_link():
    """Two ranks on one chip (LNC 2: logical cores 0 and 1, home stacks 0 and 1): a send
    moves at the engines' rate or its stacks', without latency: C + S / min(n s, h)."""
    w, chip = world(rpc=2, lnc=2, dims=(1,))
    n, s, _, h = rates(chip, lnc=2)
    r = w.collective("send_recv", (0, 1), 8 * MIB)
    assert close(r.time_ps, C + 8 * MIB / min(n * s, h))
    assert r.link_bytes == {}


def _compute_load(w, core=0, free=96 * 1024):
    """A long HBM -> SBUF load on `core` of chip 0 touching its 16 engines; returns its end."""
    chip = w.system.chips[0]
    s = SimpleNamespace(hbm=chip.hbm, functional=False)
    src = tensor(s, "x", [128, free], stack=1)
    dst = tile(s, "t", [128, free], core=core)
    ins = copy(src, dst)
    ends = []
    chip.dma.check(ins, core)
    chip.dma.submit(core, 0, ins, "k", lambda: ends.append(w.env.now))
    return ends


@pytest.mark.parametrize("strict", [False, True])
def test_collective_beside_a_compute_load_on_the_same_engines(strict):
    """Rank 0 (core 0's 16 engines) sends while a compute load keeps those engines busy.
    Round-robin at packets gives the CC flow 16 bytes for each compute byte, so with r = e/s
    (a CC byte costs 1/s of an engine, a compute byte 1/e) it gets w r / (1 + w r) of the
    engines (w = 64 KiB / 4 KiB = 16): its time is S/(n s) x (1 + w r)/(w r). Strict
    priority (Trn3): the CC flow takes the engines (2^-20 left to compute)."""
    cc = CcParams(strict_priority=strict)
    w, chip = world(["hbm.bandwidth=1000TB/s"], cc=cc)
    n, s, e, _ = rates(chip)
    ends = _compute_load(w)
    S = 4 * MIB
    r = w.collective("send_recv", (0, 1), S)
    wt = 2.0**20 if strict else 16.0
    share = wt * (e / s) / (1 + wt * (e / s))
    assert close(r.time_ps, C + A + S / (n * s) / share)
    assert ends[0] > r.end_ps  # the load was going all along


def test_compute_alone_is_unchanged_by_a_shared_fluid_model():
    """A load on a System's chip takes what it takes on a chip of its own."""
    w, _ = world()
    ends = _compute_load(w, free=4096)
    w.run()
    from tests.dma.test_system import make

    alone = make()
    s = SimpleNamespace(hbm=alone.hbm, functional=False)
    src, dst = tensor(s, "x", [128, 4096], stack=1), tile(s, "t", [128, 4096])
    got = []
    ins = copy(src, dst)
    alone.dma.check(ins, 0)
    alone.dma.submit(0, 0, ins, "k", lambda: got.append(alone.env.now))
    alone.env.run()
    assert ends == got and math.isfinite(got[0])
