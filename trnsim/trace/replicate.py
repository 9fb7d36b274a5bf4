"""Rank files for a larger system from recorded ones: `trnsim ranks replicate` (docs/distributed.md,
"Many ranks from a few").

A torch.distributed job whose ranks of a role all run the same program (DDP: every rank) can
be recorded with a few processes and replayed on many ranks: the recorded files (ranks W, each
file's `rank:`) stand for the target ranks T, |T| a multiple of |W|, the i-th target rank
taking the file of W's (i mod |W|)-th rank. Each written file is its source with:

- `rank:` (top level and any stream's) the target rank, `name:` and the file name with it;
- each collective's `group:` over every recorded rank (W, in sorted order) becoming T, and a
  broadcast's `root` the rank at the same place of T;
- tensor names prefixed `r<src>_` (a recording with values) renamed `r<dst>_`, and values files
  (`init: {file: ...}`) and a `system:` path kept pointing at the source's files.

What cannot be replicated is a one-line error naming the file and key: a group naming a rank
with no file given, a group over part of the recorded ranks (a sub-group's replicas are not
defined by the files: record the roles' ranks), a collective whose per-rank sizes depend on
the group's size (all_gather, reduce_scatter, all_to_all, all_to_allv: record at the target
size), send_recv and permute (rank pairs), |T| not a multiple of |W|.

Files recorded at the target size (top-level `world_size:` = |T|: a virtual world's,
trnsim.torch.virtual) hold the target's sizes already: every collective but send_recv and
permute replicates, each group being every recorded rank or a DeviceMesh dimension's group of
the file's rank (an arithmetic progression, `mesh_group`), which becomes the target rank's group of
that dimension.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from trnsim.errors import TrnsimError
from trnsim.report.files import replacing

__all__ = ["mesh_group", "parse_ranks", "replicate"]

# collectives whose per-rank bytes do not depend on the group's size
SIZE_FREE = ("all_reduce", "broadcast")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def parse_ranks(spec: str) -> list[int]:
    """'0-63' or '0,2,4-7' -> the ranks, ascending and distinct."""
    out: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m or (m[2] is not None and int(m[2]) < int(m[1])):
            raise TrnsimError(f"--ranks {spec}: '{part}' is not a rank or a range a-b (a <= b); "
                              "expected e.g. 0-63 or 0,2,4-7")  # fmt: skip
        out.update(range(int(m[1]), int(m[2] if m[2] is not None else m[1]) + 1))
    return sorted(out)


def replicate(files: list[str | Path], ranks: list[int], out: str | Path) -> list[Path]:
    """Write a rank file per rank of `ranks` into folder `out` from the recorded `files`
    (module docstring); returns the paths written, in rank order."""
    sources = [_load(Path(f)) for f in files]
    by_rank: dict[int, tuple[Path, dict]] = {}
    for path, doc in sources:
        r = doc.get("rank")
        if not isinstance(r, int) or isinstance(r, bool) or r < 0:
            raise TrnsimError(f"{path}: rank: {'missing' if r is None else repr(r)}; expected "
                              "the rank a recording writes at the top (rank: 0)")  # fmt: skip
        if r in by_rank:
            raise TrnsimError(f"{path}: rank: {r} is also {by_rank[r][0]}'s; expected one file "
                              "per recorded rank")  # fmt: skip
        by_rank[r] = (path, doc)
    world = sorted(by_rank)
    sized = _recorded_size(by_rank) == len(ranks)  # recorded at the target size: any op
    if len(ranks) % len(world):
        raise TrnsimError(f"--ranks: {len(ranks)} ranks is not a multiple of the {len(world)} "
                          f"recorded ranks {world} (target rank i takes the file of recorded "
                          f"rank i mod {len(world)})")  # fmt: skip
    for path, doc in by_rank.values():  # every error before anything is written
        if sized:
            _mesh_collectives(path, doc, len(ranks))
        else:
            _collectives(path, doc, world, ranks)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TrnsimError(f"-o {out}: is a file; expected a folder")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, dst in enumerate(ranks):
        path, doc = by_rank[world[i % len(world)]]
        name, new = _copy(path, doc, dst, world, ranks, out, i if sized else None)
        if path.suffix == ".json":  # (JSON writes and reads ~10x faster: many ranks)
            target, text = out / f"{name}.json", json.dumps(new)
        else:
            target = out / f"{name}{path.suffix if path.suffix in ('.yaml', '.yml') else '.yaml'}"
            text = yaml.dump(new, Dumper=_Dumper, sort_keys=False, width=100,
                             default_flow_style=None)  # fmt: skip
        with replacing(target) as fh:  # never a half-written rank file
            fh.write(text)
        written.append(target)
    return written


def _load(path: Path) -> tuple[Path, dict]:
    try:
        text = path.read_text()
    except OSError as e:
        raise TrnsimError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_Loader)
    except json.JSONDecodeError as e:
        raise TrnsimError(f"{path}: not JSON: {e}") from None
    except yaml.YAMLError as e:
        raise TrnsimError(f"{path}: not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("streams"), list):
        raise TrnsimError(f"{path}: not a trace (no streams:); expected a recorded rank file")
    return path, doc


def _steps(doc: dict):
    """(key path, step) of each step of each stream, nested do: lists included."""

    def walk(items, where):
        for j, s in enumerate(items if isinstance(items, list) else []):
            if isinstance(s, dict):
                yield f"{where}[{j}]", s
                for k in ("do", "body"):
                    if isinstance(s.get(k), list):
                        yield from walk(s[k], f"{where}[{j}].{k}")

    for i, st in enumerate(doc["streams"]):
        if isinstance(st, dict):
            yield from walk(st.get("do"), f"streams[{i}].do")


def _collectives(path: Path, doc: dict, world: list[int], ranks: list[int]) -> None:
    """Check that every collective of the file can be replicated (module docstring)."""
    for where, s in _steps(doc):
        c = s.get("collective")
        if not isinstance(c, dict):
            continue
        key = f"{path}: {where}.collective"
        op, group = c.get("op"), c.get("group", "all")
        if op not in SIZE_FREE:
            raise TrnsimError(f"{key}.op: {op}'s per-rank sizes depend on the group's size, so "
                              f"a replica of it at {len(ranks)} ranks is not this recording's; "
                              "only all_reduce and broadcast replicate (record at the target "
                              "size instead)")  # fmt: skip
        if group == "all":
            continue
        if not isinstance(group, list):
            raise TrnsimError(f"{key}.group: {group!r}; expected a list of ranks")
        missing = sorted(set(group) - set(world))
        if missing:
            raise TrnsimError(f"{key}.group: {group} names rank(s) {missing}, which have no file "
                              f"given (files for ranks {world}); give every rank of the "
                              "recorded job")  # fmt: skip
        if sorted(group) != world:
            raise TrnsimError(f"{key}.group: {group} is part of the recorded ranks {world}: only "
                              "collectives over every recorded rank replicate (a sub-group's "
                              "replicas are not defined by the files)")  # fmt: skip
        if group != world:
            raise TrnsimError(f"{key}.group: {group} is not in rank order {world}; the replica's "
                              "group order would be undefined")  # fmt: skip


def _recorded_size(by_rank: dict) -> int | None:
    """The world size the files were recorded in (their `world_size:`, one for all), or None
    (files without it: written before it existed, or not by a recording)."""
    sizes = {doc.get("world_size") for _, doc in by_rank.values()}
    if len(sizes) > 1:
        shown = ", ".join(f"{p}: {d.get('world_size')}" for p, d in by_rank.values())
        raise TrnsimError(f"world_size: the files disagree ({shown}); expected the ranks of "
                          "one recorded job")  # fmt: skip
    n = sizes.pop()
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def mesh_group(group: list, src: int, dst: int, n: int) -> list[int] | None:
    """The group of rank `dst` that plays the part `group` (a DeviceMesh dimension's group of
    rank `src` in a world of `n`: an arithmetic progression base + j x stride, j < k, in blocks
    of stride x k that divide n) plays for `src`; None when `group` is not such a group."""
    k = len(group)
    if k == 1:
        return [dst] if group == [src] else None
    stride = group[1] - group[0]
    block = stride * k
    if stride < 1 or n % block or group != list(range(group[0], group[0] + block, stride)):
        return None
    if group[0] != src % stride + src // block * block:
        return None
    base = dst % stride + dst // block * block
    return list(range(base, base + block, stride))


def _mesh_collectives(path: Path, doc: dict, n: int) -> None:
    """Check the collectives of a file recorded at the target size `n` (a virtual world's):
    each group is every rank or a mesh dimension's group of the file's rank (`mesh_group`)."""
    src = doc["rank"]
    for where, s in _steps(doc):
        c = s.get("collective")
        if not isinstance(c, dict):
            continue
        key = f"{path}: {where}.collective"
        op, group = c.get("op"), c.get("group", "all")
        if op in ("send_recv", "permute"):
            raise TrnsimError(f"{key}.op: {op} pairs given ranks; its replicas at other ranks "
                              "are not defined by the file")  # fmt: skip
        if group == "all":
            continue
        if not isinstance(group, list) or not all(isinstance(r, int) for r in group):
            raise TrnsimError(f"{key}.group: {group!r}; expected a list of ranks")
        if max(group) >= n or (len(group) < n and mesh_group(group, src, src, n) is None):
            raise TrnsimError(f"{key}.group: {group} is not a group of rank {src} in a mesh of "
                              f"the recorded {n} ranks (ranks base + j x stride); its replicas "
                              "at other ranks are not defined by the file")  # fmt: skip


def _copy(path: Path, doc: dict, dst: int, world, ranks, out: Path,
          index: int | None = None) -> tuple[str, dict]:  # fmt: skip
    """Rank `dst`'s copy of `doc`. `index`: dst's place in the target ranks when the file was
    recorded at the target size (its groups are mesh groups, moved to dst's: `mesh_group`)."""
    src = doc["rank"]
    old = f"r{src}_"
    tensors = doc.get("tensors") or {}
    names = {n: f"r{dst}_{n[len(old) :]}" for n in tensors if n.startswith(old)}
    if names and len(names) != len(tensors):
        names = {}  # (not a recording's prefixes: every name or none)
    place = {r: ranks[i] for i, r in enumerate(world)}
    base = path.parent

    def walk(x, parent_key=None):
        if isinstance(x, dict):
            y = {}
            for k, v in x.items():
                k2 = names.get(k, k) if parent_key in ("tensors", "outputs") else k
                if k == "collective" and isinstance(v, dict) and index is not None:
                    v = dict(v)
                    group = v.get("group")
                    if isinstance(group, list):
                        n = len(ranks)
                        moved = mesh_group(group, src, index, n) if len(group) < n else group
                        v["group"] = [ranks[r] for r in moved]
                        if v.get("root") in group:
                            v["root"] = v["group"][group.index(v["root"])]
                elif k == "collective" and isinstance(v, dict):
                    v = dict(v)
                    if isinstance(v.get("group"), list):
                        v["group"] = list(ranks)
                    if v.get("root") in place:
                        v["root"] = place[v["root"]]
                elif k == "rank" and v == src:
                    v = dst
                elif k == "file" and isinstance(v, str) and not os.path.isabs(v):
                    v = os.path.relpath(base / v, out)
                y[k2] = walk(v, k)
            return y
        if isinstance(x, list):
            return [walk(v, parent_key) for v in x]
        if isinstance(x, str):
            return names.get(x, x)
        return x

    new = walk(doc)
    sysname = doc.get("system")
    if isinstance(sysname, str) and sysname.endswith((".yaml", ".yml")) and not \
            os.path.isabs(sysname):  # fmt: skip
        new["system"] = os.path.relpath(base / sysname, out)
    stem = path.stem
    tag = f"rank{src}"
    name = stem[: stem.rindex(tag)] + f"rank{dst}" + stem[stem.rindex(tag) + len(tag):] \
        if tag in stem else f"{stem}_rank{dst}"  # fmt: skip
    new["name"] = name
    return name, new
