"""memory.buffer.bind: an operand resolved against its buffer, with errors that name where."""

import re

import pytest

from trnsim.dtypes import dtype
from trnsim.errors import SimError
from trnsim.isa import Ap, Matmul
from trnsim.memory.buffer import Buffer, bind


def _tile():
    return Buffer("t", "sbuf", (128, 64), dtype("bfloat16"))


def test_bind_resolves_the_slice():
    ref = bind(Ap("t", ((0, 32, None), 5)), _tile(), "here")
    assert (ref.ranges, ref.shape, str(ref)) == (((0, 32, 1), (5, 6, 1)), (32,), "t[0:32, 5]")


@pytest.mark.parametrize(
    "where, named", [("memset dst", "memset dst"), ((Matmul(index=3), "moving"), None)]
)
def test_bind_errors_name_where_written_out_only_then(where, named):
    named = named or "instruction 3 (matmul) moving"
    with pytest.raises(
        SimError, match=rf"^{re.escape(named)}: index 64 is out of bounds for dim 1"
    ):
        bind(Ap("t", ((0, 8, None), 64)), _tile(), where)
