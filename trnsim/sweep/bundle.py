"""A trace as it travels to a worker: its text and the `.npy` files its `init: {file: ...}` name,
so that workers need no shared file system; and the worker's side, which lays them out again.

`TraceBundle.read(path, params_sets)` reads the trace on the submitting machine: its document
once per set of params (params may change which files it names), for its init files and its
default chip and mode. The bundle's `digest` hashes the text and the files: a sweep point is
identified by it, not by the path. Init files named by absolute paths are not moved: they must
exist on the workers. The loader's options travel with the bundle: init files outside the
trace's folder are refused by the workers' load (and not read here) unless
`allow_outside_files`, and `max_instructions` limits the trace's size as in `trnsim run`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trnsim.errors import TrnsimError
from trnsim.inputs.load import load_yaml
from trnsim.inputs.npy import inside
from trnsim.trace import MAX_INSTRUCTIONS, loads
from trnsim.trace.params import apply_params
from trnsim.trace.program import Program


@dataclass(frozen=True)
class TraceBundle:
    """A trace's content: `source` (its path as given, for messages and its default name),
    `text`, and `files` (path relative to the trace's folder -> bytes)."""

    source: str
    text: str
    files: tuple[tuple[str, bytes], ...] = ()
    digest: str = field(default="", compare=False)
    allow_outside_files: bool = False
    max_instructions: int = MAX_INSTRUCTIONS

    @staticmethod
    def read(
        path: str,
        params_sets: Iterable[Mapping[str, str]],
        allow_outside_files: bool = False,
        max_instructions: int = MAX_INSTRUCTIONS,
    ) -> tuple[TraceBundle, dict]:
        """The bundle of the trace at `path`, and for each params set (keyed by its sorted
        items) the trace's (chip, mode, system: its `system:` or None), or the TrnsimError
        its document raises. A trace that cannot be read raises TrnsimError.

        Only the document is read here (YAML, params, the init files it names), not the whole
        trace: the workers check everything else when they load it."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TrnsimError(
                f"{path}:1: trace: cannot read the file ({e.__class__.__name__}: "
                f"{e}); expected a readable UTF-8 YAML file"
            ) from None
        base = Path(path).parent
        files: dict[str, bytes] = {}
        found: dict[tuple, tuple[str, str] | TrnsimError] = {}
        for params in params_sets:
            key = tuple(sorted(params.items()))
            if key in found:
                continue
            try:
                doc = apply_params(load_yaml(text, path), path, params)
            except TrnsimError as e:
                found[key] = e
                continue
            top = doc if isinstance(doc, dict) else {}
            system = top.get("system")
            found[key] = (
                str(top.get("chip") or Program.chip),
                str(top.get("mode") or Program.mode),
                str(system) if system is not None else None,
            )
            for name in init_files(doc):
                if Path(name).is_absolute():
                    continue  # read where it is, by the workers
                if not allow_outside_files and not inside(base / name, base):
                    continue  # refused by the workers' load, naming the trace's line
                rel = Path(os.path.relpath(base / name, base)).as_posix()
                if rel not in files:
                    try:
                        files[rel] = (base / name).read_bytes()
                    except OSError:
                        pass  # the worker's load reports it, naming the trace's line
        items = tuple(sorted(files.items()))
        h = hashlib.sha256(text.encode())
        for name, data in items:
            h.update(b"\0" + name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        bundle = TraceBundle(
            path, text, items, h.hexdigest()[:16], allow_outside_files, max_instructions
        )
        return bundle, found

    def load(self, params: Mapping[str, str]) -> Program:
        """The Program, loaded from the bundle alone (init files from a private copy)."""
        base = _laid_out(self) if self.files else Path(".")
        return loads(
            self.text,
            source=self.source,
            base_dir=base,
            params=params,
            allow_outside_files=self.allow_outside_files,
            max_instructions=self.max_instructions,
        )


def init_files(doc: Any) -> list[str]:
    """The `file:` of every `init: {file: ...}` in a trace document (tensors and tiles)."""
    out: list[str] = []
    seen: set[int] = set()
    stack = [doc]
    while stack:
        node = stack.pop()
        if id(node) in seen:  # YAML aliases share containers
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            init = node.get("init")
            if isinstance(init, dict) and isinstance(init.get("file"), str):
                out.append(init["file"])
            stack += [v for v in node.values() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            stack += [v for v in node if isinstance(v, (dict, list))]
    return sorted(set(out))


# -- the worker's side: a private folder per bundle, kept while the process runs sweeps ----------

_FOLDERS: dict[str, tuple[tempfile.TemporaryDirectory, Path]] = {}
_KEEP = 8  # folders kept at most (a long-lived worker may see many traces)


def _laid_out(bundle: TraceBundle) -> Path:
    """A folder standing for the trace's, with its init files at their relative paths."""
    if bundle.digest in _FOLDERS:
        _FOLDERS[bundle.digest] = _FOLDERS.pop(bundle.digest)  # the most recently used
        return _FOLDERS[bundle.digest][1]
    while len(_FOLDERS) >= _KEEP:
        _FOLDERS.pop(next(iter(_FOLDERS)))[0].cleanup()
    tmp = tempfile.TemporaryDirectory(prefix="trnsim-sweep-")
    ups = max(sum(1 for p in PurePosixPath(n).parts if p == "..") for n, _ in bundle.files)
    folder = Path(tmp.name).joinpath(*["t"] * ups)
    folder.mkdir(parents=True, exist_ok=True)  # `t/../x.npy` needs `t` even with no file in it
    for name, data in bundle.files:
        target = Path(os.path.normpath(folder / name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    _FOLDERS[bundle.digest] = (tmp, folder)
    return folder


def forget() -> None:
    """Remove the folders laid out in this process."""
    while _FOLDERS:
        _FOLDERS.popitem()[1][0].cleanup()
