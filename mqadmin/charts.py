"""The overview's throughput chart, computed on the server and drawn as plain SVG.

No JavaScript and no inline styles (the pages run under a strict CSP): lines are
``<polyline>`` elements styled by CSS classes, and each minute has an invisible hover
column with a ``<title>`` tooltip.  The markup is written here rather than by a
template loop: a few hundred elements per store, and Django's template engine would
spend most of the overview's time on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

#: Drawing area (SVG user units); the SVG scales to its container's width.
WIDTH = 720
HEIGHT = 150
#: Room for the y-axis labels (left) and the time labels (bottom).
MARGIN_LEFT = 44
MARGIN_BOTTOM = 20
MARGIN_TOP = 8
#: Minutes between two time labels.
TICK_EVERY_MINUTES = 30

SERIES = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Column:
    """One minute: where its hover area is and what its tooltip says."""

    x: float
    width: float
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass
class ThroughputChart:
    minutes: int
    peak: int
    totals: dict[str, int]
    #: Series name -> polyline points ("x,y x,y ...").
    lines: dict[str, str] = field(default_factory=dict)
    #: The completed series closed down to the axis (drawn as a light area).
    area: str = ""
    columns: list[Column] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    #: (minute label, counts in SERIES order) for every minute drawn.
    minute_values: list[tuple[str, list[int]]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = MARGIN_LEFT
    plot_bottom: int = HEIGHT - MARGIN_BOTTOM
    plot_top: int = MARGIN_TOP

    @property
    def empty(self) -> bool:
        return not any(self.totals.values())

    @property
    def value_rows(self) -> list[tuple[str, list[int]]]:
        """(minute label, count per series) of every minute in which a job finished.

        The chart's numbers without hovering (a table the page offers beside the SVG).
        """
        return [(label, counts) for label, counts in self.minute_values if any(counts)]

    @property
    def series(self) -> list[tuple[str, str, int]]:
        """(state, points, total) for the template's loop."""
        return [(state, self.lines.get(state, ""), self.totals.get(state, 0)) for state in SERIES]

    def svg(self) -> SafeString:
        """The whole chart as SVG markup (every text escaped)."""
        summary = escape(self.summary)
        parts = [
            f'<svg class="throughput" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-label="{summary}"><title>{summary}</title>',
            f'<line class="axis" x1="{self.plot_left}" y1="{self.plot_bottom}" '
            f'x2="{self.width}" y2="{self.plot_bottom}"></line>',
            f'<line class="grid" x1="{self.plot_left}" y1="{self.plot_top}" '
            f'x2="{self.width}" y2="{self.plot_top}"></line>',
            f'<text class="axis-label" x="{self.plot_left - 6}" y="{self.plot_top + 8}" '
            f'text-anchor="end">{self.peak:,}</text>',
            f'<text class="axis-label" x="{self.plot_left - 6}" y="{self.plot_bottom}" '
            'text-anchor="end">0</text>',
        ]
        for tick in self.ticks:
            parts.append(
                f'<line class="tick" x1="{tick.x}" y1="{self.plot_bottom}" x2="{tick.x}" '
                f'y2="{self.plot_bottom + 4}"></line><text class="axis-label" x="{tick.x}" '
                f'y="{self.height - 4}" text-anchor="middle">{escape(tick.label)}</text>'
            )
        if not self.empty:
            parts.append(f'<polygon class="area-completed" points="{self.area}"></polygon>')
            for state in SERIES:
                parts.append(
                    f'<polyline class="line line-{state}" points="{self.lines.get(state, "")}">'
                    "</polyline>"
                )
        top, height = self.plot_top, self.plot_bottom - self.plot_top
        for column in self.columns:
            parts.append(
                f'<rect class="hover" x="{column.x}" y="{top}" width="{column.width}" '
                f'height="{height}"><title>{escape(column.title)}</title></rect>'
            )
        parts.append("</svg>")
        return mark_safe("".join(parts))  # numbers, and text escaped above

    @property
    def summary(self) -> str:
        """The chart in one sentence (the SVG's accessible description)."""
        parts = ", ".join(f"{self.totals.get(state, 0):,} {state}" for state in SERIES)
        return f"Last {self.minutes // 60} hours: {parts}; busiest minute {self.peak:,} jobs."


def _clock(minute_ms: int) -> str:
    try:
        return datetime.fromtimestamp(minute_ms / 1000, UTC).strftime("%H:%M")
    except (OverflowError, ValueError, OSError):  # a clock far outside the calendar
        return f"{minute_ms} ms"


def throughput_chart(series: dict[str, list[tuple[int, int]]]) -> ThroughputChart:
    """Lay out ``store.throughput()`` (per state: (minute start ms, count), oldest first)."""
    reference = next((points for points in series.values() if points), [])
    minutes = len(reference)
    totals = {state: sum(count for _, count in series.get(state, [])) for state in SERIES}
    peak = max((count for state in SERIES for _, count in series.get(state, [])), default=0)
    chart = ThroughputChart(minutes=minutes, peak=peak, totals=totals)
    if minutes == 0:
        return chart
    plot_width = WIDTH - MARGIN_LEFT
    plot_height = chart.plot_bottom - MARGIN_TOP
    step = plot_width / max(1, minutes - 1) if minutes > 1 else plot_width
    scale = plot_height / peak if peak else 0.0

    def x_at(index: int) -> float:
        return round(MARGIN_LEFT + index * step, 1)

    def y_at(count: int) -> float:
        return round(chart.plot_bottom - count * scale, 1)

    for state in SERIES:
        points = series.get(state, [])
        chart.lines[state] = " ".join(
            f"{x_at(i)},{y_at(count)}" for i, (_, count) in enumerate(points)
        )
    completed = series.get("completed", [])
    if completed:
        chart.area = (
            f"{x_at(0)},{chart.plot_bottom} "
            + chart.lines["completed"]
            + f" {x_at(len(completed) - 1)},{chart.plot_bottom}"
        )
    by_state = {state: series.get(state, []) for state in SERIES}
    for i, (minute_ms, _) in enumerate(reference):
        chart.minute_values.append(
            (
                f"{_clock(minute_ms)} UTC",
                [by_state[state][i][1] if i < len(by_state[state]) else 0 for state in SERIES],
            )
        )
        counts = ", ".join(
            f"{by_state[state][i][1] if i < len(by_state[state]) else 0} {state}"
            for state in SERIES
        )
        chart.columns.append(
            Column(
                x=round(x_at(i) - step / 2, 1),
                width=round(step, 2),
                title=f"{_clock(minute_ms)} UTC: {counts}",
            )
        )
        # A label centred on the right edge would be cut in half: leave it out.
        if (minute_ms // 60_000) % TICK_EVERY_MINUTES == 0 and x_at(i) <= WIDTH - 16:
            chart.ticks.append(Tick(x=x_at(i), label=_clock(minute_ms)))
    return chart
