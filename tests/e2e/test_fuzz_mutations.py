"""Fuzz the whole pipeline with mutated seeds (tests/e2e/mutations.py): every example runs or
fails with a clean one-line TrnsimError (tests/e2e/fuzzing.py states the standard)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.fuzzing import (
    CHIPS,
    EXAMPLES,
    FUZZ,
    MODES,
    SEED_DOCS,
    SEEDS,
    assert_survives,
    dump,
    run_trace,
)
from tests.e2e.mutations import GENERAL, HUGE, OPERAND, SYNC, mutated
from trnsim.runtime import session


@pytest.mark.parametrize("name", list(SEEDS))
@pytest.mark.parametrize("chip_name", CHIPS)
def test_seeds_run_clean(name, chip_name):
    """The seeds are valid: both modes run them, and give the same simulated time."""
    results = [run_trace(SEEDS[name], chip_name, mode) for mode in MODES]
    if name == "per_core" and chip_name == "trn1":  # trn1 has no lnc 2
        assert all("lnc 2 is not supported" in str(r) for r in results)
        return
    assert all(isinstance(r, session.RunResult) for r in results), results
    assert results[0].total_ps == results[1].total_ps > 0
    # the dumped form (what mutations produce) is as valid as the hand-written one
    again = run_trace(dump(SEED_DOCS[name]), chip_name, "timing")
    assert again.total_ps == results[1].total_ps


@FUZZ
@given(mutated(GENERAL))
def test_fuzz_structure(example):
    """Junk values, missing and unknown keys, unknown ops, bad fields, dtypes, shapes, inits."""
    assert_survives(example)


@FUZZ
@given(mutated(OPERAND))
def test_fuzz_operands(example):
    """Bad and out-of-bounds slices, swapped and renamed operands (PSUM where SBUF is needed,
    HBM tensors as engine operands, ...), wrong memories, dtypes and shapes, views."""
    assert_survives(example)


@FUZZ
@given(mutated(SYNC))
def test_fuzz_sync(example):
    """Semaphore waits/signals, cycles between engines, stream schedules with event cycles,
    queues and cores out of range, lnc and per_core mismatches."""
    assert_survives(example)


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 3))
@given(mutated(HUGE, max_mutations=2))
def test_fuzz_huge_and_degenerate_shapes(example):
    """Shapes of 0, -1, 10**12 elements, [128, 10**9] tiles, 8-dim tensors, ..."""
    assert_survives(example)


@settings(FUZZ, max_examples=max(1, EXAMPLES * 2 // 3))
@given(name=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_fuzz_text(name, data):
    """Character-level damage to the YAML text itself (the loader must name the line)."""
    text = SEEDS[name]
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        how = data.draw(st.integers(0, 3))
        if how == 0:
            text = text[:i] + text[i + data.draw(st.integers(1, 8)) :]
        elif how == 1:
            text = (
                text[:i]
                + data.draw(
                    st.sampled_from(
                        list(":-[]{},&*!|>'\"%@`#\t\n ")
                        + ["\x00", "\ufeff", "\u2028", "1e999", "!!python/object:os.system"]
                    )
                )
                + text[i:]
            )
        elif how == 2 and text:
            lines = text.splitlines(keepends=True)
            j = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(j, lines[data.draw(st.integers(0, len(lines) - 1))])
            text = "".join(lines)
        else:
            text = text[:i]
    run_trace(text, data.draw(st.sampled_from(CHIPS)), data.draw(st.sampled_from(MODES)))
