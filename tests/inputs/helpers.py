"""Shared by the tests of trnsim.inputs: a small document with known lines, and the one-line
error message of loading a text."""

import pytest

from trnsim.errors import TraceError
from trnsim.inputs.load import load_yaml

DOC = """\
a: 1
b:
  - x
  - {c: 2, d: [3, 4]}
  -
    e: 5
f: {g: 6}
"""


def err(text: str, source: str = "t.yaml") -> str:
    """The error message of loading `text`, checked to be one line."""
    with pytest.raises(TraceError) as info:
        load_yaml(text, source)
    msg = str(info.value)
    assert "\n" not in msg
    return msg
