"""What every dashboard page and action shares, checked page by page.

For every page: anonymous visitors go to the login page (htmx requests get an
HX-Redirect), the full page and its htmx partial both render, and malformed query
strings answer 400 with a readable message; every GET route of ``mqadmin/urls.py``
is in that page list (or among the few routes that are not pages, with a reason).
For every action: GET answers 405, a POST without a CSRF token 403, a user without
the action's permission 403 (and the refusal is audited), and the read-only switch
refuses everything.  Job data holding markup is always rendered escaped.

The fixtures here (two configured stores on this test's prefixes, users with given
permissions, a seeded set of jobs) are imported by the other ``test_views_*`` modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import URLPattern, resolve, reverse
from django.urls.converters import IntConverter

from mqadmin import actions as verb_registry
from mqadmin import services
from mqadmin import urls as mqadmin_urls
from mqadmin.models import AuditEntry
from store import Claimed, Complete, EnqueueRequest, Fail, RedisJobStore, ScheduleRecord
from store.flow_runtime import child_job_id
from store.jobs import encode_failure
from store.records import FanOut, FlowChildSpec, ParentEnvelope
from tests.conftest import delete_prefix

pytestmark = pytest.mark.django_db

# What `from tests.mqadmin.test_views_common import *` gives the other view tests: the
# fixtures (their names only appear as test parameters, so a star import keeps linters
# quiet without a noqa per test).  Helpers are imported by name.
__all__ = ["admin_client_", "fresh_services", "login", "seeded", "stores", "viewer"]

MARKUP = "<script>alert('x')</script>"
ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"

ACTION_PERMISSIONS = (
    "retry_job",
    "cancel_job",
    "promote_job",
    "remove_job",
    "pause_queue",
    "bulk_action",
    "view_payload",
    "trigger_schedule",
    "remove_schedule",
    "change_limits",
    "control_worker",
    "drain_queue",
    "clean_queue",
)


# ---------------------------------------------------------------------- fixtures


@dataclass
class Stores:
    """The two stores a test configures: "main" (the test prefix) and "side"."""

    main: RedisJobStore
    side: RedisJobStore
    main_prefix: str
    side_prefix: str


@pytest.fixture(autouse=True)
def fresh_services() -> Iterator[None]:
    services.reset()
    yield
    services.reset()


@pytest.fixture
def stores(settings: Any, redis_url: str, redis_client: Any, prefix: str) -> Iterator[Stores]:
    """MQ_STORES = {"main": <prefix>, "side": <prefix>-side}, the stores the views use."""
    side_prefix = f"{prefix}-side"
    settings.MQ_STORES = {
        "main": {"prefix": prefix, "url": redis_url},
        "side": {"prefix": side_prefix, "url": redis_url},
    }
    settings.MQ_DASHBOARD_READ_ONLY = False
    yield Stores(
        services.get_named_store("main"), services.get_named_store("side"), prefix, side_prefix
    )
    services.reset()
    delete_prefix(redis_client, side_prefix)


def make_user(model: type[User], name: str, *codenames: str, superuser: bool = False) -> User:
    # No password: these clients log in with force_login, and hashing one costs ~0.2 s.
    if superuser:
        return model.objects.create_superuser(username=name, password=None)
    user = model.objects.create_user(username=name, password=None)
    if codenames:
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="mqadmin", codename__in=codenames)
        )
    return user


@pytest.fixture
def login(django_user_model: type[User]) -> Callable[..., Client]:
    """``login(*codenames, superuser=False, csrf=False)`` -> a logged-in client."""

    def factory(*codenames: str, superuser: bool = False, csrf: bool = False) -> Client:
        name = f"u{User.objects.count() + 1}"
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(make_user(django_user_model, name, *codenames, superuser=superuser))
        return client

    return factory


@pytest.fixture
def admin_client_(login: Callable[..., Client]) -> Client:
    return login(superuser=True)


@pytest.fixture
def viewer(login: Callable[..., Client]) -> Client:
    """Logged in, no dashboard permission at all."""
    return login()


def failed_job(
    store: RedisJobStore, name: str = "ChargeCard", queue: str = "billing", **kw: Any
) -> str:
    """A job that ran once and failed with a real traceback."""
    job_id = store.enqueue(EnqueueRequest(name=name, queue=queue, **kw)).id
    claimed = store.claim(queue=queue, names=[name], token="w-test:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    try:
        raise ValueError("card declined <b>bold</b>")
    except ValueError as exc:
        store.ack(job_id, "w-test:1", Fail(encode_failure(exc)))
    return job_id


def completed_job(
    store: RedisJobStore, name: str = "SendEmail", queue: str = "emails", **kw: Any
) -> str:
    job_id = store.enqueue(EnqueueRequest(name=name, queue=queue, **kw)).id
    claimed = store.claim(queue=queue, names=[name], token="w-test:2", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    store.ack(job_id, "w-test:2", Complete({"sent": True}))
    return job_id


def fan_out(
    parent_store: RedisJobStore,
    child_store: RedisJobStore,
    keys: list[str],
    flow_name: str = "Report",
) -> str:
    """A flow parent in ``parent_store`` with children (enqueued) in ``child_store``."""
    parent_id = parent_store.enqueue(EnqueueRequest(name="BuildReport", queue="reports")).id
    claimed = parent_store.claim(
        queue="reports", names=["BuildReport"], token="w-flow:1", lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed) and claimed.job.id == parent_id
    specs = [
        FlowChildSpec(
            child_key=key,
            store_key=child_store.store_key,
            request=EnqueueRequest(
                id=child_job_id(parent_store.store_key, parent_id, key),
                name="RenderPart",
                queue="parts",
                payload={"part": key},
                parent=ParentEnvelope(flow_name, parent_id, key, parent_store.store_key, 1),
            ),
        )
        for key in keys
    ]
    parent_store.ack(parent_id, "w-flow:1", FanOut(False, specs))
    child_store.enqueue_many([spec.request for spec in specs])
    return parent_id


@dataclass
class Seeded:
    failed: str
    completed: str
    waiting: str
    delayed: str
    flow: str
    schedule: str


@pytest.fixture
def seeded(stores: Stores) -> Seeded:
    """A few jobs of every kind, a flow across the two stores and a schedule."""
    main = stores.main
    failed = failed_job(main, payload={"html": MARKUP}, metadata={"note": MARKUP})
    completed = completed_job(main)
    waiting = main.enqueue(
        EnqueueRequest(name="SendEmail", queue="emails", payload={"to": MARKUP})
    ).id
    delayed = main.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=3_600_000)).id
    flow = fan_out(main, stores.side, ["a", "b", "c"])
    main.upsert_schedule(
        ScheduleRecord(
            key="Cleanup/every-15",
            job_name="Cleanup",
            queue="default",
            every_ms=900_000,
            next_run_at=main.now() + 900_000,
        )
    )
    return Seeded(failed, completed, waiting, delayed, flow, "Cleanup/every-15")


def page_urls(seeded: Seeded) -> dict[str, tuple[str, str]]:
    """Page -> (URL, id of the element its htmx partial renders)."""
    return {
        "overview": ("/", "stores"),
        "throughput": ("/overview/throughput/", "throughput"),
        "explorer": ("/jobs/?store=main", "results"),
        "job": (f"/stores/main/jobs/{seeded.failed}", "job-summary"),
        "flow": (f"/stores/main/flows/{seeded.flow}", "children"),
        "flows": ("/flows/?store=main", "parents"),
        "flows settled": ("/flows/?store=main&state=settled", "parents"),
        "queue": ("/stores/main/queues/emails", "groups"),
        "outbox": ("/outbox/", "entries"),
        "indexes": ("/indexes/", "indexes"),
        "schedules": ("/schedules/", "schedules"),
        "audit": ("/audit/", "entries"),
        "failures": ("/failures/?store=main", "groups"),
        "workers": ("/workers/", "workers"),
        "job metrics": ("/metrics/jobs/", "job-metrics"),
    }


PAGES = (
    "overview",
    "throughput",
    "explorer",
    "job",
    "flow",
    "flows",
    "flows settled",
    "queue",
    "outbox",
    "indexes",
    "schedules",
    "audit",
    "failures",
    "workers",
    "job metrics",
)

#: GET routes of ``mqadmin/urls.py`` that are not pages of :data:`PAGES` (no htmx
#: partial to check), and why.  Every other route must be in PAGES or answer GET with 405.
NOT_PAGES = {
    "lookup": "the id box: redirects to the job page, or answers a 404 page",
    "bulk_preview": "a step of a bulk run, without a partial (test_views_bulk.py)",
    "bulk_result": "the outcome of a bulk run, without a partial (test_views_bulk.py)",
    "metrics": "the Prometheus text format for scrapers (test_views_metrics.py)",
    "healthz": "a liveness probe answering plain text (test_views_metrics.py)",
    "readyz": "a readiness probe answering plain text (test_views_metrics.py)",
    "events": "the live pages' event stream, text/event-stream (test_views_events.py)",
    "job_logs": "a page of a job's log lines, appended out of band (test_views_events.py)",
    "queue_sweep_preview": "a step of a queue's drain or clean (test_views_queue.py)",
    "queue_sweep_result": "the outcome of a drain or clean (test_views_queue.py)",
}


def route_url(pattern: URLPattern) -> str:
    """The URL of a route of ``mqadmin/urls.py``, a placeholder for each of its arguments."""
    kwargs = {
        name: 1 if isinstance(converter, IntConverter) else "x"
        for name, converter in pattern.pattern.converters.items()
    }
    return reverse(f"mqadmin:{pattern.name}", kwargs=kwargs)


def actions(seeded: Seeded) -> dict[str, tuple[str, dict[str, Any], str]]:
    """Action -> (URL, POST data, the permission it needs)."""
    return {
        "retry": ("/actions/job/retry/", {"store": "main", "job_id": seeded.failed}, "retry_job"),
        "cancel": (
            "/actions/job/cancel/",
            {"store": "main", "job_id": seeded.waiting},
            "cancel_job",
        ),
        "promote": (
            "/actions/job/promote/",
            {"store": "main", "job_id": seeded.delayed},
            "promote_job",
        ),
        "remove": (
            "/actions/job/remove/",
            {"store": "main", "job_id": seeded.completed},
            "remove_job",
        ),
        "pause": ("/actions/queue/pause/", {"store": "main", "queue": "emails"}, "pause_queue"),
        "resume": ("/actions/queue/resume/", {"store": "main", "queue": "emails"}, "pause_queue"),
        "limits": (
            "/actions/queue/limits/",
            {"store": "main", "queue": "emails", "concurrency": "3", "rate": "100/s"},
            "change_limits",
        ),
        "clear_limits": (
            "/actions/queue/clear_limits/",
            {"store": "main", "queue": "emails"},
            "change_limits",
        ),
        "trigger": (
            "/actions/schedule/trigger/",
            {"store": "main", "key": seeded.schedule},
            "trigger_schedule",
        ),
        "unschedule": (
            "/actions/schedule/remove/",
            {"store": "main", "key": seeded.schedule},
            "remove_schedule",
        ),
        # Pausing and resuming a schedule are checked as removing it (the registry's checked_as).
        "pause_schedule": (
            "/actions/schedule/pause/",
            {"store": "main", "key": seeded.schedule},
            "remove_schedule",
        ),
        "resume_schedule": (
            "/actions/schedule/resume/",
            {"store": "main", "key": seeded.schedule},
            "remove_schedule",
        ),
        # Resuming and stopping a worker are checked as quieting it (one grant, control_worker).
        "quiet_worker": (
            "/actions/worker/quiet/",
            {"store": "main", "worker_id": "w-1"},
            "control_worker",
        ),
        "resume_worker": (
            "/actions/worker/resume/",
            {"store": "main", "worker_id": "w-1"},
            "control_worker",
        ),
        "stop_worker": (
            "/actions/worker/stop/",
            {"store": "main", "worker_id": "w-1"},
            "control_worker",
        ),
        "bulk_selected": (
            "/bulk/selected/",
            {"store": "main", "verb": "retry", "ids": [seeded.failed]},
            "bulk_action",
        ),
        "bulk_run": (
            "/bulk/run/",
            {"store": "main", "verb": "retry", "state": "failed"},
            "bulk_action",
        ),
        "drain": (
            "/queues/sweep/run/",
            {"store": "main", "queue": "emails", "sweep": "drain"},
            "drain_queue",
        ),
        "clean": (
            "/queues/sweep/run/",
            {"store": "main", "queue": "emails", "sweep": "clean"},
            "clean_queue",
        ),
    }


ACTIONS = (
    "retry",
    "cancel",
    "promote",
    "remove",
    "pause",
    "resume",
    "limits",
    "clear_limits",
    "trigger",
    "unschedule",
    "pause_schedule",
    "resume_schedule",
    "quiet_worker",
    "resume_worker",
    "stop_worker",
    "bulk_selected",
    "bulk_run",
    "drain",
    "clean",
)


def test_the_action_lists_cover_the_verb_registry(seeded: Seeded) -> None:
    # The lists above are written out (a test of the registry must not be the registry);
    # a verb or grant added to mqadmin/actions.py without a case here fails.
    assert set(ACTION_PERMISSIONS) == {grant.codename for grant in verb_registry.GRANTS}
    assert set(ACTIONS) == set(actions(seeded))
    posted = {url for url, _, _ in actions(seeded).values()}
    for verb in verb_registry.VERBS:
        url = reverse(f"mqadmin:{verb.kind}_action", kwargs={"verb": verb.name})
        assert url in posted, f"no case posts {verb.kind} verb {verb.name!r} ({url})"


def text_of(response: Any) -> str:
    return response.content.decode()


# ---------------------------------------------------------------------- pages


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_visitors_go_to_the_login_page(name: str, seeded: Seeded, client: Client) -> None:
    url, _ = page_urls(seeded)[name]

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_htmx_requests_redirect_the_whole_tab(
    name: str, seeded: Seeded, client: Client
) -> None:
    url, _ = page_urls(seeded)[name]

    response = client.get(
        url, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/jobs/?x=1"}
    )

    assert response.status_code == 401
    assert response["HX-Redirect"] == "/accounts/login/?next=%2Fjobs%2F%3Fx%3D1"
    assert b"<form" not in response.content


@pytest.mark.parametrize("name", PAGES)
def test_full_page_renders(name: str, seeded: Seeded, admin_client_: Client) -> None:
    url, partial_id = page_urls(seeded)[name]

    response = admin_client_.get(url)

    assert response.status_code == 200, text_of(response)[:2000]
    html = text_of(response)
    assert html.lstrip().startswith("<!DOCTYPE html>")
    assert "<html" in html
    assert f'id="{partial_id}"' in html
    assert "Content-Security-Policy" in response.headers
    assert "script-src 'self'" in response["Content-Security-Policy"]
    # CSP-friendly: scripts only from files, never inline.
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html) is None


@pytest.mark.parametrize("name", PAGES)
def test_htmx_partial_renders_only_the_fragment(
    name: str, seeded: Seeded, admin_client_: Client
) -> None:
    url, partial_id = page_urls(seeded)[name]

    response = admin_client_.get(url, headers={"HX-Request": "true"})

    assert response.status_code == 200, text_of(response)[:2000]
    html = text_of(response)
    assert "<html" not in html
    assert html.lstrip().startswith("<") and f'id="{partial_id}"' in html.split(">", 1)[0] + ">"


@pytest.mark.parametrize("name", PAGES)
def test_boosted_and_history_restore_requests_get_the_full_page(
    name: str, seeded: Seeded, admin_client_: Client
) -> None:
    url, _ = page_urls(seeded)[name]

    boosted = admin_client_.get(url, headers={"HX-Request": "true", "HX-Boosted": "true"})
    restore = admin_client_.get(
        url, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )

    assert "<html" in text_of(boosted)
    assert "<html" in text_of(restore)


def test_every_get_route_is_in_the_page_list(seeded: Seeded, admin_client_: Client) -> None:
    """A page added to ``mqadmin/urls.py`` fails here until it joins PAGES (or NOT_PAGES)."""
    routes = {pattern.name: pattern for pattern in mqadmin_urls.urlpatterns}
    listed = {resolve(urlsplit(url).path).url_name for url, _ in page_urls(seeded).values()}
    assert set(PAGES) == set(page_urls(seeded))
    assert set(NOT_PAGES) <= set(routes) and not listed & set(NOT_PAGES)

    answers = {
        name: admin_client_.get(route_url(pattern)).status_code for name, pattern in routes.items()
    }

    unlisted = {
        name: status
        for name, status in answers.items()
        if name not in listed and name not in NOT_PAGES and status != 405
    }
    assert unlisted == {}, "GET routes missing from page_urls() and PAGES (or from NOT_PAGES)"
    assert all(answers[name] != 405 for name in NOT_PAGES)


MALFORMED = [
    ("/jobs/?store=main&cursor=not-a-cursor", "Malformed cursor"),
    ("/jobs/?store=main&before=12x:abc", "Malformed cursor"),
    ("/jobs/?store=main&state=waiting&state=exploded", "is not a job state"),
    ("/jobs/?store=main&limit=lots", "page size must be a whole number"),
    ("/jobs/?store=main&limit=0", "page size must be at least 1"),
    ("/jobs/?store=main&limit=100000", "page size can be at most 200"),
    ("/jobs/?store=main&meta=novalue", "must look like key=value"),
    ("/jobs/?store=main&meta==value", "must look like key=value"),
    ("/jobs/?store=nowhere", "no store named"),
    ("/jobs/?store=main&order_by=random", "is not an order"),
    ("/jobs/?store=main&order=sideways", "is not a direction"),
    ("/jobs/?store=main&cursor=1:a&before=2:b", "not both"),
    ("/jobs/lookup/?store=main", "This field is required"),
    ("/outbox/?after=yesterday", "must be an outbox entry number"),
    ("/flows/?store=main&state=sideways", "is not a flow state"),
    ("/flows/?store=nowhere", "no store named"),
    ("/flows/?store=main&cursor=not-a-cursor", "Malformed cursor"),
    ("/flows/?store=main&state=settled&cursor=nope", "malformed settled-flows cursor"),
    ("/audit/?before=last", "must be an entry number"),
    ("/audit/?outcome=maybe", "is not an outcome"),
    ("/bulk/preview/?store=main&verb=explode", "is not one of the available choices"),
]


@pytest.mark.parametrize(("url", "message"), MALFORMED)
def test_malformed_query_strings_answer_400_with_a_message(
    url: str, message: str, seeded: Seeded, admin_client_: Client
) -> None:
    response = admin_client_.get(url)

    assert response.status_code == 400
    html = text_of(response)
    assert "<html" in html
    assert message.lower() in html.lower()


def test_malformed_flow_trail_answers_400(seeded: Seeded, admin_client_: Client) -> None:
    trail = "&".join(f"trail=k{n}" for n in range(25))

    response = admin_client_.get(f"/stores/main/flows/{seeded.flow}?cursor=b&{trail}")

    assert response.status_code == 400
    assert "Too many earlier pages" in text_of(response)


@pytest.mark.parametrize(("url", "message"), MALFORMED[:6])
def test_malformed_query_strings_answer_400_with_the_partial_for_htmx(
    url: str, message: str, seeded: Seeded, admin_client_: Client
) -> None:
    response = admin_client_.get(url, headers={"HX-Request": "true"})

    assert response.status_code == 400
    html = text_of(response)
    assert "<html" not in html
    assert 'id="results"' in html
    assert message.lower() in html.lower()


def test_unknown_store_in_a_path_is_a_404_page(seeded: Seeded, admin_client_: Client) -> None:
    response = admin_client_.get("/stores/nowhere/jobs/j-1")

    assert response.status_code == 404
    assert "no store named “nowhere”" in text_of(response)


def test_a_store_whose_redis_is_down_gives_a_503_naming_it(
    settings: Any, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"broken": {"prefix": "x", "url": "redis://:hunter2@127.0.0.1:1/0"}}

    for url in ("/jobs/?store=broken", "/stores/broken/jobs/j-1", "/stores/broken/flows/j-1"):
        response = admin_client_.get(url)
        assert response.status_code == 503, url
        html = text_of(response)
        assert "Store “broken” is unavailable" in html
        assert "hunter2" not in html


def test_pages_that_list_stores_report_an_unreachable_one_inline(
    settings: Any, redis_url: str, prefix: str, admin_client_: Client
) -> None:
    settings.MQ_STORES = {
        "ok": {"prefix": prefix, "url": redis_url},
        "broken": {"prefix": "x", "url": "redis://:hunter2@127.0.0.1:1/0"},
    }

    for url in ("/", "/overview/throughput/", "/outbox/", "/indexes/", "/schedules/"):
        response = admin_client_.get(url)
        assert response.status_code == 200, url
        html = text_of(response)
        assert "Unavailable" in html or "unavailable" in html
        assert "hunter2" not in html


# ---------------------------------------------------------------------- escaping


def test_markup_in_job_data_is_rendered_escaped(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    job_id = failed_job(
        main,
        name=f"Job{MARKUP}",
        queue=f"q{MARKUP}",
        payload={"html": MARKUP, MARKUP: [MARKUP]},
        metadata={"note": MARKUP},
    )
    flow_id = fan_out(main, stores.side, [f"k{MARKUP}"])

    pages = [
        f"/stores/main/jobs/{job_id}",
        f"/jobs/?store=main&name=Job{MARKUP}",
        "/jobs/?store=main",
        f"/stores/main/flows/{flow_id}",
        "/",
    ]
    for url in pages:
        response = admin_client_.get(url)
        assert response.status_code == 200, url
        html = text_of(response)
        assert MARKUP not in html, url
        assert "<script>alert" not in html, url
        assert "&lt;script&gt;" in html, url


def test_markup_in_a_traceback_is_escaped(stores: Stores, admin_client_: Client) -> None:
    job_id = failed_job(stores.main)

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    assert "card declined &lt;b&gt;bold&lt;/b&gt;" in html
    assert "<b>bold</b>" not in html


def test_markup_in_an_error_message_is_escaped(seeded: Seeded, admin_client_: Client) -> None:
    response = admin_client_.get(f"/jobs/lookup/?store=main&id={MARKUP}")

    assert response.status_code == 404
    html = text_of(response)
    assert MARKUP not in html
    assert "&lt;script&gt;" in html


# ---------------------------------------------------------------------- actions


@pytest.mark.parametrize("name", ACTIONS)
def test_get_on_an_action_is_405(name: str, seeded: Seeded, admin_client_: Client) -> None:
    url, data, _ = actions(seeded)[name]

    response = admin_client_.get(url, data)

    assert response.status_code == 405


@pytest.mark.parametrize("name", ACTIONS)
def test_an_action_without_csrf_token_is_403(
    name: str, seeded: Seeded, login: Callable[..., Client]
) -> None:
    client = login(superuser=True, csrf=True)
    url, data, _ = actions(seeded)[name]

    response = client.post(url, data)

    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("name", ACTIONS)
def test_an_action_with_a_csrf_token_passes_the_csrf_check(
    name: str, seeded: Seeded, login: Callable[..., Client]
) -> None:
    client = login(superuser=True, csrf=True)
    page = client.get("/jobs/?store=main")
    token = page.cookies["csrftoken"].value
    url, data, _ = actions(seeded)[name]

    response = client.post(url, {**data, "csrfmiddlewaretoken": token})

    assert response.status_code in (200, 302)


@pytest.mark.parametrize("name", ACTIONS)
def test_an_action_without_its_permission_is_403_and_audited(
    name: str, seeded: Seeded, login: Callable[..., Client]
) -> None:
    url, data, permission = actions(seeded)[name]
    # Every dashboard permission except the one this action needs.
    others = [p for p in ACTION_PERMISSIONS if p != permission]
    client = login(*others)

    response = client.post(url, data)

    assert response.status_code == 403
    assert permission in text_of(response)
    entry = AuditEntry.objects.get()
    assert not entry.ok
    assert entry.result.startswith("refused:")


@pytest.mark.parametrize("name", ["bulk_selected", "bulk_run"])
def test_bulk_actions_also_need_the_verb_permission(
    name: str, seeded: Seeded, login: Callable[..., Client]
) -> None:
    url, data, _ = actions(seeded)[name]
    client = login("bulk_action")

    response = client.post(url, data)

    assert response.status_code == 403
    assert "retry_job" in text_of(response)


@pytest.mark.parametrize("name", ACTIONS)
def test_read_only_mode_refuses_every_action(
    name: str, seeded: Seeded, settings: Any, admin_client_: Client
) -> None:
    settings.MQ_DASHBOARD_READ_ONLY = True
    url, data, _ = actions(seeded)[name]

    response = admin_client_.post(url, data)

    assert response.status_code == 403
    assert "read-only" in text_of(response)


def test_read_only_mode_shows_no_action_buttons(
    seeded: Seeded, settings: Any, admin_client_: Client
) -> None:
    settings.MQ_DASHBOARD_READ_ONLY = True

    pages = [
        "/",
        "/jobs/?store=main",
        f"/stores/main/jobs/{seeded.failed}",
        f"/stores/main/jobs/{seeded.delayed}",
        "/schedules/",
    ]
    for url in pages:
        html = text_of(admin_client_.get(url))
        assert 'method="post" action="/actions/' not in html, url
        assert "/bulk/" not in html, url
        assert "read-only" in html, url


@pytest.mark.parametrize("name", ["retry", "pause", "trigger"])
def test_unknown_targets_of_an_action_answer_400(
    name: str, seeded: Seeded, admin_client_: Client
) -> None:
    url, data, _ = actions(seeded)[name]

    response = admin_client_.post(url, {**data, "store": "nowhere"})

    assert response.status_code == 400
    assert "no store named" in text_of(response)


def test_an_unknown_verb_is_404(seeded: Seeded, admin_client_: Client) -> None:
    response = admin_client_.post("/actions/job/explode/", {"store": "main", "job_id": "x"})

    assert response.status_code == 404


def test_next_must_be_a_local_path(seeded: Seeded, admin_client_: Client) -> None:
    response = admin_client_.post(
        "/actions/queue/pause/",
        {"store": "main", "queue": "emails", "next": "https://evil.example.com/"},
    )

    assert response.status_code == 400
    assert "must be a path on this site" in text_of(response)
