"""Mutations of the fuzz seeds (tests/e2e/fuzzing.py), for test_fuzz_mutations.py.

Junk values, missing and unknown keys, bad and out-of-bounds slices, unknown ops, swapped
operands, wrong memories and dtypes, mismatched and huge shapes, zero/negative/huge numbers,
queue ids out of range, semaphore cycles between engines and event cycles between streams.
"""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from tests.e2e.fuzzing import CHIPS, HUGE_INT, INF, MODES, NAN, SEED_DOCS, SEEDS, dump, pick
from trnsim.dtypes import DTYPES
from trnsim.isa import INSTRUCTIONS

# ----------------------------------------------------------------------------------------------
# walking a trace document (robust to earlier mutations: everything is type-checked)

OPERANDS = (
    "src",
    "dst",
    "src0",
    "src1",
    "stationary",
    "moving",
    "predicate",
    "on_true",
    "on_false",
    "reduce_dst",
    "scale",
    "bias",
    "operand0",
    "operand1",
)
NUMERIC = (
    "value",
    "start",
    "step",
    "partition_step",
    "scale",
    "bias",
    "operand0",
    "operand1",
    "on_false",
    "queue",
    "axis",
)


def _dicts(x):
    return x if isinstance(x, dict) else {}


def instr_lists(doc) -> list[list]:
    lists = []
    if isinstance(doc.get("instructions"), list):
        lists.append(doc["instructions"])
    for k in _dicts(doc.get("kernels")).values():
        if not isinstance(k, dict):
            continue
        if isinstance(k.get("instructions"), list):
            lists.append(k["instructions"])
        for core in k.get("per_core") if isinstance(k.get("per_core"), list) else ():
            if isinstance(core, list):
                lists.append(core)
            elif isinstance(core, dict) and isinstance(core.get("instructions"), list):
                lists.append(core["instructions"])
    return lists


def instructions(doc) -> list[dict]:
    return [i for lst in instr_lists(doc) for i in lst if isinstance(i, dict)]


def tile_maps(doc) -> list[dict]:
    maps = [doc["tiles"]] if isinstance(doc.get("tiles"), dict) else []
    for k in _dicts(doc.get("kernels")).values():
        if isinstance(k, dict) and isinstance(k.get("tiles"), dict):
            maps.append(k["tiles"])
        for core in (
            k.get("per_core", ())
            if isinstance(k, dict) and isinstance(k.get("per_core"), list)
            else ()
        ):
            if isinstance(core, dict) and isinstance(core.get("tiles"), dict):
                maps.append(core["tiles"])
    return maps


def buffers(doc) -> list[tuple[str, dict]]:
    """(name, entry) of every tile and tensor whose entry is a mapping."""
    out = [(n, e) for n, e in _dicts(doc.get("tensors")).items() if isinstance(e, dict)]
    for m in tile_maps(doc):
        out += [(n, e) for n, e in m.items() if isinstance(e, dict)]
    return out


def names(doc) -> list[str]:
    return [n for n, _ in buffers(doc) if isinstance(n, str)]


def streams(doc) -> list[dict]:
    s = doc.get("streams")
    return [x for x in s if isinstance(x, dict)] if isinstance(s, list) else []


def nodes(doc) -> list[tuple]:
    """Every (container, key-or-index) in the document, parents before children."""
    out = []

    def walk(x):
        items = (
            list(x.items())
            if isinstance(x, dict)
            else (list(enumerate(x)) if isinstance(x, list) else [])
        )
        for k, v in items:
            out.append((x, k))
            walk(v)

    walk(doc)
    return out


# ----------------------------------------------------------------------------------------------
# value pools

NUMBERS = [
    0,
    -1,
    1,
    2,
    3,
    7,
    15,
    16,
    17,
    31,
    63,
    64,
    127,
    128,
    129,
    255,
    256,
    257,
    2**31,
    2**53 + 1,
    10**12,
    HUGE_INT,
    -HUGE_INT,
    0.5,
    -2.5,
    1e-45,
    1e308,
    -1e308,
    INF,
    -INF,
    NAN,
    True,
    False,
]
DIMS = [
    0,
    -1,
    1,
    2,
    3,
    6,
    32,
    33,
    63,
    64,
    65,
    127,
    128,
    129,
    511,
    512,
    513,
    4096,
    4097,
    65536,
    65537,
    10**6,
    10**9,
    10**12,
    10**30,
    1.5,
    "8",
    None,
]
JUNK = [
    None,
    0,
    -1,
    1,
    3,
    129,
    2**31,
    10**12,
    HUGE_INT,
    0.5,
    -0.0,
    1e308,
    INF,
    -INF,
    NAN,
    True,
    False,
    "",
    " ",
    "x",
    "bogus",
    "sbuf",
    "psum",
    "hbm",
    "host",
    "a\nb",
    "x[0:1]",
    "\u00e9\u4e2d",
    [],
    [1],
    [-1, 0],
    [[1]],
    {},
    {"a": 1},
    {"file": "missing.npy"},
]
BAD_NAMES = ["", " ", "nope", "x y", "a\nb", "1abc", "x[", "\t", "名前", "sbuf"]
SLICE_INTS = [
    None,
    None,
    0,
    1,
    -1,
    2,
    31,
    32,
    63,
    64,
    65,
    127,
    128,
    129,
    255,
    256,
    512,
    513,
    -128,
    -129,
    10**12,
    -(10**12),
]
STEPS = [None, None, 1, 1, 2, 3, 0, -1, 10**12]
BAD_SLICES = [
    "{n}[",
    "{n}[]",
    "{n}[,]",
    "{n}[1:2:3:4]",
    "{n}[a:b]",
    "{n}[1.5]",
    "[0:1]",
    "{n}[0:1]]",
    "{n}[[0]]",
    "{n} [ 0 : 1 ]",
    "{n}[0:1][0:1]",
    "{n}[::]",
    "{n}[-0:]",
    "{n}[99999999999999999999999:]",
    "{n}[:, :, :, :, :]",
    "{n}[0, 0, 0]",
]
DTYPE_NAMES = [
    *DTYPES,
    "bf16",
    "fp8",
    "float64",
    "int64",
    "complex64",
    "bool",
    "",
    "BFLOAT16",
    None,
    16,
]
OPS = [*INSTRUCTIONS, "conv2d", "", "MATMUL", "nop", None, 3]
ENGINES = ["tensor", "vector", "scalar", "gpsimd", "dma", "pool", "act", "", None, 0]
INITS = [
    "zeros",
    "ones",
    "random",
    "normal",
    "arange",
    "uniform",
    {"file": "missing.npy"},
    {"file": ""},
    {"fil": "x.npy"},
    0,
    [],
]
QUEUES = [-2, -1, 0, 1, 2, 15, 16, 17, 63, 2**31, 10**12, HUGE_INT, "1", 1.5, None, True]
CORES = [-1, 0, 1, 2, 3, 4, 7, 8, 16, 10**12, "0", None]
SEMS = ["ld", "mm", "act", "ok", "done", "red", "ex", "io", "tp", "s0", "new"]
SEM_VALUES = [-1, 0, 1, 1, 2, 3, 10**12, HUGE_INT, "1", 1.5, None, True]

# ----------------------------------------------------------------------------------------------
# mutations: each takes (draw, doc) and changes doc in place (or does nothing when the document
# no longer has what it needs)


def m_junk(draw, doc):
    where = pick(draw, nodes(doc))
    if where:
        value = pick(draw, JUNK)
        where[0][where[1]] = copy.deepcopy(value)


def m_delete(draw, doc):
    where = pick(draw, [(c, k) for c, k in nodes(doc)] + [(doc, k) for k in doc])
    if where:
        del where[0][where[1]]


def m_unknown_key(draw, doc):
    dicts = [doc] + [c[k] for c, k in nodes(doc) if isinstance(c[k], dict)]
    d = pick(draw, dicts)
    d[pick(draw, ["bogus", "Op", "shape ", "tile", "instruction", "kernel", "stream"])] = 1


def m_op(draw, doc):
    ins = pick(draw, instructions(doc))
    if ins is not None:
        ins["op"] = pick(draw, OPS)


def m_operand_slice(draw, doc):
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    f = pick(draw, fields)
    if f is None:
        return
    name = ins[f].split("[")[0] if isinstance(ins[f], str) else (pick(draw, names(doc)) or "x")
    if draw(st.booleans()):
        ins[f] = pick(draw, BAD_SLICES).format(n=name)
        return
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 4)) == 0:
            parts.append(str(pick(draw, SLICE_INTS[2:])))
            continue
        a, b, s = (pick(draw, SLICE_INTS), pick(draw, SLICE_INTS), pick(draw, STEPS))
        text = f"{'' if a is None else a}:{'' if b is None else b}"
        parts.append(text + (f":{s}" if s is not None else ""))
    ins[f] = f"{name}[{', '.join(parts)}]"


def m_operand_rename(draw, doc):
    """Point an operand at another tile or tensor (PSUM for SBUF, HBM for a tile, ...)."""
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    f = pick(draw, fields)
    if f is not None:
        ins[f] = pick(draw, names(doc) + BAD_NAMES[:3] + [1.0, None])


def m_operand_swap(draw, doc):
    ins = pick(draw, instructions(doc))
    fields = [f for f in OPERANDS if ins is not None and f in ins]
    if len(fields) >= 2:
        a, b = pick(draw, fields), pick(draw, fields)
        ins[a], ins[b] = ins[b], ins[a]


def _value_for(draw, meta: dict):
    """A value for an instruction field of this kind: mostly plausible, sometimes junk."""
    kind = meta["kind"]
    if draw(st.integers(0, 7)) == 0:
        return copy.deepcopy(pick(draw, JUNK))
    if kind == "choice":
        return pick(draw, [*meta["choices"], *meta["choices"], "bogus", None])
    if kind == "bool":
        return pick(draw, [True, False, True, False, 1, "yes"])
    if kind == "int":
        return pick(draw, QUEUES)
    if kind == "axes":
        return pick(draw, [0, 1, 2, -1, -3, 10**12, [1], [1, 1], [], [1, 2], [2, 1], "1"])
    return pick(draw, NUMBERS)


def _operand(draw, doc):
    """A buffer name, sometimes sliced, sometimes unknown."""
    name = pick(draw, names(doc)) or "x"
    how = draw(st.integers(0, 9))
    if how == 0:
        return pick(draw, BAD_NAMES[:4])
    if how <= 2:
        a, b = pick(draw, SLICE_INTS), pick(draw, SLICE_INTS)
        rest = ", " + pick(draw, [":", "0:1", "1:", "::2", "0"]) if draw(st.booleans()) else ""
        return f"{name}[{'' if a is None else a}:{'' if b is None else b}{rest}]"
    return name


def m_field(draw, doc):
    """Set or add one of an instruction's own fields (or, now and then, a foreign one)."""
    ins = pick(draw, instructions(doc))
    if ins is None:
        return
    cls = INSTRUCTIONS.get(ins.get("op")) if isinstance(ins.get("op"), str) else None
    fields = {f.name: f.metadata for f in cls.op_fields()} if cls else {}
    if fields and draw(st.integers(0, 9)):
        key = pick(draw, sorted(fields))
        meta = fields[key]
        if meta["kind"] == "ap" or (meta["kind"] == "ap_or_num" and draw(st.booleans())):
            ins[key] = _operand(draw, doc)
        else:
            ins[key] = _value_for(draw, meta)
    elif draw(st.booleans()):
        ins["engine"] = pick(draw, ENGINES)
    else:
        ins[pick(draw, [*NUMERIC, "alu", "func", "accumulate", "transpose"])] = pick(draw, NUMBERS)


def m_new_instruction(draw, doc):
    """Insert (or put in place of another) a new instruction of any op, its fields filled with
    the trace's buffers (mismatched shapes, memories and dtypes) and plausible values."""
    lst = pick(draw, instr_lists(doc))
    if lst is None:
        return
    cls = INSTRUCTIONS[pick(draw, sorted(INSTRUCTIONS))]
    ins = {"op": cls.OP}
    for f in cls.op_fields():
        if not f.metadata["required"] and draw(st.integers(0, 2)):
            continue
        if f.metadata["kind"] == "ap" or (
            f.metadata["kind"] == "ap_or_num" and draw(st.booleans())
        ):
            ins[f.name] = _operand(draw, doc)
        else:
            ins[f.name] = _value_for(draw, f.metadata)
    if cls.ENGINES and draw(st.booleans()):
        ins["engine"] = pick(draw, [e.label for e in (cls.ENGINE, *cls.ENGINES)])
    if draw(st.integers(0, 3)) == 0:
        ins["signal"] = {pick(draw, SEMS): 1}
    at = draw(st.integers(0, len(lst)))
    if lst and at < len(lst) and draw(st.booleans()):
        lst[at] = ins
    else:
        lst.insert(at, ins)


def m_dtype(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is not None:
        entry["dtype"] = pick(draw, DTYPE_NAMES)


def m_memory(draw, doc):
    """sbuf <-> psum for tiles, hbm <-> host for tensors, or a bad memory."""
    tiles = [e for m in tile_maps(doc) for e in m.values() if isinstance(e, dict)]
    tensors = [e for e in _dicts(doc.get("tensors")).values() if isinstance(e, dict)]
    if draw(st.booleans()) and tiles:
        pick(draw, tiles)["memory"] = pick(draw, ["sbuf", "psum", "hbm", "SBUF", None])
    elif tensors:
        pick(draw, tensors)["on"] = pick(draw, ["hbm", "host", "sbuf", None])


def m_shape(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is None:
        return
    shape = entry.get("shape")
    shape = list(shape) if isinstance(shape, list) else [128]
    how = draw(st.integers(0, 4))
    if how == 0 and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = pick(draw, DIMS)
    elif how == 1:
        shape.insert(draw(st.integers(0, len(shape))), pick(draw, DIMS))
    elif how == 2 and shape:
        shape.pop(draw(st.integers(0, len(shape) - 1)))
    elif how == 3:
        shape = pick(
            draw,
            [
                [],
                [10**12],
                [128, 10**9],
                [10**6, 10**6],
                [1, 1, 1, 1, 1, 1, 1, 1],
                [128, 1],
                [129, 4],
                "128",
                128,
            ],
        )
    else:
        shape = [pick(draw, DIMS) for _ in range(draw(st.integers(1, 3)))]
    entry["shape"] = shape


def m_init(draw, doc):
    entry = pick(draw, [e for _, e in buffers(doc)])
    if entry is not None:
        entry["init"] = copy.deepcopy(pick(draw, INITS))


def m_view(draw, doc):
    """Make a tensor a view of another (or of itself, or of a tile)."""
    tensors = _dicts(doc.get("tensors"))
    entry = pick(draw, [e for e in tensors.values() if isinstance(e, dict)])
    if entry is not None:
        entry["view"] = pick(draw, names(doc) + ["nope", None])
        if draw(st.booleans()):
            entry.pop("init", None)
        if draw(st.booleans()):
            entry.pop("dtype", None)


def m_sem(draw, doc):
    """Add or change a wait/signal with any semaphore name and value."""
    ins = pick(draw, instructions(doc))
    if ins is None:
        return
    key = pick(draw, ["wait", "signal"])
    sems = ins.get(key) if isinstance(ins.get(key), dict) else {}
    sems[pick(draw, SEMS + BAD_NAMES[:2])] = pick(draw, SEM_VALUES)
    ins[key] = sems if draw(st.integers(0, 9)) else pick(draw, [[], "ld", 1])


def m_sem_cycle(draw, doc):
    """Two instructions of one core that wait for each other (a deadlock unless an error comes
    first); on one engine queue or across engines."""
    lst = pick(draw, [x for x in instr_lists(doc) if sum(isinstance(i, dict) for i in x) >= 2])
    if lst is None:
        return
    dicts = [i for i in lst if isinstance(i, dict)]
    a, b = pick(draw, dicts), pick(draw, dicts)
    if a is b:
        return
    for ins, w, s in ((a, "cyc_a", "cyc_b"), (b, "cyc_b", "cyc_a")):
        ins["wait"] = {**_dicts(ins.get("wait")), w: 1}
        ins["signal"] = {**_dicts(ins.get("signal")), s: 1}


def m_stream(draw, doc):
    """Change the host schedule: cores, new steps, event cycles, bad steps."""
    ss = streams(doc)
    if not ss:
        kernels = list(_dicts(doc.get("kernels"))) or ["main"]
        doc["streams"] = [{"name": "s", "core": 0, "do": [{"launch": pick(draw, kernels)}]}]
        ss = doc["streams"]
    s = pick(draw, ss)
    how = draw(st.integers(0, 5))
    do = s["do"] if isinstance(s.get("do"), list) else []
    s["do"] = do
    if how == 0:
        s["core"] = pick(draw, CORES)
    elif how == 1:  # an event cycle between two streams
        other = {
            "name": f"other{len(ss)}",
            "core": pick(draw, [0, 1, 2]),
            "do": [{"wait": "ev_a"}, {"record": "ev_b"}],
        }
        do.insert(draw(st.integers(0, len(do))), {"wait": "ev_b"})
        do.insert(draw(st.integers(0, len(do))), {"record": "ev_a"})
        doc["streams"].append(other)
    elif how == 2:  # a stream that waits for an event it records later
        do.insert(0, {"wait": "late"})
        do.append({"record": "late"})
    elif how == 3:
        tensors = list(_dicts(doc.get("tensors"))) + ["nope"]
        do.insert(
            draw(st.integers(0, len(do))),
            {"copy": {"src": pick(draw, tensors), "dst": pick(draw, tensors)}},
        )
    elif how == 4:
        kernels = list(_dicts(doc.get("kernels"))) + ["main", "nope"]
        do.insert(draw(st.integers(0, len(do))), {"launch": pick(draw, kernels)})
    else:
        do.insert(
            draw(st.integers(0, len(do))),
            pick(
                draw,
                [
                    "synchronize",
                    {"synchronize": None},
                    {"record": None},
                    {"wait": "never"},
                    {"launch": None},
                    {"copy": None},
                    {"bogus": 1},
                    {"record": "a", "wait": "b"},
                    3,
                ],
            ),
        )


def m_top(draw, doc):
    """Top-level numbers and choices: lnc, seed, mode, chip, trnsim, per_core lengths."""
    key = pick(
        draw, ["lnc", "seed", "mode", "chip", "trnsim", "name", "outputs", "timing", "per_core"]
    )
    if key == "lnc":
        doc[key] = pick(draw, [0, 1, 2, 3, -1, None, "2"])
    elif key == "seed":
        doc[key] = pick(draw, [0, -1, 2**64, HUGE_INT, 1.5, None])
    elif key == "mode":
        doc[key] = pick(draw, ["functional", "timing", "fast", None])
    elif key == "chip":
        doc[key] = pick(draw, ["trn1", "trn9", None])
    elif key == "trnsim":
        doc[key] = pick(draw, [1, 2, 0, "1", None])
    elif key == "name":
        doc[key] = pick(draw, JUNK)
    elif key == "outputs":
        doc[key] = pick(draw, [names(doc)[:1], ["nope"], "x", [], None])
    elif key == "timing":
        doc[key] = pick(draw, [[{"from": "start", "to": "nope"}], [{"from": 1}], [], "x"])
    else:
        for k in _dicts(doc.get("kernels")).values():
            pc = k.get("per_core") if isinstance(k, dict) else None
            if isinstance(pc, list) and pc:
                how = draw(st.integers(0, 2))
                if how == 0:
                    pc.append(copy.deepcopy(pc[-1]))
                elif how == 1:
                    pc.pop()
                else:
                    pc.insert(0, [])


GENERAL = [
    m_junk,
    m_delete,
    m_unknown_key,
    m_op,
    m_field,
    m_dtype,
    m_shape,
    m_init,
    m_top,
    m_new_instruction,
]
OPERAND = [
    m_operand_slice,
    m_operand_rename,
    m_operand_swap,
    m_memory,
    m_dtype,
    m_shape,
    m_field,
    m_view,
    m_new_instruction,
    m_new_instruction,
]
SYNC = [m_sem, m_sem_cycle, m_stream, m_field, m_top]
HUGE = [m_shape, m_shape, m_init, m_memory, m_view, m_operand_slice]


@st.composite
def mutated(draw, mutations, max_mutations=3):
    """(trace text, chip, mode): a seed with 1..max_mutations mutations applied."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    doc = copy.deepcopy(SEED_DOCS[name])
    for _ in range(draw(st.integers(1, max_mutations))):
        draw(st.sampled_from(mutations))(draw, doc)
    chips = CHIPS[1:] if name == "per_core" and draw(st.integers(0, 7)) else CHIPS  # lnc 2
    return dump(doc), draw(st.sampled_from(chips)), draw(st.sampled_from(MODES))
