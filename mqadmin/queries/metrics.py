"""The per-job-name metrics page (``views/metrics.py``, ``job_metrics.html``).

Sidekiq's Metrics page is the model.  For each job name of each store over the last
hour, 24 hours or 72 hours: runs, failures, failure rate, p50/p95/max run time and a
small SVG bar chart of runs (failures drawn over them).  Everything comes from the
per-minute and per-hour aggregates the store writes at ack time
(:func:`store.monitoring.job_name_metrics`), never from scanning jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from mqadmin import services

#: Period -> its words on the page.
PERIODS = {"1h": "last hour", "24h": "last 24 hours", "72h": "last 72 hours"}

CHART_WIDTH = 180

CHART_HEIGHT = 36


@dataclass
class NameRow:
    metrics: Any
    chart: SafeString

    @property
    def name(self) -> str:
        return str(self.metrics.name)

    @property
    def failure_percent(self) -> str:
        if not self.metrics.runs:
            return "—"  # no run, no rate
        return f"{self.metrics.failure_rate * 100:.1f} %"


@dataclass
class StoreMetrics:
    store: str
    rows: list[NameRow] = field(default_factory=list)
    error: str | None = None
    #: Job names the store knows (rows show at most MAX_JOB_NAMES of them).
    names_total: int = 0

    @property
    def truncated(self) -> bool:
        return self.names_total > len(self.rows)

    @property
    def runs(self) -> int:
        return sum(r.metrics.runs for r in self.rows)

    @property
    def failures(self) -> int:
        return sum(r.metrics.failures for r in self.rows)


def overview(period: str, only_store: str | None = None) -> list[StoreMetrics]:
    """Every configured store (or one); a store that cannot be reached is reported."""
    from store.errors import StoreFailure
    from store.monitoring import MAX_JOB_NAMES, job_name_metrics

    def read(store: services.ConfiguredStore, job_store: Any) -> StoreMetrics:
        names = job_store.job_names()
        per_name = job_name_metrics(job_store, period, names=names[:MAX_JOB_NAMES])
        rows = [NameRow(m, run_chart(m, period)) for m in per_name]
        return StoreMetrics(store.name, rows, names_total=len(names))

    def failed(store: services.ConfiguredStore, error: str) -> StoreMetrics:
        return StoreMetrics(store.name, error=error)

    return services.for_each_store(read, failed, only=only_store or None, errors=(StoreFailure,))


def _slot_label(start_ms: int, period: str) -> str:
    try:
        moment = datetime.fromtimestamp(start_ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):  # a clock far outside the calendar
        return f"{start_ms} ms"
    return moment.strftime("%H:%M" if period == "1h" else "%b %d %H:00")


def run_chart(metrics: Any, period: str) -> SafeString:
    """Bars of runs per slot, failures drawn over them in the failure colour."""
    series = metrics.series
    peak = max((s.runs for s in series), default=0)
    summary = (
        f"{metrics.name}, {PERIODS[period]}: {metrics.runs:,} runs, {metrics.failures:,} failed; "
        f"busiest {'minute' if period == '1h' else 'hour'} {peak:,} runs."
    )
    parts = [
        f'<svg class="run-chart" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" '
        f'aria-label="{escape(summary)}"><title>{escape(summary)}</title>',
        f'<line class="axis" x1="0" y1="{CHART_HEIGHT}" x2="{CHART_WIDTH}" y2="{CHART_HEIGHT}"></line>',
    ]
    if series:
        step = CHART_WIDTH / len(series)
        scale = (CHART_HEIGHT - 2) / peak if peak else 0.0
        for i, slot in enumerate(series):
            x = round(i * step, 2)
            width = round(max(step - 0.5, 0.5), 2)
            label = escape(
                f"{_slot_label(slot.start, period)} UTC: {slot.runs:,} runs, {slot.failures:,} failed"
            )
            if slot.runs:
                h = round(slot.runs * scale, 2)
                parts.append(
                    f'<rect class="bar-runs" x="{x}" y="{round(CHART_HEIGHT - h, 2)}" '
                    f'width="{width}" height="{h}"></rect>'
                )
            if slot.failures:
                h = round(slot.failures * scale, 2)
                parts.append(
                    f'<rect class="bar-failures" x="{x}" y="{round(CHART_HEIGHT - h, 2)}" '
                    f'width="{width}" height="{h}"></rect>'
                )
            parts.append(
                f'<rect class="hover" x="{x}" y="0" width="{round(step, 2)}" '
                f'height="{CHART_HEIGHT}"><title>{label}</title></rect>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # numbers, and every text escaped above
