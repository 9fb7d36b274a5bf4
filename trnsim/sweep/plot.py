"""A figure from a sweep table: one metric against one key, a line per value of another.

`plot(table, x, y, hue)` reads a table written by `trnsim sweep` and draws `y` (a figure column
such as `device_time_ns`) against `x` (a grid key such as `hbm.bandwidth`, or any column). Values
with units (`2TB/s`, `448KiB`) are placed by their size and labelled as given; values that are not
quantities are placed in the order they first appear. There is a line per value of `hue`, and
per value of every other identifying column (trace, chip, grid keys, settings, mode) that
varies in the table, so no two points of a line differ in anything but `x`. Rows with an error
are left out. Each line has its own colour, dash pattern and marker (`line_style`), so a figure
of many lines (every chip and grid value) does not repeat a look, as matplotlib's cycle of 10
colours would. matplotlib is imported only here (the `plot` extra).
"""

from __future__ import annotations

from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.inputs.validate import hint
from trnsim.report.files import replacing_path
from trnsim.sweep import table
from trnsim.sweep.worker import one_line
from trnsim.units import KINDS, UnitError, parse_quantity

__all__ = ["plot", "figure", "line_style"]

# matplotlib's default colours (tab10), four dash patterns, seven filled markers
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# colour and dash repeat together every 40 lines, markers every 7 (prime to 40): 280 looks
DISTINCT_STYLES = len(COLOURS) * len(LINESTYLES) * len(MARKERS)
LEGEND_INSIDE = 10  # a legend of more lines goes beside the axes...
LEGEND_ROWS = 16  # ... in columns of this many (what the figure's height holds)


def plot(
    path: str | Path,
    x: str,
    y: str,
    hue: str | None = None,
    out: str | Path | None = None,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
) -> Path:
    """Draw the figure into `out` (PNG, SVG or PDF by its suffix; default: the table's name
    with .png) and return its path. Raises TrnsimError naming what is wrong."""
    fig = figure(path, x, y, hue, logx, logy, title)
    target = Path(out) if out else Path(path).with_suffix(".png")
    try:
        with replacing_path(target) as tmp:
            fmt = target.suffix[1:].lower() or "png"  # tmp's own suffix is not the target's
            fig.savefig(tmp, format=fmt, metadata=_metadata(target))
    except (OSError, ValueError) as e:
        raise TrnsimError(
            f"{target}: cannot write the figure ({one_line(e)}); expected a "
            "writable .png, .svg or .pdf path"
        ) from None
    return target


def figure(
    path: str | Path,
    x: str,
    y: str,
    hue: str | None = None,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
):
    """The matplotlib Figure of `plot`."""
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise TrnsimError(
            "trnsim plot draws with matplotlib, which is not installed; expected "
            "pip install 'trnsim[plot]'"
        ) from None
    path = Path(path)
    cols, rows = table.read(path)
    for option, name in (("--x", x), ("--y", y), ("--hue", hue)):
        if name is not None and name not in cols:
            raise TrnsimError(
                f"{path}: {option} {name}: no such column{hint(name, cols)}; "
                f"expected one of {', '.join(cols)}"
            )
    figures = [c for c in cols if c in table.FIGURES or c in table.SYSTEM_FIGURES]
    if y not in figures:
        raise TrnsimError(
            f"--y {y}: not a figure of the table; expected one of {', '.join(figures)}"
        )
    good = [r for r in rows if not r.get("error") and r.get(y) is not None and r.get(x) is not None]
    if not good:
        raise TrnsimError(
            f"{path}: no row has a value of {y} and {x} without an error; "
            "expected a table with at least one point that ran"
        )
    ids = ["trace", *(["system"] if "system" in cols else []), "chip"]
    ids += [*table.grid_keys(cols), "set", "mode"]
    split = ([hue] if hue and hue != x else []) + [
        c for c in ids if c not in (x, hue) and len({r.get(c) for r in good}) > 1
    ]
    positions, labels = _positions([r[x] for r in good])
    lines: dict[tuple, list[tuple[float, float]]] = {}
    for r in good:
        lines.setdefault(tuple(r.get(c) for c in split), []).append((positions[r[x]], r[y]))

    matplotlib.rcParams["svg.hashsalt"] = "trnsim"  # the same SVG for the same table
    fig = Figure(figsize=(7, 4.2), dpi=110, layout="constrained")
    ax = fig.subplots()
    for i, (key, pts) in enumerate(lines.items()):
        pts.sort()
        label = (
            ", ".join(str(v) if len(split) == 1 else f"{c}={v}" for c, v in zip(split, key)) or None
        )
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **line_style(i))
    if logx:
        ax.set_xscale("log")
    if labels is not None:
        ax.set_xticks(sorted(labels), [labels[p] for p in sorted(labels)])
        ax.minorticks_off()
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(True, alpha=0.3)
    traces = sorted({Path(r["trace"]).name for r in good})
    ax.set_title(
        title if title is not None else f"{y} against {x}: {', '.join(traces)}", fontsize="medium"
    )
    if split:
        _legend(fig, ax, len(lines), split[0] if len(split) == 1 else None)
    return fig


def _legend(fig, ax, n: int, title: str | None) -> None:
    """A few lines' legend in the axes; more lines' beside them, in columns of `LEGEND_ROWS`
    (all of it readable, not cut off at the figure's bottom), the figure widened by it so the
    axes keep their size."""
    if n <= LEGEND_INSIDE:
        ax.legend(title=title, fontsize="small")
        return
    cols = -(-n // LEGEND_ROWS)
    legend = fig.legend(loc="outside right upper", title=title, fontsize="small", ncols=cols)
    fig.draw_without_rendering()
    width = legend.get_window_extent().width / fig.dpi
    fig.set_size_inches(fig.get_figwidth() + width, fig.get_figheight())


def line_style(i: int) -> dict:
    """The look of line `i`: the colour changes every line, the dash pattern every 10 lines and
    the marker every line in a cycle of 7, so the first `DISTINCT_STYLES` lines all differ,
    neighbours differ in colour and marker, and line 0 looks as matplotlib's first line."""
    return {
        "color": COLOURS[i % len(COLOURS)],
        "linestyle": LINESTYLES[i // len(COLOURS) % len(LINESTYLES)],
        "marker": MARKERS[i % len(MARKERS)],
    }


def _positions(values: list) -> tuple[dict, dict | None]:
    """value -> x position, and position -> tick label when the values are not plain numbers
    (quantities with units are placed by size, anything else in order of appearance)."""
    distinct = list(dict.fromkeys(values))
    if all(isinstance(v, (int, float)) for v in distinct):
        return {v: v for v in distinct}, None
    for kind in KINDS:
        try:
            sizes = {v: parse_quantity(kind, v) for v in distinct}
        except UnitError:
            continue
        if len(set(sizes.values())) == len(sizes):
            return sizes, {s: str(v) for v, s in sizes.items()}
    order = {v: float(i) for i, v in enumerate(distinct)}
    return order, {i: str(v) for v, i in order.items()}


def _metadata(target: Path) -> dict:
    """No creation date in the file, so the same table gives the same image."""
    suffix = target.suffix.lower()
    if suffix == ".svg":
        return {"Date": None}
    if suffix == ".pdf":
        return {"CreationDate": None}
    return {}
