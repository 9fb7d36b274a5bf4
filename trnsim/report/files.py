"""Writing output files safely: every writer of trnsim goes through `replacing` (or
`replacing_path`, for libraries that take a path), and the CLI checks each output path with
`check_file` / `check_folder` before it simulates anything.

A file is written under a temporary name in its own folder and renamed over its target only
when complete (`os.replace`, atomic on POSIX): a run interrupted while writing leaves the old
file, or none, never half of one. A target that exists but is no regular file (`/dev/null`, a
FIFO, `/dev/stdout`) is written in place, as renaming over it would replace the device.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from trnsim.errors import TrnsimError

__all__ = ["replacing", "replacing_path", "check_file", "check_folder", "check_distinct"]


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
    otherwise (KeyboardInterrupt included)."""
    target = Path(os.path.realpath(path))  # a symlink is written through, not replaced
    if _special(target):
        yield Path(path)
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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


def _parent_problem(path: Path, given: str | Path) -> str | None:
    """Why no file can be created at `path` (resolved; `given` as the user wrote it)."""
    parent, shown = path.parent, Path(given).parent
    if not parent.exists():
        return f"folder {shown} does not exist"
    if not parent.is_dir():
        return f"{shown} is not a folder"
    why = _writable(parent)
    return f"cannot write in {shown} ({why})" if why else None


def check_file(option: str, path: str | Path) -> None:
    """A file the run will write: its folder must exist and be writable, and it must not be a
    folder. Raises TrnsimError `--option path: why`."""
    p = Path(os.path.realpath(path))
    if p.is_dir():
        problem = "is a folder; expected a file name"
    elif _special(p):
        return
    else:
        problem = _parent_problem(p, path)
    if problem:
        raise TrnsimError(f"{option} {path}: {problem}")


def check_folder(option: str, path: str | Path) -> None:
    """A folder the run will write files into (created if missing, its parent must exist)."""
    p = Path(os.path.realpath(path))
    if p.exists() and not p.is_dir():
        problem = "is a file; expected a folder"
    elif p.is_dir():
        why = _writable(p)
        problem = f"cannot write in it ({why})" if why else None
    else:
        problem = _parent_problem(p, path)
    if problem:
        raise TrnsimError(f"{option} {path}: {problem}")


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
