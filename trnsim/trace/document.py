"""Trace YAML -> Program (the format is the contract in `design/TRACE_FORMAT.md`).

`load(path)` / `loads(text)` validate everything a trace can get wrong without simulating: types,
unknown keys, names (tensors, tiles, kernels, events, semaphores), shapes, dtypes, init files,
operand slices, engines, and semaphores that can never reach the value waited for. Every problem
raises a `TraceError` with one line: `<file>:<line>: <key path>: <what is wrong>; expected <what>`.

Decisions the contract leaves open:
- A top-level key whose value is null counts as absent (`tensors:` with every entry commented
  out is an empty trace, `streams: ~` gives the default stream).
- `name` defaults to the trace file's stem. Tensors and tiles need `shape` and `dtype`; a view
  inherits both from the tensor it views when omitted.
- Low-level kernels take `instructions:` (one core) or `per_core:`, whose entries are either
  instruction lists or `{tiles: ..., instructions: [...]}` mappings. A kernel's `tiles:` are
  shared: every core gets its own copy of them, plus the tiles its own entry declares.
- An optional instruction field given as null takes its default.
- Names of tensors and tiles are identifiers (`[A-Za-z_][A-Za-z0-9_]*`), so that operands like
  `x[0:128, :]` can refer to them; kernels, streams, events and semaphores may be any string.
- A wait value may be 0 (trivially met; useful in repeat bodies, below).

Extension (documented in `docs/trace_extensions.md`): `repeat` blocks, wherever an instruction
list appears; see `trnsim.trace.repeat`. The semaphore check (`trnsim.trace.semaphores`) runs on the
expanded program.

Extension: `params:`, workload parameters used as `{expressions}` in string values, substituted
into the raw document before anything else reads it; see `trnsim.trace.params`.

Extension: `system:` (the system of chips the trace runs on), `rank:` (the trace is that
rank's program: a file of `trnsim run --system S rank0.yaml rank1.yaml ...`), a stream's
`rank:` and the `collective:` step; see `trnsim.trace.collective`, `trnsim.trace.ranks` and
`trnsim.trace.rank_files`.

The parts: this module reads the document and its kernels; `buffers` the tensors and tiles,
`instructions` one instruction and its operands, `repeat` a core's instruction list,
`semaphores` the deadlock check, `schedule` the streams, timing and outputs.

Speed: JSON is read by Python's `json` module (see `loads`), YAML by libyaml's event parser when
available (`trnsim.inputs.load`); the cyclic GC is paused while loading. What each speed path of
the loader saves is measured in `benchmarks/bench_load.py`'s docstring.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trnsim.errors import TraceError
from trnsim.gcpause import no_gc
from trnsim.inputs.load import load_json, load_yaml
from trnsim.inputs.validate import (
    Loc,
    check_keys,
    is_int,
    show,
    want_choice,
    want_int,
    want_list,
    want_map,
    want_name,
    want_str,
)
from trnsim.trace.buffers import parse_tensors, parse_tiles
from trnsim.trace.estimates import estimate_kernel, kernel_cores, parse_writes
from trnsim.trace.ops import check_op
from trnsim.trace.params import apply_params
from trnsim.trace.program import (
    CoreProgram,
    KernelSpec,
    OpSpec,
    Program,
    Step,
    StreamSpec,
    TensorSpec,
    TileSpec,
)
from trnsim.trace.repeat import MAX_INSTRUCTIONS, check_size, core_instructions
from trnsim.trace.schedule import parse_outputs, parse_streams, parse_timing
from trnsim.units import fmt_bytes

__all__ = ["load", "loads", "MAX_TRACE_BYTES"]

TOP_KEYS = (
    "trnsim",
    "name",
    "chip",
    "seed",
    "mode",
    "lnc",
    "outputs",
    "tensors",
    "kernels",
    "streams",
    "ops",
    "instructions",
    "tiles",
    "timing",
    "params",
    "system",
    "rank",
    "world_size",
)
EXTRA = ("cores", "writes")  # beside ops: only
KERNEL_KEYS = ("ops", "tiles", "instructions", "per_core", "estimate", "cores", "writes")
MODES = ("functional", "timing")
SHORTHAND = "main"


MAX_TRACE_BYTES = 1 << 30
"""The largest trace file `load` reads (1 GiB: a written-out JSON trace of 5 million
instructions, the instruction limit, is ~0.7 GB); `--max-trace-bytes` sets another."""


def _read_capped(path: Path, cap: int) -> bytes:
    """The file's bytes, refused beyond `cap`: by its size for a regular file (before reading
    any), by a read of at most cap + 1 bytes for a device or a pipe."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > cap:
            size = st.st_size
        else:
            data = f.read(cap + 1)
            if len(data) <= cap:
                return data
            size = None
    what = f"is {fmt_bytes(size)}, more than" if size is not None else "goes on past"
    raise TraceError(
        f"{path}:1: trace: the file {what} the {fmt_bytes(cap)} a trace may have; expected a "
        f"trace file (--max-trace-bytes raises the limit)"
    )


def load(
    path: str | Path,
    params: Mapping[str, Any] | None = None,
    *,
    allow_outside_files: bool = False,
    max_instructions: int = MAX_INSTRUCTIONS,
    max_bytes: int = MAX_TRACE_BYTES,
) -> Program:
    """Read and validate the trace file at `path` (YAML, or JSON: see `loads`); init files
    resolve against its directory. `params` sets the trace's `params:` (name -> value, see
    `trnsim.trace.params`); no more than `max_bytes` of the file are read (a device or a pipe
    such as /dev/zero would never end); the other options are `loads`'s."""
    path = Path(path)
    try:
        text = _read_capped(path, max_bytes).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(
            f"{path}:1: trace: cannot read the file ({e.__class__.__name__}: "
            f"{e}); expected a readable UTF-8 YAML file"
        ) from None
    return loads(
        text,
        source=str(path),
        base_dir=path.parent,
        params=params,
        allow_outside_files=allow_outside_files,
        max_instructions=max_instructions,
    )


def loads(
    text: str,
    source: str = "<string>",
    base_dir: str | Path = ".",
    params: Mapping[str, Any] | None = None,
    *,
    allow_outside_files: bool = False,
    max_instructions: int = MAX_INSTRUCTIONS,
) -> Program:
    """Validate trace `text`; `source` names it in errors, `base_dir` anchors init files (which
    the Program holds as absolute paths), `params` sets the trace's `params:`. Init files must
    lie inside `base_dir` (symlinks resolved) unless `allow_outside_files`; the low-level
    kernels may expand to at most `max_instructions` instructions (counted before expanding).

    JSON (a `source` ending in .json, or text starting with `{`) is read by Python's `json`
    module, many times faster than YAML but without lines: if a check fails, the text is read
    again as YAML (JSON is YAML), with lines, and checked again, so that the error names its
    line as for YAML. The instructions of a JSON trace have line 0."""
    base = Path(os.path.abspath(base_dir))
    options = (allow_outside_files, max_instructions)
    with no_gc():
        data = _json(text, source)
        if data is not _NOT_JSON:
            try:
                return _TraceParser(source, base, *options).parse(
                    apply_params(data, source, params)
                )
            except TraceError:
                pass  # again, with lines: the error below names its line
        doc = apply_params(load_yaml(text, source), source, params)
        return _TraceParser(source, base, *options).parse(doc)


_NOT_JSON = object()
_JSON_START = re.compile(r"\s*\{")


def _json(text: str, source: str) -> Any:
    """The data of `text` read as JSON, or _NOT_JSON. A .json file must be JSON (a syntax error
    is reported with its line and column); other text starting with `{` is tried as JSON, and
    left to the YAML reader if it is not (e.g. a YAML flow mapping)."""
    if source.endswith(".json"):
        return load_json(text, source)
    if _JSON_START.match(text):
        try:
            return load_json(text, source)
        except TraceError:
            return _NOT_JSON
    return _NOT_JSON


class _TraceParser:
    """One trace document -> Program. Methods parse one section each, in dependency order."""

    def __init__(
        self,
        source: str,
        base_dir: Path,
        allow_outside: bool = False,
        max_instructions: int = MAX_INSTRUCTIONS,
    ):
        self.source = source
        self.base_dir = base_dir
        self.files = (base_dir, allow_outside)  # where init files may be
        self.max_instructions = max_instructions
        self.tensors: dict[str, TensorSpec] = {}

    def parse(self, doc: Any) -> Program:
        # JSON data has no lines: its instructions get line 0 (errors found while planning
        # name them by kernel and index); a check that fails is reported from YAML, with lines
        root = Loc(self.source, 0 if type(doc) is dict else getattr(doc, "line", 1) or 1, "")
        doc = want_map(doc, root, "a mapping of top-level keys, starting with trnsim: 1")
        check_keys(doc, root, TOP_KEYS)
        get = {k: doc[k] for k in TOP_KEYS if doc.get(k) is not None}
        at = {k: root.key(doc, k) for k in TOP_KEYS}
        if "trnsim" not in get:
            root.fail("missing key 'trnsim'", "trnsim: 1 (the format version) at the top")
        if not is_int(get["trnsim"]) or get["trnsim"] != 1:
            at["trnsim"].fail(f"unsupported format version {show(get['trnsim'])}", "1")
        prog = Program(source=self.source)
        prog.name = self._name(get, at)
        prog.lines = {
            k: at[k].line for k in ("chip", "lnc", "mode", "system", "rank", "seed") if k in get
        }
        if "chip" in get:
            prog.chip = want_str(get["chip"], at["chip"], "a chip name such as trn2")
        if "system" in get:
            prog.system = want_str(
                get["system"], at["system"], "a system name such as trn2-48xl, or a YAML path"
            )
        if "seed" in get:
            prog.seed = want_int(get["seed"], at["seed"], "an integer >= 0", minimum=0)
        if "mode" in get:
            prog.mode = want_choice(get["mode"], at["mode"], MODES)
        if "lnc" in get:
            # the chip config's lnc_allowed decides which sizes run (trnsim.chip)
            prog.lnc = want_int(get["lnc"], at["lnc"], "an integer >= 1", minimum=1)
        self.tensors = prog.tensors = parse_tensors(
            get.get("tensors", {}), at["tensors"], self.files
        )
        prog.kernels = self._kernels(get, at, prog.lnc)
        if "streams" in get:
            prog.streams = parse_streams(get["streams"], at["streams"], prog.kernels, self.tensors)
        else:
            steps = [Step("launch", name) for name in prog.kernels]
            prog.streams = [StreamSpec("default", 0, steps)]
        if "world_size" in get:  # a recording's torch world (trnsim ranks replicate reads it)
            want_int(get["world_size"], at["world_size"], "the recorded job's ranks (>= 1)", 1)
        if "rank" in get:
            prog.rank = want_int(get["rank"], at["rank"], "a rank of the system (an integer >= 0)",
                                 minimum=0)  # fmt: skip
            self._on_rank(prog)
        recorded = {s.arg for st in prog.streams for s in st.steps if s.kind == "record"}
        if "timing" in get:
            prog.timing = parse_timing(get["timing"], at["timing"], recorded)
        if "outputs" in get:
            prog.outputs = parse_outputs(get["outputs"], at["outputs"], self.tensors)
        return prog

    def _on_rank(self, prog: Program) -> None:
        """A trace that is one rank's program (top-level `rank:`): each stream on that rank; a
        stream's own `rank:` must be it."""
        r, line = prog.rank, prog.lines["rank"]
        for i, st in enumerate(prog.streams):
            if st.rank is None:
                st.rank = r
                st.lines["rank"] = line
            elif st.rank != r:
                Loc(self.source, st.lines.get("rank", st.line), f"streams[{i}].rank").fail(
                    f"rank {st.rank}, but the trace is rank {r}'s (rank: {r} at line {line})",
                    f"no rank: in the stream, or rank: {r}",
                )

    def _name(self, get: dict, at: dict) -> str:
        if "name" not in get:
            return "" if self.source.startswith("<") else Path(self.source).stem
        name = get["name"]
        if isinstance(name, (int, float)) and not isinstance(name, bool):
            return str(name)
        return want_str(name, at["name"], "free text naming the trace")

    # -- kernels --------------------------------------------------------------------------------

    def _kernels(self, get: dict, at: dict, lnc: int | None) -> dict[str, KernelSpec]:
        section = want_map(
            get.get("kernels", {}),
            at["kernels"],
            "a mapping of kernel name -> {ops: [...]} or {tiles, instructions}",
        )
        self._check_size(section, get, at)
        kernels = {}
        for name, entry in section.items():
            kloc = at["kernels"].key(section, name)
            want_name(name, kloc, "kernel")
            kernels[name] = self._kernel(
                name,
                want_map(entry, kloc, "{ops: [...]} or {tiles: ..., instructions: [...]}"),
                kloc,
                lnc,
            )
        if "ops" in get and "instructions" in get:
            at["instructions"].fail(
                "both ops: and instructions: at the top level",
                "one shorthand kernel (use kernels: for more)",
            )
        if "tiles" in get and "instructions" not in get:
            at["tiles"].fail(
                "top-level tiles: without instructions:",
                "tiles: together with instructions: (or inside a kernel)",
            )
        for key in ("ops", "instructions"):
            if key in get:
                if SHORTHAND in kernels:
                    at[key].fail(
                        f"the {key}: shorthand is kernel {SHORTHAND!r}, which kernels: "
                        "also defines",
                        f"another name in kernels: or no {key}: here",
                    )
                shorthand = {k: get[k] for k in ("ops", "tiles", "instructions") if k in get}
                kloc = Loc(self.source, at[key].line, "")
                kernels[SHORTHAND] = self._kernel(SHORTHAND, shorthand, kloc, lnc, at)
        return kernels

    def _check_size(self, section: dict, get: dict, at: dict) -> None:
        """Refuse, before expanding any, kernels whose instruction lists (all cores, repeat
        blocks unrolled) add up to more than `max_instructions`; malformed entries are left to
        the kernel parser."""
        lists = []
        for name, entry in section.items():
            if not isinstance(entry, dict):
                continue
            kloc = at["kernels"].key(section, name)
            if isinstance(entry.get("instructions"), list):
                lists.append((entry["instructions"], kloc.key(entry, "instructions")))
            per_core = entry.get("per_core")
            for i, core in enumerate(per_core if isinstance(per_core, list) else ()):
                cloc = kloc.key(entry, "per_core").item(per_core, i)
                if isinstance(core, dict):
                    core, cloc = core.get("instructions"), cloc.key(core, "instructions")
                lists.append((core, cloc))
        if "instructions" in get:
            lists.append((get["instructions"], at["instructions"]))
        used, memo = 0, {}
        for value, loc in lists:
            used = check_size(value, loc, used, self.max_instructions, memo)

    def _kernel(
        self, name: str, entry: dict, loc: Loc, lnc: int | None, at: dict | None = None
    ) -> KernelSpec:
        """One kernel; `at` holds the key locations when `entry` is the top-level shorthand."""
        check_keys(entry, loc, KERNEL_KEYS)
        at = at or {k: loc.key(entry, k) for k in KERNEL_KEYS}
        given = [k for k in KERNEL_KEYS if entry.get(k) is not None and k not in EXTRA]
        if given[:1] in (["ops"], ["estimate"]) and len(given) > 1:
            at[given[1]].fail(
                f"a kernel with {given[0]}: cannot also have {given[1]}:",
                "either ops: (high level), tiles: + instructions: (low level) or estimate:",
            )
        if "instructions" in given and "per_core" in given:
            at["per_core"].fail(
                "a kernel cannot have both instructions: and per_core:",
                "instructions: for one core or per_core: for each core",
            )
        if "estimate" in given:
            return estimate_kernel(name, entry, loc, at, given, self.tensors, self.files)
        if "ops" in given:
            cores = kernel_cores(entry, at)
            writes = parse_writes(entry, at, self.tensors, self.files)
            ops = self._ops(entry["ops"], at["ops"])
            return KernelSpec(name, ops=ops, line=loc.line, cores=cores, writes=writes)
        for key in EXTRA:
            if entry.get(key) is not None:
                at[key].fail(f"{key}: in a low-level kernel", f"{key}: only beside ops:")
        shared = {}
        if "tiles" in given:
            shared = parse_tiles(entry["tiles"], at["tiles"], self.tensors, self.files)
        if "instructions" in given:
            cores = [self._core(shared, entry["instructions"], at["instructions"])]
        elif "per_core" in given:
            cores = self._per_core(shared, entry["per_core"], at["per_core"], lnc)
        else:
            loc.fail(
                "a kernel needs ops:, instructions: or per_core:",
                "ops: [...] or tiles: + instructions: [...]",
            )
        return KernelSpec(name, per_core=cores, line=loc.line)

    def _per_core(self, shared: dict, value: Any, loc: Loc, lnc: int | None) -> list:
        expected = "one instruction list (or {tiles, instructions} mapping) per physical core"
        entries = want_list(value, loc, expected)
        most = lnc or max(len(entries), 1)  # without lnc: here, the chip's lnc bounds it
        if not 1 <= len(entries) <= most:
            loc.fail(f"{len(entries)} entries", f"1 to {most} entries: {expected}")
        cores = []
        for i, entry in enumerate(entries):
            iloc = loc.item(entries, i)
            if not isinstance(entry, dict):
                cores.append(self._core(shared, entry, iloc))
                continue
            check_keys(entry, iloc, ("tiles", "instructions"))
            own = {}
            if entry.get("tiles") is not None:
                own = parse_tiles(
                    entry["tiles"], iloc.key(entry, "tiles"), self.tensors, self.files
                )
            for tile in own:
                if tile in shared:
                    iloc.key(entry, "tiles").key(entry["tiles"], tile).fail(
                        f"tile {tile!r} is also in the kernel's shared tiles:", "a new name"
                    )
            if entry.get("instructions") is None:
                iloc.fail("missing key 'instructions'", "instructions: [...] for this core")
            cores.append(
                self._core(
                    {**shared, **own}, entry["instructions"], iloc.key(entry, "instructions")
                )
            )
        return cores

    def _core(self, tiles: dict[str, TileSpec], value: Any, loc: Loc) -> CoreProgram:
        """One physical core's program (repeats expanded); each core gets its own copies of
        the tiles."""
        instrs = core_instructions(value, loc, dict.fromkeys([*tiles, *self.tensors]))
        return CoreProgram({n: replace(t) for n, t in tiles.items()}, instrs)

    def _ops(self, value: Any, loc: Loc) -> list[OpSpec]:
        expected = "a list of ops like - matmul: {a: x, b: w, out: h}"
        items = want_list(value, loc, expected)
        if not items:
            loc.fail("got an empty list", expected)
        ops = []
        for i, item in enumerate(items):
            iloc = loc.item(items, i)
            if not isinstance(item, dict) or len(item) != 1:
                iloc.fail(f"got {show(item)}", "a single-key mapping like matmul: {a: x, b: w}")
            ((op, args),) = item.items()
            want_name(op, iloc, "op")
            aloc = iloc.key(item, op)
            args = want_map(args, aloc, "a mapping of the op's arguments like {x: h, out: h}")
            for key in args:
                if not isinstance(key, str):
                    aloc.fail(f"argument name {show(key)}", "argument names that are strings")
            check_op(op, args, iloc, aloc)
            ops.append(OpSpec(op, _plain(args), aloc.line))
        return ops


def _plain(value: Any, done: dict | None = None) -> Any:
    """PosDict/PosList -> plain dict/list, recursively (op arguments are handed on as-is).
    Containers shared through YAML aliases stay shared, so `&a`/`*a` bombs cannot blow up."""
    done = {} if done is None else done
    if not isinstance(value, (dict, list)):
        return value
    if id(value) not in done:
        if isinstance(value, dict):
            done[id(value)] = {k: _plain(v, done) for k, v in value.items()}
        else:
            done[id(value)] = [_plain(v, done) for v in value]
    return done[id(value)]
