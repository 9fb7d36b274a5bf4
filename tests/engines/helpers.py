"""Helpers shared by the engine tests (import them: `from tests.engines.helpers import rejects`)."""

import pytest

from trnsim.errors import SimError


def rejects(engine, ins, *words: str) -> str:
    """`engine.check(ins)` raises a SimError whose message starts by naming the instruction,
    `instruction <index> (<op>): `, and contains each of `words`. Returns the message."""
    with pytest.raises(SimError) as err:
        engine.check(ins)
    msg = str(err.value)
    assert msg.startswith(f"instruction {ins.index} ({ins.OP}): "), msg
    for w in words:
        assert w in msg, (w, msg)
    return msg
