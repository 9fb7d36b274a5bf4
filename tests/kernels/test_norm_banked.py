"""PSUM tiles ordered bank by bank (`KernelBuilder.banked`, `norm_affine.PeBias.banked`): a copy
out of one bank waits only for the matmuls into it, a matmul into a bank only for that bank's
copy out. bf16 layer_norm rows of 151936 (lanes of 512 + 512 + 164 columns, `norms.LANE_TAIL`)
take them for their last blocks, whose lane stores go in two by partitions
(`norm_stages.NormStages.last_halves`); values hold and LNC 1 and 2 agree bit for bit."""

from __future__ import annotations

from tests.kernels.helpers import variant_at_both_lncs
from trnsim.dtypes import dtype
from trnsim.isa import Activation, Matmul
from trnsim.kernels import norm_stages, norms
from trnsim.kernels.builder import KernelBuilder, ap

F32, BF16 = dtype("float32"), dtype("bfloat16")


def _two_banks(banked: bool) -> KernelBuilder:
    """Matmuls into banks 0 and 1 of a [128, 1024] fp32 PSUM tile, then a copy of bank 0 and
    one of both banks."""
    b = KernelBuilder({})
    st, mv = (b.tile(n, "sbuf", (128, 512), BF16) for n in ("st", "mv"))
    o = b.tile("o", "sbuf", (128, 1024), BF16)
    ps = b.psum("ps", (128, 1024), F32)
    if banked:
        b.banked(ps, 512)
    for t in (st, mv):
        a = ap(t, slice(0, 128), slice(0, 512))
        b.emit(Activation, [], [a], func="copy", src=a, dst=a)  # (written: a read's source)
    s, m = ap(st, slice(0, 128), slice(0, 128)), ap(mv, slice(0, 128), slice(0, 512))
    for k in range(2):
        acc = ap(ps, slice(0, 128), slice(512 * k, 512 * (k + 1)))
        b.emit(Matmul, [s, m], [acc], stationary=s, moving=m, dst=acc)
    for hi in (512, 1024):
        acc, out = ap(ps, slice(0, 128), slice(0, hi)), ap(o, slice(0, 128), slice(0, hi))
        b.emit(Activation, [acc], [out], func="copy", src=acc, dst=out)
    return b


def test_a_banked_copy_waits_for_its_banks_only():
    plain, banked = _two_banks(False), _two_banks(True)
    *_, one, both = plain.instructions
    assert dict(one.wait) == {"w.ps": 2}  # (the tile's two matmuls, bank 1's too)
    *_, one, both = banked.instructions
    assert dict(one.wait) == {"w.ps.bank0": 1}
    assert dict(both.wait) == {"w.ps.bank1": 1}  # (bank 0's: the copy before it waited)


def test_lane_tail_values_at_both_lncs(monkeypatch):
    """7 rows: at LNC 2 a core's last block holds one row on 64 partitions (its stores halved
    by partitions of the row), the other's two rows (halved by rows)."""
    assert norms.LANE_TAIL and norm_stages.LAST_HALVES
    halves = []
    real = norm_stages.NormStages.last_halves

    def counted(self, rows, p, lane, o):
        out = real(self, rows, p, lane, o)
        halves.append((rows.stop - rows.start, p, len(out)))
        return out

    monkeypatch.setattr(norm_stages.NormStages, "last_halves", counted)
    variant_at_both_lncs(monkeypatch, (7, 151936), BF16, "STT_PARTS")
    assert {(1, 64, 2), (2, 128, 2)} <= set(halves)
