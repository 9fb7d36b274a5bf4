"""`trnsim ranks replicate`: rank files for a larger system from a few recorded ones
(trnsim.trace.replicate)."""

from __future__ import annotations

import click

from trnsim.cli.app import echo, main
from trnsim.trace.replicate import parse_ranks, replicate


@main.group(short_help="Rank files of a torch.distributed recording: replicate.")
def ranks() -> None:
    """Work on the rank files a torch.distributed job records (one trace per rank,
    `trnsim.torch.record`; docs/distributed.md, "Record and replay").

    \b
    Example:
      trnsim ranks replicate ddp_rank0.yaml ddp_rank1.yaml --ranks 0-63 -o out/
      trnsim run --system trn2-48xl out/*.yaml
    """


@ranks.command("replicate", short_help="Write N rank files from recorded ones (same program).")
@click.argument("files", nargs=-1, required=True, metavar="RANK_FILE...")
@click.option("--ranks", "spec", required=True, metavar="RANKS",
              help="The target ranks: a range or a list (0-63, 0,2,4-7); their number a "
              "multiple of the files' ranks.")  # fmt: skip
@click.option("-o", "--out", "out", required=True, metavar="DIR",
              help="The folder to write the rank files into (created if missing).")  # fmt: skip
def ranks_replicate(files: tuple[str, ...], spec: str, out: str) -> None:
    """Write a rank file for each rank of RANKS from the recorded RANK_FILEs, for programs
    where every rank of a role runs the same program (DDP: every rank), so that `trnsim run
    --system` times a system larger than this machine can run as processes.

    The recorded files' ranks W (each file's `rank:`) stand for the target ranks: target rank
    i takes the file of recorded rank i mod |W|. Each copy gets its `rank:`; each
    collective's group over every recorded rank becomes the target ranks (a broadcast's root
    the rank at the same place); a recording's tensor prefixes r<R>_ become the target's;
    values files stay the source's. Files are named as the source with the rank replaced
    (ddp_rank0.yaml -> ddp_rank17.yaml).

    Refused, with the file and key: a group naming ranks with no file given, a group over part
    of the recorded ranks, all_gather / reduce_scatter / all_to_all(v) (their per-rank sizes
    depend on the group's size: record at the target size), send_recv and permute.

    Files recorded at the target size (`world_size:` equal to the number of RANKS: a
    virtual world's, TRNSIM_VIRTUAL_WORLD_SIZE) replicate every collective but send_recv and
    permute: each group is every rank or a mesh dimension's group (ranks base + j x stride),
    which becomes the target rank's group of that dimension.

    \b
    Examples:
      trnsim ranks replicate ddp_rank0.yaml ddp_rank1.yaml --ranks 0-63 -o out/
      trnsim ranks replicate ddp_rank0.yaml --ranks 0-7 -o out/   # a 1-rank recording
      trnsim ranks replicate fsdp2_rank0.yaml --ranks 0-63 -o out/  # recorded at a virtual 64
    """
    written = replicate(list(files), parse_ranks(spec), out)
    echo(f"wrote {len(written)} rank files to {out} ({written[0].name} ... {written[-1].name})")
