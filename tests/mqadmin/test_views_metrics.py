"""/metrics/ (Prometheus), /healthz/, /readyz/ and the per-job-name metrics page.

Every family is parsed back with ``prometheus_client.parser`` and compared, label set
by label set, with what the store itself counts.  "Redis down" is a store pointed at
a closed port (the shared servers are never touched).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from mqadmin import services
from store import (
    Claimed,
    Complete,
    EnqueueRequest,
    Fail,
    Rate,
    Retry,
    ScheduleRecord,
    connect,
)
from store.insights import OLDEST_PER_LEVEL
from tests.mqadmin.test_dashboard_bounded import command_counts, private_redis  # noqa: F401
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db

CLOSED = "redis://:hunter2@127.0.0.1:1/0"
TOKEN = "s3cret-scrape-token"


def scrape(client: Client, **headers: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """GET /metrics/ -> {sample name: {sorted label pairs: value}}."""
    response = client.get("/metrics/", headers=headers)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


# ---------------------------------------------------------------------- access


def test_anonymous_scrapers_get_401(stores: Stores, client: Client) -> None:
    response = client.get("/metrics/")
    assert response.status_code == 401
    assert "Bearer" in response["WWW-Authenticate"]
    assert b"mq_jobs" not in response.content


def test_the_bearer_token_opens_metrics_only_when_configured(
    stores: Stores, client: Client, settings: Any
) -> None:
    settings.MQ_METRICS_TOKEN = None
    assert client.get("/metrics/", headers={"Authorization": "Bearer "}).status_code == 401
    assert client.get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
    settings.MQ_METRICS_TOKEN = TOKEN
    assert client.get("/metrics/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics/", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    ok = client.get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    assert b"mq_store_up" in ok.content


def test_any_dashboard_user_may_read_metrics(stores: Stores, viewer: Client) -> None:
    samples = scrape(viewer)
    assert samples["mq_store_up"][labels(store="main")] == 1


def test_metrics_refuse_post(stores: Stores, viewer: Client) -> None:
    assert viewer.post("/metrics/").status_code == 405


# ---------------------------------------------------------------------- families


def test_every_family_matches_the_store(stores: Stores, viewer: Client, redis_client: Any) -> None:
    main, side = stores.main, stores.side
    for _ in range(3):
        main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    main.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=60_000))
    completed_job(main, name="Charge", queue="billing")
    failed_job(main, name="Charge", queue="billing")
    gone = completed_job(main, name="Charge", queue="billing")
    assert main.remove(gone)  # still counted as finished
    side.enqueue(EnqueueRequest(name="Render", queue="parts"))
    main.register_worker("w-1", queues={"emails": ["SendEmail"]}, routes=[], started_at=main.now())
    main.upsert_schedule(
        ScheduleRecord(
            key="late",
            job_name="SendEmail",
            queue="emails",
            every_ms=60_000,
            next_run_at=main.now() - 120_000,
        )
    )
    oldest = main.oldest_waiting("emails")
    assert oldest is not None

    before = main.now()
    samples = scrape(viewer)
    after = main.now()

    # mq_jobs: every queue x state of every store, equal to the O(1) counters.
    for store_name, job_store in (("main", main), ("side", side)):
        for queue, counts in job_store.counts_by_queue().items():
            for state, value in counts.items():
                got = samples["mq_jobs"][labels(store=store_name, queue=queue, state=state)]
                assert got == value, (store_name, queue, state)
    assert samples["mq_jobs"][labels(store="main", queue="emails", state="waiting")] == 3
    assert samples["mq_jobs"][labels(store="main", queue="billing", state="completed")] == 1

    finished = samples["mq_jobs_finished_total"]
    assert finished[labels(store="main", queue="billing", state="completed")] == 2
    assert finished[labels(store="main", queue="billing", state="failed")] == 1
    assert finished[labels(store="main", queue="billing", state="cancelled")] == 0
    assert labels(store="main", queue="emails", state="completed") not in finished

    age = samples["mq_oldest_waiting_age_seconds"][labels(store="main", queue="emails")]
    assert (before - oldest.run_at) / 1000 <= age <= (after - oldest.run_at) / 1000
    assert samples["mq_oldest_waiting_age_seconds"][labels(store="main", queue="billing")] == 0
    assert samples["mq_oldest_waiting_age_seconds"][labels(store="side", queue="parts")] >= 0

    assert samples["mq_workers"] == {labels(store="main"): 1, labels(store="side"): 0}
    assert samples["mq_outbox_entries"][labels(store="main")] == redis_client.zcard(
        main.keys.outbox
    )
    assert samples["mq_schedules_overdue"] == {labels(store="main"): 1, labels(store="side"): 0}
    assert samples["mq_index_ready"] == {
        labels(store=s, kind=k): 1 for s in ("main", "side") for k in ("name", "queue")
    }
    assert samples["mq_store_up"] == {labels(store="main"): 1, labels(store="side"): 1}


def test_queue_limit_families_cover_limited_queues_only(
    stores: Stores, viewer: Client, settings: Any
) -> None:
    main, side = stores.main, stores.side
    main.set_queue_limits("emails", concurrency=3, rate=Rate(1, 3_600_000))
    main.set_queue_limits("reports", rate=Rate(20, 250))
    side.set_queue_limits("parts", concurrency=2)
    side.clear_queue_limits("parts")
    for queue in ("emails", "emails", "billing"):
        main.enqueue(EnqueueRequest(name="SendEmail", queue=queue))
    claimed = main.claim("emails", names=["SendEmail"], token="t", lock_duration_ms=60_000)
    assert isinstance(claimed, Claimed)
    main.claim("billing", names=["SendEmail"], token="t2", lock_duration_ms=60_000)

    samples = scrape(viewer)
    emails, reports = labels(store="main", queue="emails"), labels(store="main", queue="reports")
    assert samples["mq_queue_limit_concurrency"] == {emails: 3}
    assert samples["mq_queue_limit_rate_per_second"] == {emails: 1 / 3600, reports: 80}
    assert samples["mq_queue_active_claims"] == {emails: 1, reports: 0}
    assert samples["mq_queue_throttled"] == {emails: 1, reports: 0}
    assert samples["mq_queue_groups"] == {emails: 0, reports: 0}
    assert "mq_queue_limit_group_concurrency" not in samples

    main.clear_queue_limits("emails")
    settings.MQ_STORES = {"main": settings.MQ_STORES["main"]}
    services.reset()
    with override_limited_per_store(0):
        assert "mq_queue_throttled" not in scrape(viewer)
    samples = scrape(viewer)
    assert samples["mq_queue_active_claims"] == {reports: 0}
    assert emails not in samples["mq_queue_limit_rate_per_second"]


@contextlib.contextmanager
def override_limited_per_store(value: int) -> Iterator[None]:
    from mqadmin import prometheus

    before = prometheus.LIMITED_PER_STORE
    prometheus.LIMITED_PER_STORE = value
    try:
        yield
    finally:
        prometheus.LIMITED_PER_STORE = before


def test_an_unreachable_store_reports_down_and_the_others_still_scrape(
    stores: Stores, viewer: Client, settings: Any, redis_url: str
) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    settings.MQ_STORES = {
        "main": {"prefix": stores.main_prefix, "url": redis_url},
        "broken": {"prefix": "x", "url": CLOSED},
    }
    services.reset()
    response = viewer.get("/metrics/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "hunter2" not in text and "127.0.0.1:1" not in text
    samples = scrape(viewer)
    assert samples["mq_store_up"] == {labels(store="main"): 1, labels(store="broken"): 0}
    assert samples["mq_jobs"][labels(store="main", queue="emails", state="waiting")] == 1
    assert not any(dict(k).get("store") == "broken" for k in samples["mq_jobs"])


def test_a_scrape_costs_the_same_commands_at_100_and_10000_jobs(
    private_redis: str,  # noqa: F811
    settings: Any,
    django_user_model: type[User],
) -> None:
    settings.MQ_STORES = {"main": {"prefix": "scrape", "url": private_redis}}
    settings.MQ_METRICS_TOKEN = TOKEN
    services.reset()
    raw = connect(private_redis)
    client = Client()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        main = services.get_named_store("main")

        def add(n: int) -> None:
            reqs = [
                EnqueueRequest(name=("A", "B")[k % 2], queue=("q1", "q2", "q3")[k % 3])
                for k in range(n)
            ]
            for start in range(0, n, 1000):
                main.enqueue_many(reqs[start : start + 1000])

        user = Client()
        user.force_login(django_user_model.objects.create_superuser("root", password=None))
        for k in range(20):  # runs that the metrics page reads back
            run(main, ("A", "B")[k % 2], "q1", Complete(None))

        def measure() -> dict[str, dict[str, int]]:
            out = {"scrape": command_counts(raw, lambda: client.get("/metrics/", headers=headers))}
            for period in ("1h", "72h"):
                url = f"/metrics/jobs/?period={period}"
                out[period] = command_counts(raw, lambda url=url: user.get(url))
            return out

        add(100)
        client.get("/metrics/", headers=headers)  # warm-up
        user.get("/metrics/jobs/")
        small = measure()
        add(9_900)
        assert main.counts()["waiting"] == 10_000
        large = measure()
        samples = scrape(client, **headers)
    finally:
        services.reset()
        raw.close()
    assert large == small, (small, large)
    # The bound comes from queues and names, never jobs: fixed reads (counters, totals, outbox,
    # schedules, index markers, one worker HSCAN page), then per queue with waiting jobs its
    # name set, one oldest_runnable script and the winner's row, and inside that script per
    # waiting set (3 queues x 2 names, one priority level) a level read and the head of the
    # level (OLDEST_PER_LEVEL rows), and the (here empty) set of grouped waiting jobs beside it.
    queues, waiting_sets = 3, 6
    bound = 8 + 3 * queues + (3 + OLDEST_PER_LEVEL) * waiting_sets
    assert sum(small["scrape"].values()) <= bound, small
    # Two names: 60 minute hashes (1 h) or 72 hour hashes (72 h) each, and the name set.
    assert small["1h"].get("hgetall") == 120 and small["72h"].get("hgetall") == 144, small
    assert sum(v for k, v in samples["mq_jobs"].items() if dict(k)["state"] == "waiting") == 10_000


# ---------------------------------------------------------------------- health


def test_healthz_answers_anyone_without_detail(client: Client, stores: Stores) -> None:
    response = client.get("/healthz/")
    assert response.status_code == 200
    assert response.content == b"ok\n"


def test_readyz_is_200_when_every_store_answers(client: Client, stores: Stores) -> None:
    response = client.get("/readyz/")
    assert response.status_code == 200
    assert response.content == b"ready\n"


def test_readyz_is_503_when_a_store_is_down_and_names_nothing_secret(
    client: Client, stores: Stores, settings: Any, redis_url: str
) -> None:
    settings.MQ_STORES = {
        "main": {"prefix": stores.main_prefix, "url": redis_url},
        "secretname": {"prefix": "x", "url": CLOSED},
    }
    services.reset()
    response = client.get("/readyz/")
    assert response.status_code == 503
    body = response.content.decode()
    assert body == "not ready: 1 of 2 stores unreachable\n"
    for secret in ("hunter2", "127.0.0.1", "secretname", redis_url):
        assert secret not in body
    # Liveness does not depend on Redis.
    assert client.get("/healthz/").status_code == 200


# ---------------------------------------------------------------------- metrics page


def run(job_store: Any, name: str, queue: str, outcome: Any, hold_s: float = 0.0) -> None:
    job_id = job_store.enqueue(EnqueueRequest(name=name, queue=queue, attempts_max=5)).id
    claimed = job_store.claim(queue=queue, names=[name], token="w:1", lock_duration_ms=60_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    if hold_s:
        time.sleep(hold_s)
    job_store.ack(job_id, "w:1", outcome)


def row_of(html: str, name: str) -> dict[str, str]:
    match = re.search(rf'<tr data-job-name="{re.escape(name)}">(.*?)</tr>', html, re.DOTALL)
    assert match, f"no row for {name}"
    cells = dict(re.findall(r'data-metric="([a-z0-9-]+)"[^>]*>([^<]*)<', match.group(1)))
    cells.update(
        {
            f"{k}_ms": v
            for k, v in re.findall(r'data-metric="([a-z0-9]+)" data-ms="(\d+)"', match.group(1))
        }
    )
    return cells


def test_metrics_page_numbers_match_the_runs_of_the_test(stores: Stores, viewer: Client) -> None:
    main = stores.main
    for _ in range(4):
        run(main, "Resize", "media", Complete(None))
    run(main, "Resize", "media", Complete(None), hold_s=0.25)
    run(main, "Resize", "media", Fail({"message": "no"}))
    run(main, "Resize", "media", Retry(0, {"message": "later"}))
    run(main, "Notify", "mail", Complete(None))
    main.enqueue(EnqueueRequest(name="NeverRan", queue="mail"))

    for period in ("1h", "24h", "72h"):
        response = viewer.get(f"/metrics/jobs/?period={period}")
        assert response.status_code == 200
        html = text_of(response)
        assert "<html" in html
        resize = row_of(html, "Resize")
        assert (resize["runs"], resize["failures"]) == ("7", "2"), period
        assert resize["failure-rate"] == "28.6 %"
        assert 250 <= int(resize["max_ms"]) < 5_000
        assert int(resize["p95_ms"]) == int(resize["max_ms"])  # the 7th of 7 runs is the slow one
        assert int(resize["p50_ms"]) < 250
        notify = row_of(html, "Notify")
        assert (notify["runs"], notify["failures"], notify["failure-rate"]) == ("1", "0", "0.0 %")
        never = row_of(html, "NeverRan")
        assert (never["runs"], never["p50"]) == ("0", "—")
        assert html.count('<svg class="run-chart"') == 3
        assert "Resize, " in html and "7 runs, 2 failed" in html


def test_metrics_page_partial_and_store_filter(stores: Stores, viewer: Client) -> None:
    run(stores.main, "Resize", "media", Complete(None))
    run(stores.side, "Other", "parts", Complete(None))
    response = viewer.get("/metrics/jobs/?store=side", headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = text_of(response)
    assert "<html" not in html
    assert 'id="job-metrics"' in html
    assert 'data-job-name="Other"' in html and 'data-job-name="Resize"' not in html


def test_metrics_page_rejects_bad_input_and_anonymous(
    stores: Stores, viewer: Client, client: Client
) -> None:
    bad = viewer.get("/metrics/jobs/?period=7d")
    assert bad.status_code == 400
    assert "is not a period" in text_of(bad)
    assert viewer.get("/metrics/jobs/?store=nope").status_code == 400
    anonymous = client.get("/metrics/jobs/")
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]


def test_metrics_page_reports_an_unreachable_store(
    stores: Stores, viewer: Client, settings: Any
) -> None:
    settings.MQ_STORES = {"broken": {"prefix": "x", "url": CLOSED}}
    services.reset()
    response = viewer.get("/metrics/jobs/")
    html = text_of(response)
    assert response.status_code in (200, 503)
    assert "hunter2" not in html


def test_metrics_page_says_when_it_shows_only_some_names(
    stores: Stores, viewer: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import store.monitoring

    for name in ("Alpha", "Beta", "Gamma"):
        run(stores.main, name, "q", Complete(None))
    monkeypatch.setattr(store.monitoring, "MAX_JOB_NAMES", 2)
    html = text_of(viewer.get("/metrics/jobs/?store=main"))
    assert 'data-job-name="Alpha"' in html and 'data-job-name="Beta"' in html
    assert 'data-job-name="Gamma"' not in html
    assert "Showing the first 2 of 3 job names" in html


def test_group_limit_families(stores: Stores, viewer: Client) -> None:
    main = stores.main
    main.set_queue_limits("tenants", group_concurrency=1, group_rate=Rate(30, 60_000))
    for group in ("a", "a", "b"):
        main.enqueue(EnqueueRequest(name="SendEmail", queue="tenants", group=group))
    for token in ("t1", "t2", "t3"):
        main.claim("tenants", names=["SendEmail"], token=token, lock_duration_ms=60_000)
    samples = scrape(viewer)
    tenants = labels(store="main", queue="tenants")
    assert samples["mq_queue_limit_group_concurrency"] == {tenants: 1}
    assert samples["mq_queue_limit_group_rate_per_second"] == {tenants: 0.5}
    # Group "a" has one waiting job and its one slot taken: held back.
    assert samples["mq_queue_groups"] == {tenants: 1}
    assert samples["mq_queue_groups_held"] == {tenants: 1}
