"""The dashboard's pure helpers: cadence words, next run times, the chart layout,
permalink query strings, and the escaping of the JSON and time template tags."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.http import QueryDict

from mqadmin import cadence, forms
from mqadmin.charts import throughput_chart
from mqadmin.queries.explorer import JobQuery
from mqadmin.queries.job import failure_of
from mqadmin.templatetags import mqadmin_tags
from store import MISSING, ScheduleRecord


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("5 * * * *", "every hour at minute 5"),
        ("0 */6 * * *", "every 6 hours at minute 0"),
        ("30 2 * * *", "every day at 02:30"),
        ("0 7 * * 1-5", "at 07:00 on Monday to Friday"),
        ("0 9,17 * * mon-fri", "at 09:00 and 17:00 on Monday to Friday"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("15 10 * 1,7 0", "at 10:15 on Sunday, in January and July"),
        ("not cron", "cron “not cron”"),
    ],
)
def test_cron_in_words(expr: str, words: str) -> None:
    assert cadence.describe_cron(expr) == words


@pytest.mark.parametrize(
    ("every_ms", "words"),
    [
        (60_000, "every minute"),
        (900_000, "every 15 minutes"),
        (3_600_000, "every hour"),
        (86_400_000, "every day"),
        (1500, "every 1500 ms"),
    ],
)
def test_intervals_in_words(every_ms: int, words: str) -> None:
    assert cadence.describe_every(every_ms) == words


def test_next_five_cron_runs_follow_the_time_zone_across_dst() -> None:
    # 2026-03-27 (Fri) 12:00 UTC; Berlin switches to summer time on Sunday 29 March.
    now = int(datetime(2026, 3, 27, 12, tzinfo=UTC).timestamp() * 1000)
    schedule = ScheduleRecord(
        key="k",
        job_name="j",
        cron="0 7 * * *",
        tz="Europe/Berlin",
        next_run_at=int(datetime(2026, 3, 28, 6, tzinfo=UTC).timestamp() * 1000),
    )

    runs = cadence.next_run_times(schedule, now)

    hours = [datetime.fromtimestamp(r / 1000, UTC).strftime("%m-%d %H:%M") for r in runs]
    assert hours == ["03-28 06:00", "03-29 05:00", "03-30 05:00", "03-31 05:00", "04-01 05:00"]


def test_chart_layout_scales_to_the_busiest_minute() -> None:
    minute = 60_000
    start = 1_800_000_000_000 // minute * minute
    series = {
        "completed": [(start + k * minute, c) for k, c in enumerate([0, 4, 2, 8])],
        "failed": [(start + k * minute, c) for k, c in enumerate([0, 1, 0, 0])],
        "cancelled": [(start + k * minute, 0) for k in range(4)],
    }

    chart = throughput_chart(series)

    assert chart.peak == 8 and chart.totals == {"completed": 14, "failed": 1, "cancelled": 0}
    points = [tuple(map(float, p.split(","))) for p in chart.lines["completed"].split()]
    assert points[0][1] == chart.plot_bottom and points[3][1] == chart.plot_top
    assert points[0][0] == chart.plot_left and points[3][0] == chart.width
    assert len(chart.columns) == 4
    assert "4 completed, 1 failed, 0 cancelled" in chart.columns[1].title
    assert not chart.empty


def test_an_empty_chart() -> None:
    assert throughput_chart({"completed": [], "failed": [], "cancelled": []}).empty


def test_a_permalink_query_string_round_trips_through_the_form(settings: Any) -> None:
    settings.MQ_STORES = {"main": {"prefix": "unused"}}
    query = JobQuery(
        store="main",
        queue="q&x",
        name="n=1",
        states=("waiting", "failed"),
        metadata={"tenant": "a=b", "k": ""},
        order_by="finished_at",
        order="asc",
        limit=20,
        cursor="123:j-1",
    )

    text = forms.query_string(query)
    form = forms.JobFilterForm(QueryDict(text))

    assert form.is_valid(), form.errors
    assert form.to_query("other") == query


def test_failure_of_reads_only_the_worker_failure_shape() -> None:
    assert (
        failure_of(
            {
                "error": {
                    "type": "KeyError",
                    "module": "builtins",
                    "message": "x",
                    "kind": "error",
                    "traceback": "tb",
                }
            }
        )
        is not None
    )
    assert failure_of({"error": "just a string"}) is None
    assert failure_of(MISSING) is None
    assert failure_of([1, 2]) is None


def test_json_block_escapes_keys_and_values_and_cuts_long_strings() -> None:
    html = mqadmin_tags.json_block({"<k>": "<script>", "long": "x" * 1000, "n": 1.5, "b": False})

    assert "<script>" not in html and "<k>" not in html
    assert "&lt;script&gt;" in html and "&quot;&lt;k&gt;&quot;" in html
    assert "… +" in html and "characters" in html
    assert "nothing cut" in html
    assert '<span class="j-num">1.5</span>' in html
    assert '<span class="j-lit">false</span>' in html


def test_json_block_of_an_absent_value() -> None:
    assert "absent" in mqadmin_tags.json_block(MISSING)


def test_times_and_durations_in_words() -> None:
    now = 1_800_000_000_000
    assert mqadmin_tags.relative(now - 180_000, now) == "3 min ago"
    assert mqadmin_tags.relative(now + 25_000, now) == "in 25 s"
    assert mqadmin_tags.relative(now, now) == "just now"
    assert mqadmin_tags.duration_words(340) == "340 ms"
    assert mqadmin_tags.duration_words(2_100) == "2.1 s"
    assert mqadmin_tags.duration_words(184_000) == "3 min 4 s"
    assert mqadmin_tags.duration_words(7_500_000) == "2 h 5 min"
    assert mqadmin_tags.duration_words(4 * 86_400_000 + 3_600_000) == "4 d 1 h"
    html = mqadmin_tags.reltime(now - 60_000, now)
    assert 'datetime="2027-01-15T07:59:00.000Z"' in html
    assert 'title="2027-01-15 07:59:00.000 UTC"' in html
