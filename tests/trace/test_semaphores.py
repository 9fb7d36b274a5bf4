"""trace.semaphores: the static deadlock check, for the builder API and in traces."""

import pytest

from tests.trace.helpers import TILE, error
from trnsim.errors import TraceError
from trnsim.trace import check_semaphores, parse_instruction


def test_check_semaphores_for_builders():
    ins = [
        parse_instruction({"op": "memset", "dst": "t", "signal": {"s": 1}}, 0, "", line=1),
        parse_instruction({"op": "memset", "dst": "t", "wait": {"s": 2}}, 1, "", line=2),
    ]
    with pytest.raises(TraceError) as info:
        check_semaphores(ins, "kernels.k.instructions", source="api")
    assert str(info.value) == (
        "api:2: kernels.k.instructions[1].wait.s: semaphore 's' is waited on for 2 but its "
        "signals add up to only 1; expected signal increments of 's' summing to >= 2"
    )
    check_semaphores(ins[:1])


ERRORS = [
    (
        TILE + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - op: memset\n    dst: t\n"
        "    wait: {ldd: 1}\n",
        "t.yaml:10: instructions[1].wait.ldd: semaphore 'ldd' is waited on but never signalled",
    ),
    (
        TILE
        + "  - {op: memset, dst: t, signal: {ld: 1}}\n  - {op: memset, dst: t, signal: {ld: 1}}\n"
        "  - {op: memset, dst: t, wait: {ld: 3}}\n",
        "t.yaml:9: instructions[2].wait.ld: semaphore 'ld' is waited on for 3 but its signals add "
        "up to only 2; expected signal increments of 'ld' summing to >= 3",
    ),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)
