"""trnsim.sweep.plot gives every line of a figure its own look (colour, dash pattern, marker):
past matplotlib's 10 colours, and for as many lines as a sweep is likely to draw."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnsim.sweep import table
from trnsim.sweep.plot import DISTINCT_STYLES, figure, line_style

pytest.importorskip("matplotlib")

DOCS_TABLE = Path(__file__).resolve().parents[2] / "docs" / "sweep_hbm.csv"


def look(i: int) -> tuple:
    style = line_style(i)
    return style["color"], style["linestyle"], style["marker"]


def test_line_styles_are_distinct_and_start_as_matplotlib():
    assert DISTINCT_STYLES >= 40
    assert len({look(i) for i in range(DISTINCT_STYLES)}) == DISTINCT_STYLES
    assert look(0) == ("#1f77b4", "-", "o")  # matplotlib's first colour, solid, a dot
    for i in range(DISTINCT_STYLES):  # neighbours differ in colour and marker
        assert look(i)[0] != look(i + 1)[0] and look(i)[2] != look(i + 1)[2]


def chips(n: int, tmp_path: Path):
    """The figure of a table of `n` chips (the README's table's trn2 rows, renamed)."""
    cols, rows = table.read(DOCS_TABLE)
    trn2 = [r for r in rows if r["chip"] == "trn2"]
    path = tmp_path / "many.csv"
    table.write(path, [{**r, "chip": f"chip{k:02d}"} for k in range(n) for r in trn2], cols)
    return figure(path, "hbm.bandwidth", "device_time_ns", hue="chip", logx=True)


@pytest.mark.parametrize("n", [3, 12, 45])
def test_each_line_of_a_figure_has_its_own_look(n, tmp_path):
    lines = chips(n, tmp_path).axes[0].get_lines()
    assert len(lines) == n
    looks = {(ln.get_color(), ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(looks) == n


def test_a_long_legend_goes_beside_the_axes_whole(tmp_path):
    few = chips(3, tmp_path)
    assert few.axes[0].get_legend() is not None and not few.legends
    many = chips(45, tmp_path)
    assert many.axes[0].get_legend() is None
    (legend,) = many.legends
    assert len(legend.get_texts()) == 45
    assert many.get_figwidth() > few.get_figwidth()  # widened for it; the axes keep their room
    assert many.get_figheight() == few.get_figheight()
