"""The HBM allocator: alignment, first fit, reuse, coalescing, stacks, OOM messages, no backing
store in timing mode. Numbers come from the chip configs, not literals."""

import tracemalloc

import numpy as np
import pytest

from trnsim.config import load_chip
from trnsim.errors import SimError
from trnsim.memory.hbm import Hbm
from trnsim.units import fmt_bytes


@pytest.fixture
def cfg():
    return load_chip("trn2")


def test_alignment_and_sizes_round_up(cfg):
    hbm = Hbm(cfg, functional=False)
    a = cfg.hbm.alignment
    x = hbm.allocate(1, "x")
    y = hbm.allocate(a + 1, "y")
    z = hbm.allocate(0, "z")  # even an empty tensor gets its own aligned address
    w = hbm.allocate(5, "w")
    assert [x, y, z, w] == [0, a, 3 * a, 4 * a]  # 1 -> a, a+1 -> 2a, 0 -> a
    assert all(addr % a == 0 for addr in (x, y, z, w))
    assert hbm.used == hbm.peak == 5 * a
    assert hbm.size_of(y) == 2 * a


def test_reuse_of_freed_space_first_fit(cfg):
    hbm = Hbm(cfg, functional=False)
    a = cfg.hbm.alignment
    x = hbm.allocate(4 * a, "x")
    y = hbm.allocate(4 * a, "y")
    hbm.allocate(4 * a, "z")
    hbm.free(y)
    assert hbm.used == 8 * a and hbm.peak == 12 * a
    assert hbm.allocate(2 * a, "small") == y  # first fit: the hole left by y
    assert hbm.allocate(2 * a, "small2") == y + 2 * a  # the rest of the hole
    assert hbm.allocate(a, "next") == x + 12 * a  # the hole is full: after z


def test_coalescing_restores_one_block(cfg):
    hbm = Hbm(cfg, functional=False)
    cap = cfg.hbm.stack_capacity
    addrs = [hbm.allocate(10_000, f"t{i}") for i in range(5)]
    # free in an order that exercises merging with the next, the previous, and both
    for i in (1, 3, 0, 4, 2):
        hbm.free(addrs[i])
    assert hbm.used == 0 and hbm.free_bytes == cfg.hbm.stacks * cap
    assert hbm.largest_free_block == cap
    assert hbm.allocate(cap, "whole stack", 0) == 0  # possible only if stack 0 is one block


def test_free_of_unknown_address(cfg):
    hbm = Hbm(cfg, functional=False)
    with pytest.raises(SimError, match="not allocated"):
        hbm.free(4096)


def test_stack_placement_and_home_stacks(cfg):
    hbm = Hbm(cfg, functional=False)
    cap, per = cfg.hbm.stack_capacity, cfg.hbm.cores_per_stack
    assert [hbm.home_stack(c) for c in range(cfg.cores)] == [c // per for c in range(cfg.cores)]
    x = hbm.allocate(1000, "x", stack=2)
    assert x == 2 * cap and hbm.stack_of(x) == 2
    assert hbm.stack_of(cap - 1) == 0 and hbm.stack_of(cap) == 1
    # fill stack 1, then ask for stack 1 again: first fit goes to the other stacks in order
    hbm.allocate(cap, "fill1", stack=1)
    assert hbm.stack_of(hbm.allocate(1000, "y", stack=1)) == 0
    with pytest.raises(SimError, match="stack 9 is out of range"):
        hbm.allocate(10, "bad", stack=9)
    with pytest.raises(SimError, match="outside"):
        hbm.stack_of(cfg.hbm.stacks * cap)


def test_oom_message_has_the_figures(cfg):
    hbm = Hbm(cfg, functional=False)
    cap = cfg.hbm.stack_capacity
    for s in range(cfg.hbm.stacks):
        hbm.allocate(cap - 3 * 2**30, f"big{s}", stack=s)  # leave 3 GiB per stack
    free, largest = hbm.free_bytes, hbm.largest_free_block
    assert (free, largest) == (cfg.hbm.stacks * 3 * 2**30, 3 * 2**30)
    with pytest.raises(SimError) as e:
        hbm.allocate(4 * 2**30, "w_up")
    assert str(e.value) == (
        f"cannot allocate w_up: {fmt_bytes(4 * 2**30)} requested, "
        f"{fmt_bytes(free)} free, largest free block {fmt_bytes(largest)}"
    )
    assert str(e.value) == (
        "cannot allocate w_up: 4 GiB requested, 12 GiB free, largest free block 3 GiB"
    )  # the trn2 figures, spelled out


def _llama70b_tensors():
    """(name, bytes) of Llama-3-70B's weights in bf16: 80 layers of hidden 8192, MLP 28672,
    8 KV heads of 128, and a 128256-token vocabulary (embedding and LM head): ~141 GB."""
    h, f, kv, vocab, b = 8192, 28672, 8 * 128, 128256, 2
    out = [("embed", vocab * h * b)]
    for i in range(80):
        out += [
            (f"l{i}.wq", h * h * b),
            (f"l{i}.wk", h * kv * b),
            (f"l{i}.wv", h * kv * b),
            (f"l{i}.wo", h * h * b),
            (f"l{i}.w_gate", h * f * b),
            (f"l{i}.w_up", h * f * b),
            (f"l{i}.w_down", f * h * b),
            (f"l{i}.norm1", h * b),
            (f"l{i}.norm2", h * b),
        ]
    return out + [("lm_head", vocab * h * b)]


def test_timing_mode_declares_80gib_without_memory_growth(cfg):
    """A 70B model's layers up to 80 GiB fit trn2's 96 GiB and cost no host memory: the
    allocator keeps a few integers per tensor and no backing store."""
    hbm = Hbm(cfg, functional=False)
    tensors = _llama70b_tensors()
    tracemalloc.start()
    total = 0
    for i, (name, nbytes) in enumerate(tensors):
        if total + nbytes > 80 * 2**30:
            break
        hbm.allocate(nbytes, name, stack=(i // 9) % cfg.hbm.stacks)
        assert hbm.new_array((nbytes // 2,), np.uint16) is None
        total += nbytes
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total > 79 * 2**30 and hbm.used >= total
    assert peak < 1 * 2**20  # bytes of Python objects, not gigabytes


def test_timing_mode_70b_bf16_does_not_fit_one_chip(cfg):
    """141 GB of bf16 weights exceed trn2's 4 x 24 GiB: the allocation that overflows fails
    with the figures of that moment."""
    hbm = Hbm(cfg, functional=False)
    tensors = _llama70b_tensors()
    assert sum(n for _, n in tensors) > 140e9 > cfg.hbm.stacks * cfg.hbm.stack_capacity
    with pytest.raises(SimError) as e:
        for name, nbytes in tensors:
            free, largest = hbm.free_bytes, hbm.largest_free_block
            hbm.allocate(nbytes, name)
    assert str(e.value) == (
        f"cannot allocate {name}: {fmt_bytes(nbytes)} requested, "
        f"{fmt_bytes(free)} free, largest free block {fmt_bytes(largest)}"
    )
    assert nbytes > largest
    assert hbm.used <= cfg.hbm.stacks * cfg.hbm.stack_capacity


def test_many_tensors_allocate_fast(cfg):
    """~1000 tensors with interleaved frees: sorted free lists keep this well under a second."""
    import time

    hbm = Hbm(cfg, functional=False)
    t0 = time.perf_counter()
    addrs = [hbm.allocate(1 << 20 + (i % 7), f"t{i}", stack=i % 4) for i in range(1000)]
    for a in addrs[::3]:
        hbm.free(a)
    for i in range(300):
        hbm.allocate(1 << 20, f"u{i}", stack=i % 4)
    assert time.perf_counter() - t0 < 1.0


def test_functional_mode_gives_zeroed_arrays(cfg):
    hbm = Hbm(cfg, functional=True)
    arr = hbm.new_array((4, 8), np.float32)
    assert arr.shape == (4, 8) and not arr.any()
