"""trace.collective and trace.ranks: the `system:` key, a stream's `rank:`, the `collective:`
step (each field as read, one exact error per way it can be wrong) and a trace placed on a
system (ranks by default, groups of `all`, errors at the step's line)."""

import pytest

from tests.trace.helpers import T, error, line, parse
from trnsim.config import load_system
from trnsim.errors import TraceError
from trnsim.trace.ranks import place, stream_ranks

TENSORS = T + (
    "tensors:\n"
    "  g: {shape: [128, 64], dtype: bfloat16}\n"
    "  full: {shape: [512, 64], dtype: bfloat16}\n"
    "  f32: {shape: [128, 64], dtype: float32}\n"
    "  h: {shape: [128, 64], dtype: bfloat16, on: host}\n"
)


def steps(*collectives: str, rank: str = "rank: 1") -> str:
    body = "".join(f"      - collective: {c}\n" for c in collectives)
    return TENSORS + f"streams:\n  - name: a\n    {rank}\n    do:\n" + body


def one(text: str):
    return parse(text).streams[0].steps[0].arg


def test_system_and_rank_are_read():
    p = parse("trnsim: 1\nsystem: trn2-48xl\nstreams:\n  - {name: a, rank: 5, do: []}\n")
    assert p.system == "trn2-48xl" and p.lines["system"] == 2
    assert p.streams[0].rank == 5 and p.ranks is None
    assert parse(T).system is None and parse(T).streams[0].rank is None


def test_a_collective_on_a_tensor():
    c = one(steps("{op: all_reduce, group: [0, 1], tensor: g, reduce_op: max}"))
    assert (c.op, c.group, c.tensor, c.out, c.nbytes, c.dtype.name) == (
        "all_reduce", (0, 1), "g", None, 128 * 64 * 2, "bfloat16")  # fmt: skip
    assert (c.reduce_op, c.algorithm, c.root, c.pairs) == ("max", None, None, ())
    assert c.line == line(steps("x"), "collective")


def test_sizes_the_engine_takes():
    ag = one(steps("{op: all_gather, group: [0, 1, 2, 3], tensor: g, out: full}"))
    assert ag.nbytes == 512 * 64 * 2  # the output
    rs = one(steps("{op: reduce_scatter, group: [0, 1, 2, 3], tensor: full, out: g}"))
    assert rs.nbytes == 512 * 64 * 2  # the input
    assert one(steps("{op: all_gather, tensor: full}")).nbytes == 512 * 64 * 2  # in place
    c = one(steps("{op: all_reduce, bytes: 64MiB, dtype: bfloat16, algorithm: auto}"))
    assert (c.group, c.tensor, c.nbytes, c.dtype.name, c.algorithm) == (
        None, None, 64 << 20, "bfloat16", None)  # fmt: skip
    assert one(steps("{op: all_reduce, bytes: 4096}")).dtype.name == "float32"


def test_root_pairs_and_algorithms():
    assert one(steps("{op: broadcast, group: [0, 1], root: 1, tensor: g}")).root == 1
    p = one(steps("{op: permute, group: [0, 1], pairs: [[0, 1], [1, 0]], tensor: g}"))
    assert p.pairs == ((0, 1), (1, 0))
    alg = one(steps("{op: all_reduce, tensor: g, algorithm: 'hierarchical:ring+rdh'}"))
    assert alg.algorithm == "hierarchical:ring+rdh"
    assert one(steps("{op: send_recv, group: [3, 1], tensor: g}")).group == (3, 1)


C = "t.yaml:11: streams[0].do[0].collective"
ERRORS = [
    ("[all_reduce]", f"{C}: got a list; expected {{op: all_reduce"),
    ("{group: [0]}", f"{C}: missing key 'op'; expected op: one of all_reduce, all_gather"),
    (
        "{op: allreduce, tensor: g}",
        f"{C}.op: unknown collective 'allreduce' (did you mean "
        "'all_reduce'?); expected one of all_reduce",
    ),  # fmt: skip
    ("{op: all_reduce, tensr: g}", f"{C}.tensr: unknown key 'tensr' (did you mean 'tensor'?)"),
    ("{op: all_reduce, group: [], tensor: g}", f"{C}.group: an empty group; expected a list"),
    ("{op: all_reduce, group: [0, 0], tensor: g}", f"{C}.group[1]: rank 0 is in the group twice"),
    ("{op: all_reduce, group: [0, -1], tensor: g}", f"{C}.group[1]: got -1; expected a rank"),
    (
        "{op: all_reduce, group: every, tensor: g}",
        f"{C}.group: got 'every'; expected a list of distinct ranks like [0, 1, 2, 3], or all",
    ),  # fmt: skip
    ("{op: all_reduce, group: [0, 1]}", f"{C}: missing key 'tensor' (or 'bytes')"),
    ("{op: all_reduce, tensor: gg}", f"{C}.tensor: unknown tensor 'gg' (did you mean 'g'?)"),
    ("{op: all_reduce, tensor: h}", f"{C}.tensor: tensor h is host memory; expected a device"),
    ("{op: all_reduce, tensor: g, bytes: 4096}", f"{C}.bytes: both tensor: and bytes:"),
    (
        "{op: all_reduce, tensor: g, dtype: float32}",
        f"{C}.dtype: float32, but tensor g is "
        "bfloat16; expected the tensor's dtype (bfloat16), or no dtype:",
    ),  # fmt: skip
    ("{op: all_reduce, bytes: 4096, dtype: float33}", f"{C}.dtype: unknown dtype 'float33'"),
    (
        "{op: all_reduce, bytes: 4095}",
        f"{C}.bytes: got 4095; expected a size like 64MiB or "
        "1048576: a whole number of float32 elements",
    ),  # fmt: skip
    ("{op: all_reduce, bytes: 64Mb}", f"{C}.bytes: got '64Mb'; expected a size"),
    ("{op: all_reduce, out: g, bytes: 64}", f"{C}.out: out: without tensor:"),
    (
        "{op: all_gather, tensor: g, reduce_op: sum}",
        f"{C}.reduce_op: all_gather reduces "
        "nothing; expected reduce_op: only beside all_reduce and reduce_scatter",
    ),  # fmt: skip
    (
        "{op: all_reduce, tensor: g, reduce_op: avg}",
        f"{C}.reduce_op: got 'avg'; expected one of sum, max, min, prod",
    ),  # fmt: skip
    (
        "{op: all_reduce, tensor: g, algorithm: rings}",
        f"{C}.algorithm: unknown algorithm 'rings' (did you mean 'ring'?)",
    ),  # fmt: skip
    (
        "{op: all_reduce, tensor: g, algorithm: 'hierarchical:ring'}",
        f"{C}.algorithm: unknown "
        "pair 'ring' in 'hierarchical:ring'; expected hierarchical:INTRA+INTER",
    ),  # fmt: skip
    ("{op: all_reduce, tensor: g, root: 0}", f"{C}.root: all_reduce has no root"),
    (
        "{op: broadcast, group: [0, 1], tensor: g, root: 2}",
        f"{C}.root: rank 2 is not in the group; expected one of 0, 1",
    ),  # fmt: skip
    ("{op: permute, tensor: g}", f"{C}: missing key 'pairs'"),
    (
        "{op: permute, tensor: g, pairs: [[0, 1, 2]]}",
        f"{C}.pairs[0]: got a list; expected a list of [source, target] rank pairs",
    ),  # fmt: skip
    (
        "{op: permute, tensor: g, pairs: [[0, 1], [0, 2]]}",
        f"{C}.pairs: a rank is a source twice",
    ),  # fmt: skip
    (
        "{op: permute, group: [0, 1], tensor: g, pairs: [[0, 2]]}",
        f"{C}.pairs[0]: rank 2 is not in the group",
    ),  # fmt: skip
    ("{op: all_reduce, tensor: g, pairs: [[0, 1]]}", f"{C}.pairs: all_reduce takes no pairs"),
    (
        "{op: send_recv, tensor: g}",
        f"{C}.group: send_recv on every rank; expected a group of two ranks: [source, target]",
    ),  # fmt: skip
    (
        "{op: all_reduce, tensor: g, out: f32}",
        f"{C}.out: tensor f32 is float32 but g is "
        "bfloat16; expected an output of the input's dtype",
    ),  # fmt: skip
    (
        "{op: all_reduce, tensor: g, out: full}",
        f"{C}.out: tensor full has 65536 bytes, g 16384; "
        "expected an output of the input's size for all_reduce",
    ),  # fmt: skip
    (
        "{op: all_gather, group: [0, 1], tensor: g, out: full}",
        f"{C}.out: tensor full has 65536 "
        "bytes and g 16384 in a group of 2; expected an output of the input times",
    ),  # fmt: skip
    (
        "{op: reduce_scatter, tensor: g, out: full}",
        f"{C}.out: tensor g has 16384 bytes and full "
        "65536; expected an output of the input over the group's size",
    ),  # fmt: skip
]


@pytest.mark.parametrize("step, expected", ERRORS, ids=[e[1][len(C) :][:40] for e in ERRORS])
def test_collective_errors(step, expected):
    assert error(steps(step)).startswith(expected)


def test_stream_errors():
    assert error(T + "streams:\n  - {name: a, rank: -2, do: []}\n").startswith(
        "t.yaml:3: streams[0].rank: got -2; expected a rank of the system (an integer >= 0)"
    )
    assert error(T + "streams:\n  - {name: a, rank: 1, core: 1, do: []}\n").startswith(
        "t.yaml:3: streams[0].rank: both core: and rank:; expected rank:"
    )
    assert error(T + "system: [trn2]\n").startswith(
        "t.yaml:2: system: got a list; expected a system name such as trn2-48xl"
    )
    assert error(T + "systm: trn2-48xl\n").startswith(
        "t.yaml:2: systm: unknown key 'systm' (did you mean 'system'?)"
    )


# -- placed on a system ------------------------------------------------------------------------

TRN2 = load_system("trn2-48xl")  # 64 ranks: 4 a chip, on its 4 logical cores (LNC 2)


def placed(text: str, system=TRN2):
    return place(parse(text), system)


def test_ranks_by_default_and_by_key():
    text = TENSORS + (
        "streams:\n  - {name: a, core: 2, do: []}\n  - {name: b, rank: 13, do: []}\n"
        "  - {name: c, do: []}\n"
    )
    p = placed(text)
    assert [(s.rank, s.core) for s in p.streams] == [(2, 2), (13, 1), (0, 0)]
    assert p.ranks == 64 and stream_ranks(p) == [2, 13, 0]
    assert stream_ranks(parse(text)) == [None, None, None]
    two = load_system("trn2-48xl", ["ranks_per_chip=2"])  # ranks on logical cores 0 and 2
    assert [(s.rank, s.core) for s in placed(text.replace("core: 2", "core: 0"), two).streams][1:] \
        == [(13, 2), (0, 0)]  # fmt: skip


def test_groups_and_roots_once_placed():
    p = placed(steps("{op: all_reduce, tensor: g}", "{op: broadcast, group: [3, 1], tensor: g}"))
    ar, bc = (s.arg for s in p.streams[0].steps)
    assert ar.group == tuple(range(64)) and bc.root == 3
    original = parse(steps("{op: all_reduce, tensor: g}"))
    place(original, TRN2)
    assert original.streams[0].steps[0].arg.group is None  # the program itself is unchanged


def test_placement_errors():
    def bad(text, system=TRN2):
        with pytest.raises(TraceError) as e:
            placed(text, system)
        return str(e.value)

    assert bad(steps("{op: all_reduce, tensor: g}", rank="rank: 64")) == (
        "t.yaml:9: streams[0].rank: rank 64 does not exist: trn2-48xl has ranks 0..63; "
        "expected a rank of the system"
    )
    two = load_system("trn2-48xl", ["ranks_per_chip=2"])
    assert bad(steps("{op: all_reduce, tensor: g}", rank="core: 1"), two).startswith(
        "t.yaml:9: streams[0].core: logical core 1 of chip 0 holds no rank of trn2-48xl (its "
        "ranks are on logical cores 0, 2); expected one of those, or rank:"
    )
    assert bad(steps("{op: all_reduce, group: [0, 70], tensor: g}")).startswith(
        "t.yaml:11: streams[0].do[0].collective.group: rank 70 does not exist"
    )
    assert bad(steps("{op: all_reduce, group: [0, 2], tensor: g}")) == (
        "t.yaml:11: streams[0].do[0].collective.group: the stream's rank 1 is not in the group "
        "(0, 2); expected a group holding the rank that issues it (each rank of a group issues "
        "the step)"
    )
    assert bad(steps("{op: all_gather, tensor: g, out: full}")).startswith(
        "t.yaml:11: streams[0].do[0].collective.out: tensor full has 65536 bytes and g 16384, "
        "in a group of 64; expected full of 64 x g's size"
    )
    assert bad(T + "lnc: 1\nstreams:\n  - {name: a, do: []}\n").startswith(
        "t.yaml:2: lnc: 1, but trn2-48xl runs its chips at lnc 2; expected lnc: 2 or none"
    )
