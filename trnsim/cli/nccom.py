"""`trnsim nccom`: collective benchmarks as nccom-test runs them (its flags, columns, bus
bandwidth factors and GiB units), simulated on a system config (docs/collectives.md).

One row per size: the op run once on the first `-r` ranks of the system (chip-major, as
`SystemConfig.rank_place` numbers them) on a fresh World, so that sizes do not interact. This
module parses nccom-test's arguments (`OPS`, `parse_size`, `dtype_of`) and the what-ifs, and
runs the command; `nccom_run` measures a size (and checks values), `nccom_table` prints.
"""

from __future__ import annotations

import difflib
import json
import re
from fractions import Fraction

import click

from trnsim.cli.app import echo, main
from trnsim.cli.nccom_run import CHECK_MAX_BYTES, Job, measure
from trnsim.cli.nccom_table import (
    HEADER,
    SHORT,
    GiB,
    average_busbw,
    cells,
    csv_text,
    json_doc,
    row_line,
    short,
)
from trnsim.cli.systems import system_set_option
from trnsim.collectives import ALGORITHMS, World
from trnsim.config import SystemConfig, load_system
from trnsim.dtypes import ALIASES, DTYPES, DType
from trnsim.errors import TrnsimError
from trnsim.units import UnitError, parse_bandwidth, parse_time

OPS = {
    "all_reduce": "all_reduce",
    "allr": "all_reduce",
    "all_gather": "all_gather",
    "allg": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "redsct": "reduce_scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "permute": "permute",
    "send_recv": "send_recv",
    "sendrecv": "send_recv",
}
"""nccom-test's op names and short aliases -> the collectives engine's op."""


_UNITS = {"": 1, "B": 1, "kB": 10**3}
for _i, _p in enumerate("KMGT", 1):
    _UNITS |= {_p: 2 ** (10 * _i), _p.lower(): 2 ** (10 * _i), f"{_p}iB": 2 ** (10 * _i)}
    _UNITS[f"{_p}B"] = 10 ** (3 * _i)
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")


def parse_size(text: str, option: str) -> int:
    """A size as nccom-test takes it: bytes, or K, M, G, T (binary, as nccom-test's), KiB ...
    TiB (binary), KB ... TB (decimal, as trnsim's units); a B suffix is optional."""
    m = _SIZE.fullmatch(text.strip())
    if m and m.group(2) in _UNITS:
        value = Fraction(m.group(1)) * _UNITS[m.group(2)]
        if value.denominator == 1 and value >= 1:
            return int(value)
    raise TrnsimError(
        f"{option} {text}: expected a whole number of bytes, at least 1, like 1K, 64M, 1G "
        f"(K, M, G, T binary, as nccom-test), 1KiB, 1GiB (binary) or 1KB, 1GB (decimal)"
    )


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    """lo, lo*factor, ... up to hi, as nccom-test steps."""
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return out


def dtype_of(name: str) -> DType:
    """A dtype by trnsim's name, its alias (bf16, fp32, fp16, fp8) or nccom-test's short name."""
    by_short = {v: k for k, v in SHORT.items()}
    key = by_short.get(name, ALIASES.get(name, name))
    if key not in DTYPES:
        names = list(dict.fromkeys([*SHORT.values(), *ALIASES, *DTYPES]))
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise TrnsimError(f"-d {name}: unknown datatype; {hint}expected one of {', '.join(names)}")
    return DTYPES[key]


def op_name(name: str) -> str:
    if name in OPS:
        return OPS[name]
    close = difflib.get_close_matches(name, list(OPS), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise TrnsimError(f"unknown operation '{name}'; {hint}expected one of {', '.join(OPS)}")


# ---------------------------------------------------------------------------------------------
# the command


def _pairs(values: tuple[str, ...], option: str, example: str) -> list[tuple[str, str]]:
    out = []
    for text in values:
        key, eq, value = text.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise TrnsimError(f"{option} {text}: expected {example}")
        out.append((key.strip(), value.strip()))
    return out


def _links(values, cfg: SystemConfig) -> tuple[tuple[str, float], ...]:
    """--link NAME=BANDWIDTH, each name checked against the system's links."""
    if not values:
        return ()
    topo = World.from_config(cfg).system.topology
    names = [link.name for link in topo.links]
    out = []
    for name, value in _pairs(values, "--link", "NAME=BANDWIDTH like --link c5+x=100GB/s"):
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise TrnsimError(
                f"--link {name}={value}: {cfg.name} has no link named '{name}'; {hint}links are "
                f"named like '{names[0]}' (docs/collectives.md)"
            )
        try:
            bw = parse_bandwidth(value)
        except UnitError as e:
            raise TrnsimError(f"--link {name}={value}: {e}") from None
        if bw <= 0:
            raise TrnsimError(f"--link {name}={value}: expected a bandwidth above 0")
        out.append((name, bw))
    return tuple(out)


def _delays(values, n: int) -> tuple[float, ...]:
    """--straggler RANK=DELAY -> every rank's start delay, s."""
    delays = [0.0] * n
    for rank, value in _pairs(values, "--straggler", "RANK=DELAY like --straggler 5=20us"):
        if not rank.isdigit() or int(rank) >= n:
            raise TrnsimError(
                f"--straggler {rank}={value}: expected a rank of the group, 0 to {n - 1}"
            )
        try:
            delay = parse_time(value)
        except UnitError as e:
            raise TrnsimError(f"--straggler {rank}={value}: {e}") from None
        if delay < 0:
            raise TrnsimError(f"--straggler {rank}={value}: expected a delay of 0 or more")
        delays[int(rank)] = delay
    return tuple(delays) if any(delays) else ()


def _algorithm(name: str | None) -> str | None:
    if name is None or name == "auto":
        return None
    if name.partition(":")[0] not in ALGORITHMS:
        names = ["auto", *ALGORITHMS]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise TrnsimError(
            f"--algorithm {name}: unknown algorithm; {hint}expected one of {', '.join(names)} "
            f"(or hierarchical:INTRA+INTER)"
        )
    return name


@main.command(short_help="Collective benchmarks as nccom-test runs them, on a system config.")
@click.argument("operation", metavar="OP")
@click.option(
    "-r",
    "--nranks",
    type=int,
    default=None,
    metavar="R",
    help="Ranks: the first R of the system, chip-major (rank r on chip r // ranks_per_chip, "
    "docs/systems.md). Default: all of them.",
)
@click.option(
    "-N",
    "--nnodes",
    type=int,
    default=None,
    metavar="N",
    help="Nodes joined by EFA: sets the system's nodes (as --set nodes=N).",
)
@click.option(
    "-b",
    "--minbytes",
    default="1K",
    show_default=True,
    metavar="SIZE",
    help="The first size of a rank's buffer: bytes, or K, M, G, T (binary, as nccom-test), "
    "KiB, MiB, GiB (binary), KB, MB, GB (decimal).",
)
@click.option(
    "-e",
    "--maxbytes",
    default="1G",
    show_default=True,
    metavar="SIZE",
    help="The last size at most.",
)
@click.option(
    "-f",
    "--stepfactor",
    type=int,
    default=2,
    show_default=True,
    metavar="F",
    help="Multiply the size by F from one row to the next (at least 2).",
)
@click.option(
    "-d",
    "--datatype",
    default="fp32",
    show_default=True,
    metavar="TYPE",
    help="fp32, bf16, fp16, fp8 (fp8_e4m3), fp8_e5m2, or a trnsim dtype name "
    "(float32, bfloat16, int8, ...).",
)
@click.option(
    "--system",
    default="trn2-48xl",
    show_default=True,
    metavar="NAME|PATH",
    help="The system config: a bundled name (trnsim systems list) or a YAML path.",
)
@system_set_option
@click.option(
    "--algorithm",
    default=None,
    metavar="NAME",
    help="Force an algorithm: ring, mesh, mesh1, rdh, kangaring, hierarchical or "
    "hierarchical:INTRA+INTER. Default: the system's selection by size.",
)
@click.option("--show-algorithm", is_flag=True, help="Add the algorithm column.")
@click.option(
    "--link",
    "links",
    multiple=True,
    metavar="NAME=BANDWIDTH",
    help="One link direction's bandwidth (repeatable): a degraded link, e.g. --link "
    "c5+x=100GB/s (torus c<chip><+|-><x|y|z>, switch c<chip>.<level>.up|down, "
    "EFA c<chip>.efa.out|in).",
)
@click.option(
    "--straggler",
    "stragglers",
    multiple=True,
    metavar="RANK=DELAY",
    help="Start rank RANK of the group DELAY late (repeatable), e.g. --straggler 5=20us.",
)
@click.option(
    "--links-only",
    is_flag=True,
    help="Links alone: DMA, HBM and reductions unbounded, no start cost (the closed "
    "forms of docs/collectives.md).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Run with values and compare every rank's output with numpy: a check column "
    f"of OK or FAIL, exit 1 on a FAIL (sizes x ranks up to {CHECK_MAX_BYTES >> 20} MiB).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, one row per size.")
@click.option(
    "-n",
    "--iters",
    type=int,
    default=None,
    metavar="N",
    help="Accepted for nccom-test's command lines; one run per size is exact here.",
)
@click.option(
    "-w",
    "--warmup_iters",
    type=int,
    default=None,
    metavar="N",
    help="Accepted for nccom-test's command lines; no warm-up is simulated.",
)
def nccom(
    operation,
    nranks,
    nnodes,
    minbytes,
    maxbytes,
    stepfactor,
    datatype,
    system,
    overrides,
    algorithm,
    show_algorithm,
    links,
    stragglers,
    links_only,
    check,
    as_json,
    as_csv,
    iters,
    warmup_iters,
) -> None:
    """Run collective OP over a range of sizes as nccom-test does, simulated on a system
    config, and print a row per size: size(B) count(elems) type time(us) algbw(GB/s)
    busbw(GB/s) [algorithm], then the average bus bandwidth.

    OP: all_reduce (allr), all_gather (allg), reduce_scatter (redsct), all_to_all (alltoall),
    permute, send_recv (sendrecv). The size is a rank's buffer: the whole vector of an
    all_reduce, the output of an all_gather, the input of a reduce_scatter, a rank's send
    buffer of an all_to_all, the message of send_recv and permute (rounded down to whole
    elements). send_recv is nccl-tests': every rank sends to the next and receives from the
    one before; permute sends each rank's buffer to the next around a ring of the fabric.

    algbw = size / time, busbw = algbw x 2(r-1)/r for all_reduce, (r-1)/r for all_gather,
    reduce_scatter and all_to_all, 1 for send_recv and permute; GB/s are GiB/s, as nccom-test
    prints them. Each size runs once on a fresh system (the simulation is deterministic):
    the model and its assumptions are in docs/collectives.md.

    \b
    Examples:
      trnsim nccom all_reduce -r 64 -b 1KiB -e 1GiB -f 2 -d fp32 --show-algorithm
      trnsim nccom allg -N 2 -b 1M -e 256M -f 4 -d bf16
      trnsim nccom allr -b 64M -e 64M --set topology.link.bandwidth=128GB/s
      trnsim nccom allr -b 1M -e 1G --set collectives.rdh_max=8MB --show-algorithm
      trnsim nccom allr -b 256M -e 256M --link c5+x=64GB/s --straggler 7=50us
      trnsim nccom redsct --system trn3-ultraserver -r 128 --csv > redsct.csv
      trnsim nccom allr -r 16 -b 1K -e 1M --check
    """
    if as_json and as_csv:
        raise TrnsimError("--json and --csv: expected at most one of them")
    op = op_name(operation)
    dt = dtype_of(datatype)
    lo, hi = parse_size(minbytes, "-b"), parse_size(maxbytes, "-e")
    if lo > hi:
        raise TrnsimError(f"-b {minbytes} -e {maxbytes}: expected -b at most -e")
    if lo < dt.itemsize:
        raise TrnsimError(f"-b {minbytes}: less than one {short(dt)} element ({dt.itemsize} B)")
    if stepfactor < 2:
        raise TrnsimError(f"-f {stepfactor}: expected a step factor of 2 or more")
    if nnodes is not None and nnodes < 1:
        raise TrnsimError(f"-N {nnodes}: expected 1 node or more")
    cfg = load_system(system, ([f"nodes={nnodes}"] if nnodes else []) + list(overrides))
    n = cfg.ranks if nranks is None else nranks
    if not 1 <= n <= cfg.ranks:
        raise TrnsimError(
            f"-r {n}: {cfg.name} has {cfg.ranks} ranks ({cfg.chips} chips x "
            f"{cfg.ranks_per_chip}); expected 1 to {cfg.ranks} (-N for more nodes)"
        )
    if op in ("send_recv", "permute") and n < 2:
        raise TrnsimError(f"-r {n}: {op} needs 2 ranks or more")
    if check and hi * n > CHECK_MAX_BYTES:
        raise TrnsimError(
            f"--check: -e {maxbytes} x {n} ranks is more than {CHECK_MAX_BYTES >> 20} MiB of "
            f"values; --check keeps every rank's buffers: use a smaller -e"
        )
    job = Job(
        cfg,
        op,
        n,
        dt,
        _algorithm(algorithm),
        _links(links, cfg),
        _delays(stragglers, n),
        links_only,
    ).with_pairs()
    rows = []
    stream = not (as_json or as_csv)
    if stream:
        echo(f"# {op} on {cfg.name}: {_ranks_text(cfg, n)}, {short(dt)}; GB/s are GiB/s")
        echo(row_line(HEADER, show_algorithm, check))
    for size in sizes(lo, hi, stepfactor):
        row = measure(job, size, check)
        rows.append(row)
        if stream:
            echo(row_line(cells(row), show_algorithm, check))
    if as_json:
        settings = {
            "set": list(overrides),
            "algorithm": algorithm or "auto",
            "links": dict(job.links),
            "stragglers": {str(i): d for i, d in enumerate(job.delays) if d},
            "links_only": links_only,
        }
        echo(json.dumps(json_doc(job, rows, settings), indent=2))
    elif as_csv:
        echo(csv_text(rows), nl=False)
    else:
        echo(f"Avg bus bandwidth:  {average_busbw(rows) / GiB:.4f} GB/s")
    if any(r.check == "FAIL" for r in rows):
        failed = sum(r.check == "FAIL" for r in rows)
        echo(f"error: --check: {failed} of {len(rows)} sizes differ from numpy", err=True)
        click.get_current_context().exit(1)


def _ranks_text(cfg: SystemConfig, n: int) -> str:
    """'ranks 0-15 of 64 (4 of 16 chips, 4 a chip)': the group, for the table's first line."""
    per = cfg.ranks_per_chip
    group = "rank 0" if n == 1 else f"ranks 0-{n - 1}"
    nodes = f", {cfg.nodes} nodes" if cfg.nodes > 1 else ""
    chips = -(-n // per)
    return f"{group} of {cfg.ranks} ({chips} of {cfg.chips} chips, {per} a chip{nodes})"
