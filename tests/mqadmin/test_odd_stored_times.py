"""No page answers 500 because of a stored time (issue 23, defect 2).

The store refuses run times past 9999-12-31 now, but Redis may still hold anything:
jobs written before the bound, a hash edited by hand, a clock gone wrong.  The odd
values are written straight into the job hashes (``run_at``, ``enqueued_at``, ``pa``
processed, ``fa`` finished) and the delayed set's scores, then every page that shows
those jobs is rendered.
"""

from __future__ import annotations

import pytest
from django.test import Client

from store import EnqueueRequest, ScheduleRecord
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db

#: Epoch-millisecond values no calendar date has, or that sit at its very edges.
ODD = {
    "micros": 1_796_428_800_000_000,  # microseconds given as milliseconds: year 58,900
    "huge": 10**18,
    "int64": 2**63 - 1,
    "negative": -(10**15),
    "year-1": -62_135_596_800_000,
    "last": 253_402_300_799_999,
}


@pytest.fixture
def odd_jobs(stores: Stores, redis_client) -> dict[str, list[str]]:
    """Per odd value: a delayed, a completed and a failed job carrying it in every time field."""
    main = stores.main
    keys = main.keys
    made: dict[str, list[str]] = {}
    for label, value in ODD.items():
        delayed = main.enqueue(
            EnqueueRequest(name="Later", queue="later", delay_ms=60_000, id=f"delayed-{label}")
        ).id
        redis_client.hset(keys.job(delayed), mapping={"run_at": value, "enqueued_at": value})
        redis_client.zadd(keys.delayed("later"), {delayed: float(value)}, xx=True)
        done = completed_job(main, name="Done", queue="done", id=f"done-{label}")
        broken = failed_job(main, name="Broken", queue="broken", id=f"failed-{label}")
        for job_id in (done, broken):
            redis_client.hset(
                keys.job(job_id),
                mapping={"run_at": value, "enqueued_at": value, "pa": value, "fa": -value},
            )
        made[label] = [delayed, done, broken]
    # A schedule whose next run was stored before the bound existed.
    main.upsert_schedule(
        ScheduleRecord(key="Later/odd", job_name="Later", every_ms=60_000, next_run_at=60_000)
    )
    redis_client.hset(keys.schedule("Later/odd"), "next_run_at", ODD["micros"])
    redis_client.zadd(keys.schedules, {"Later/odd": float(ODD["micros"])}, xx=True)
    return made


PAGES = [
    "/",
    "/jobs/",
    "/jobs/?store=main&state=delayed",
    "/jobs/?store=main&state=delayed&queue=later&order_by=run_at",
    "/jobs/?store=main&state=delayed&queue=later&order_by=run_at&order=asc",
    "/jobs/?store=main&state=completed",
    "/jobs/?store=main&state=failed",
    "/jobs/?store=main&order_by=enqueued_at&order=asc",
    "/failures/",
    "/schedules/",
]


@pytest.mark.parametrize("path", PAGES)
def test_lists_render_odd_stored_times(odd_jobs, admin_client_: Client, path: str) -> None:
    response = admin_client_.get(path)
    assert response.status_code == 200, text_of(response)[:2000]


@pytest.mark.parametrize("label", list(ODD))
def test_job_pages_render_odd_stored_times(odd_jobs, admin_client_: Client, label: str) -> None:
    for job_id in odd_jobs[label]:
        response = admin_client_.get(f"/stores/main/jobs/{job_id}")
        assert response.status_code == 200, (job_id, text_of(response)[:2000])
        html = text_of(response)
        if label in ("micros", "huge", "int64", "negative"):
            assert "out of range" in html


def test_the_raw_value_is_shown(odd_jobs, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/stores/main/jobs/delayed-micros"))
    assert f"{ODD['micros']} ms (out of range)" in html


@pytest.mark.parametrize("value", list(ODD.values()))
def test_helpers_outside_templates_cope_too(value: int) -> None:
    from mqadmin.charts import _clock
    from mqadmin.queries.metrics import _slot_label
    from mqadmin.tasks import _ms_to_dt

    moment = _ms_to_dt(value)
    assert moment is None or moment.year in (1, 9999)
    assert _clock(value)
    assert _slot_label(value, "1h") and _slot_label(value, "24h")
