"""The benchmark as a grouped bar chart (PNG): workloads on x, one bar per configuration, the oracle
as a marker over each group, the ceiling the bars are read against.

matplotlib is imported inside ``write_png`` and only there: the server package never needs it, only
``python -m benchmarks.bench.run --png``. The figure is drawn on its own Agg canvas, not through pyplot,
so no global backend or figure state is touched.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench.plan import ORACLE

BAR_GROUP_WIDTH = 0.8  # share of a workload's slot on the x axis taken by its bars
FIGURE_SIZE = (11, 5)  # inches
DPI = 110
LEGEND_COLUMNS = 4
LEGEND_CHARS = 150  # characters of small legend text a row of the figure's width holds
LABEL_WIDTH = 48  # longer configuration names (six drafters joined by '+') wrap after a '+'


def write_png(path: str | Path, title: str, workloads: list[str], configs: list[str], rows: dict[str, dict],
              ylabel: str) -> None:
    """``rows``: tokens/s by workload, then configuration name (None: not measured, no bar)."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bars = [c for c in configs if c != ORACLE]
    width = BAR_GROUP_WIDTH / max(len(bars), 1)
    fig = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, name in enumerate(bars):
        xs = [x - BAR_GROUP_WIDTH / 2 + (i + 0.5) * width for x in range(len(workloads))]
        color = colormaps["tab20"](i) if len(bars) > 10 else None  # the default cycle repeats after 10
        ax.bar(xs, [rows[w][name] or 0.0 for w in workloads], width, label=wrap(name), color=color)
    if ORACLE in configs:
        points = [(x, rows[w][ORACLE]) for x, w in enumerate(workloads) if rows[w][ORACLE] is not None]
        ax.hlines([y for _, y in points], [x - BAR_GROUP_WIDTH / 2 for x, _ in points],
                  [x + BAR_GROUP_WIDTH / 2 for x, _ in points], colors="black", linewidth=2, zorder=3,
                  label="oracle (ceiling)")
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    longest = max((len(line) for c in configs for line in wrap(c).splitlines()), default=1)
    ncols = max(1, min(LEGEND_COLUMNS, LEGEND_CHARS // (longest + 6)))  # no entry cut off at the edges
    fig.legend(loc="outside lower center", ncols=ncols, fontsize="small")  # below: bars stay clear
    fig.savefig(path, format="png")


def wrap(name: str) -> str:
    """A configuration name in lines of at most ``LABEL_WIDTH`` characters, broken after a '+'."""
    lines, line = [], ""
    for part in name.split("+"):
        if line and len(line) + len(part) + 2 > LABEL_WIDTH:  # "+" joins it, "+" may end the line
            lines.append(line + "+")
            line = ""
        line = f"{line}+{part}" if line else part
    lines.append(line)
    return "\n".join(lines)
