"""trace.schedule: one exact error per way `streams:`, `timing:` and `outputs:` can be wrong
(their valid forms are in test_document's examples)."""

import pytest

from tests.trace.helpers import TENS, K, T, error

ERRORS = [
    # streams
    (
        T + "streams: {name: s}\n",
        "t.yaml:2: streams: got a mapping with key name; expected a list of streams",
    ),
    (T + "streams:\n  - {do: []}\n", "t.yaml:3: streams[0]: missing key 'name'"),
    (
        T + "streams:\n  - {name: s, do: []}\n  - {name: s, do: []}\n",
        "t.yaml:4: streams[1].name: duplicate stream name 's'; expected unique names",
    ),
    (
        T + "streams:\n  - {name: s, core: -1, do: []}\n",
        "t.yaml:3: streams[0].core: got -1; expected a logical core index >= 0",
    ),
    (
        T + "streams:\n  - {name: s, cores: 1, do: []}\n",
        "t.yaml:3: streams[0].cores: unknown key 'cores' (did you mean 'core'?)",
    ),
    (
        K
        + "    ops: [{relu: {x: a, out: a}}]\nstreams:\n  - name: s\n    do:\n      - launch: kk\n",
        "t.yaml:8: streams[0].do[0].launch: unknown kernel 'kk' (did you mean 'k'?); "
        "expected one of k",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - record: a\n  - name: u\n    do:\n"
        "      - wait: b\n",
        "t.yaml:8: streams[1].do[0].wait: event 'b' is never recorded; expected an event",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - synchronise\n",
        "t.yaml:5: streams[0].do[0]: got 'synchronise' (did you mean 'synchronize'?)",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - {record: a, wait: a}\n",
        "t.yaml:5: streams[0].do[0]: got a mapping with keys record, wait; "
        "expected record: ev, wait: ev,",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - launh: k\n",
        "t.yaml:5: streams[0].do[0].launh: unknown step 'launh' (did you mean 'launch'?)",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - synchronize: now\n",
        "t.yaml:5: streams[0].do[0].synchronize: synchronize takes no argument",
    ),
    (
        T + "streams:\n  - name: s\n    do:\n      - record: [a]\n",
        "t.yaml:5: streams[0].do[0].record: got a list; expected a event name",
    ),
    (
        TENS + "streams:\n  - name: s\n    do:\n      - copy: {src: x, dst: 'y[0:2]'}\n",
        "t.yaml:7: streams[0].do[0].copy.dst: unknown tensor 'y'; expected one of x",
    ),
    (
        TENS + "streams:\n  - name: s\n    do:\n      - copy: {src: x}\n",
        "t.yaml:7: streams[0].do[0].copy: missing key 'dst'",
    ),
    # timing and outputs
    (
        T
        + "streams:\n  - {name: s, do: [record: done_a]}\ntiming:\n  - {from: done_a, to: done_b}\n",
        "t.yaml:5: timing[0].to: event 'done_b' is never recorded (did you mean 'done_a'?); "
        "expected an event some stream records (record: name)",
    ),
    (T + "timing:\n  - {from: a}\n", "t.yaml:3: timing[0].from: event 'a' is never recorded"),
    (
        T + "streams:\n  - {name: s, do: [record: a]}\ntiming:\n  - {from: a}\n",
        "t.yaml:5: timing[0]: missing key 'to'; expected {from: ev1, to: ev2}",
    ),
    (T + "timing:\n  - {start: a}\n", "t.yaml:3: timing[0].start: unknown key 'start'"),
    (TENS + "outputs: [x, y]\n", "t.yaml:4: outputs[1]: unknown tensor 'y'; expected one of x"),
    (TENS + "outputs: [x, x]\n", "t.yaml:4: outputs[1]: 'x' is listed twice"),
    (TENS + "outputs: x\n", "t.yaml:4: outputs: got 'x'; expected a list of tensor names"),
]


@pytest.mark.parametrize("text, start", ERRORS)
def test_errors_name_file_line_and_key(text, start):
    assert error(text).startswith(start)
