"""Writing output files safely: every writer of trnsim goes through `replacing` (or
`replacing_path`, for libraries that take a path), and the CLI checks each output path with
`check_file` / `check_folder` before it simulates anything.

A file is written under a temporary name in its own folder and renamed over its target only
when complete (`os.replace`, atomic on POSIX): a run interrupted while writing leaves the old
file, or none, never half of one. A target that exists but is no regular file (`/dev/null`, a
FIFO, `/dev/stdout`) is not replaced (that would replace the device): the file is written in a
temporary folder and copied into it, so that no library is given the device's own path (pyarrow
removes the path it failed to write: as root, `/dev/full` itself).

A write the machine refuses (a full disk, `WRITE_REFUSED`) is the user's condition, not a bug:
it is raised as an `OutputError` naming the file, and the option that named it when the CLI
checked it (`check_file` remembers it).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from trnsim.errors import TrnsimError

__all__ = [
    "replacing",
    "replacing_path",
    "check_file",
    "check_folder",
    "check_distinct",
    "OutputError",
    "WRITE_REFUSED",
]

# errnos of a write the machine refused: a full disk or quota, a file too large for the file
# system (or RLIMIT_FSIZE), a failing device, a file system remounted read-only
WRITE_REFUSED = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EROFS")
    if hasattr(errno, name)
)

_OPTIONS: dict[str, str] = {}  # resolved path -> the option `check_file`/`check_folder` saw it for


class OutputError(TrnsimError):
    """Writing an output failed for the machine's reasons (`WRITE_REFUSED`): `path` as the writer
    gave it, `reason` the OS's words ("No space left on device"); `named` what named the file
    (`--perfetto `, `--out-dir out: `) when known."""

    def __init__(self, path: str | Path, reason: str, named: str = ""):
        self.path, self.reason = path, reason
        super().__init__(f"{named}{path}: {reason}")


def _refused(e: OSError, path: str | Path) -> OutputError:
    """`e`, a refused write of `path`, naming the option the CLI checked it (or its folder) for."""
    real = os.path.realpath(path)
    named = ""
    if real in _OPTIONS:
        named = f"{_OPTIONS[real]} "
    elif os.path.dirname(real) in _OPTIONS:  # a file in a folder output (--out-dir)
        named = f"{_OPTIONS[os.path.dirname(real)]} {Path(path).parent}: "
    return OutputError(path, os.strerror(e.errno), named)


def _special(path: Path) -> bool:
    """An existing target that is no regular file nor folder (a device, a FIFO)."""
    return path.exists() and not path.is_file() and not path.is_dir()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def replacing_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` (with the same suffix, for writers that choose the format
    by it) to write to; renamed to `path` when the block ends without an exception, removed
    otherwise (KeyboardInterrupt included); for a device or FIFO, one in a temporary folder,
    copied into it. A refused write (`WRITE_REFUSED`) is raised as an OutputError."""
    try:
        with _replacing_path(path) as tmp:
            yield tmp
    except OSError as e:
        if e.errno not in WRITE_REFUSED:
            raise
        raise _refused(e, path) from e


@contextmanager
def _replacing_path(path: str | Path) -> Iterator[Path]:
    """`replacing_path` without the translation of a refused write."""
    target = Path(os.path.realpath(path))  # a symlink is written through, not replaced
    if _special(target):
        with _copied_in(target, Path(path).name) as tmp:
            yield tmp
        return
    fd, name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}"
    )
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # as a plain open() would have made it
        os.replace(tmp, target)
    except OSError as e:
        why = _why_cut_short(tmp) if e.errno is None else None
        tmp.unlink(missing_ok=True)
        if why is not None:
            raise why from e
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _why_cut_short(tmp: Path) -> OSError | None:
    """numpy (`tofile`) reports a write the OS cut short as an OSError without errno: the OS's
    reason, from one more block written to the file (removed anyway), or None."""
    try:
        with open(tmp, "ab") as fh:
            fh.write(bytes(1 << 16))
    except OSError as e:
        return e if e.errno in WRITE_REFUSED else None
    return None


@contextmanager
def _copied_in(device: Path, name: str) -> Iterator[Path]:
    """A path `name` in a temporary folder, copied into `device` when the block ends without an
    exception; the folder removed in any case."""
    with tempfile.TemporaryDirectory(prefix="trnsim-") as folder:
        tmp = Path(folder) / name
        yield tmp
        with open(tmp, "rb") as src, open(device, "wb") as dst:
            shutil.copyfileobj(src, dst)


@contextmanager
def replacing(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """`open(path, mode, **kwargs)` for writing, through `replacing_path`."""
    with replacing_path(path) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


# -- checks before a run: one-line errors naming the option ---------------------------------------


def _writable(folder: Path) -> str | None:
    """None if a file can be created in `folder`, else why not (probed: permission bits do not
    tell for root, nor for a read-only file system)."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".trnsim-probe-")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    os.unlink(name)
    return None


def _parent_problem(path: Path, given: str | Path, make: bool = False) -> str | None:
    """Why no file can be created at `path` (resolved; `given` as the user wrote it). `make`: the
    writer creates missing folders, so the nearest existing one must take them."""
    parent, shown = path.parent, Path(given).parent
    if make and not parent.exists():
        while not parent.exists():
            parent = parent.parent
        shown = parent
    if not parent.exists():
        return f"folder {shown} does not exist"
    if not parent.is_dir():
        return f"{shown} is not a folder"
    why = _writable(parent)
    return f"cannot write in {shown} ({why})" if why else None


def check_file(option: str, path: str | Path, make_folders: bool = False) -> None:
    """A file the run will write: its folder must exist (or, with `make_folders`, be creatable)
    and be writable, and it must not be a folder. Raises TrnsimError `--option path: why`;
    remembers `option` for an OutputError when the write fails later."""
    p = Path(os.path.realpath(path))
    if p.is_dir():
        problem = "is a folder; expected a file name"
    elif _special(p):
        problem = None
    else:
        problem = _parent_problem(p, path, make_folders)
    if problem:
        raise TrnsimError(f"{option} {path}: {problem}")
    _OPTIONS[str(p)] = option


def check_folder(option: str, path: str | Path, make_folders: bool = False) -> None:
    """A folder the run will write files into (created if missing, its parent must exist, or
    with `make_folders` be creatable)."""
    p = Path(os.path.realpath(path))
    if p.exists() and not p.is_dir():
        problem = "is a file; expected a folder"
    elif p.is_dir():
        why = _writable(p)
        problem = f"cannot write in it ({why})" if why else None
    else:
        problem = _parent_problem(p, path, make_folders)
    if problem:
        raise TrnsimError(f"{option} {path}: {problem}")
    _OPTIONS[str(p)] = option


def _same(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def check_distinct(
    outputs: Iterable[tuple[str, str | Path | None]], inputs: Iterable[str | Path | None]
) -> None:
    """No two outputs ((option, path) pairs, path None when not given) name the same file, and
    none names an input (the trace, a config, an init file): writing it would destroy it."""
    given = [(o, p) for o, p in outputs if p]
    inputs = [i for i in inputs if i]
    for i, (option, path) in enumerate(given):
        if _special(Path(os.path.realpath(path))):
            continue
        for other, other_path in given[:i]:
            if _same(path, other_path):
                raise TrnsimError(
                    f"{option} {path}: {other} names the same file; give each output its own"
                )
        for source in inputs:
            if _same(path, source):
                also = "" if str(source) == str(path) else f" ({source})"
                raise TrnsimError(
                    f"{option} {path}: is an input of this run{also}; writing it would destroy "
                    "it: name another file"
                )
