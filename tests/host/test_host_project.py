"""mqadmin mounted in a host project under ``ops/mq/``, driven through the host's URLs.

The host (``tests/hostproject``) has its own user model (e-mail login), its own
login page (``LOGIN_URL = "members:sign-in"``), its admin under ``backoffice/`` and
static files under ``/assets/``.  Every URL here comes from ``reverse("mqadmin:…")``;
the tests check that every page, partial, action, bulk run and redirect stays under
the prefix, that anonymous visitors go to the host's login, and that a member granted
only the app's Permission objects through a host group can act.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import django
import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import mqadmin
from mqadmin import services
from mqadmin.models import AuditEntry
from mqadmin.views.common import CONTENT_SECURITY_POLICY
from store import Claimed, EnqueueRequest, Fail, RedisJobStore, ScheduleRecord
from tests.conftest import delete_prefix
from tests.mqadmin.test_views_common import completed_job, failed_job, fan_out

pytestmark = pytest.mark.django_db

PREFIX = "/ops/mq/"
LOGIN_PATH = "/members/sign-in/"
ALL_PERMISSIONS = (
    "retry_job",
    "cancel_job",
    "promote_job",
    "remove_job",
    "pause_queue",
    "bulk_action",
    "view_payload",
    "trigger_schedule",
    "remove_schedule",
    "view_auditentry",
)


@dataclass
class Seeded:
    main: RedisJobStore
    failed: str
    completed: str
    waiting: str
    delayed: str
    flow: str
    schedule: str


@pytest.fixture(autouse=True)
def fresh_services() -> Iterator[None]:
    services.reset()
    yield
    services.reset()


@pytest.fixture
def seeded(settings: Any, redis_url: str, redis_client: Any, prefix: str) -> Iterator[Seeded]:
    side_prefix = f"{prefix}-side"
    settings.MQ_STORES = {
        "main": {"prefix": prefix, "url": redis_url},
        "side": {"prefix": side_prefix, "url": redis_url},
    }
    main = services.get_named_store("main")
    side = services.get_named_store("side")
    failed = failed_job(main)
    completed = completed_job(main)
    waiting = main.enqueue(EnqueueRequest(name="SendEmail", queue="emails")).id
    delayed = main.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=3_600_000)).id
    flow = fan_out(main, side, ["a", "b"])
    main.upsert_schedule(
        ScheduleRecord(
            key="Cleanup/hourly",
            job_name="Cleanup",
            queue="default",
            every_ms=3_600_000,
            next_run_at=main.now() + 3_600_000,
        )
    )
    yield Seeded(main, failed, completed, waiting, delayed, flow, "Cleanup/hourly")
    services.reset()
    delete_prefix(redis_client, side_prefix)


@pytest.fixture
def member() -> Callable[..., Client]:
    """``member(*codenames, staff=False)``: a logged-in client of a host Member who holds
    the given mqadmin permissions through a host group (never directly)."""
    count = 0

    def factory(*codenames: str, staff: bool = False, email: str | None = None) -> Client:
        nonlocal count
        count += 1
        user = get_user_model().objects.create_user(
            email=email or f"operator{count}@example.com", password=None, is_staff=staff
        )
        if codenames:
            group = Group.objects.create(name=f"operators-{count}")
            group.permissions.add(
                *Permission.objects.filter(
                    content_type__app_label="mqadmin", codename__in=codenames
                )
            )
            user.groups.add(group)
        client = Client()
        client.force_login(user)
        return client

    return factory


def pages(seeded: Seeded) -> dict[str, tuple[str, str]]:
    """Page -> (URL, id of the element its htmx partial renders)."""
    return {
        "home": (reverse("mqadmin:home"), "stores"),
        "throughput": (reverse("mqadmin:throughput"), "throughput"),
        "jobs": (reverse("mqadmin:jobs") + "?store=main", "results"),
        "job": (reverse("mqadmin:job", args=["main", seeded.failed]), "job-summary"),
        "flow": (reverse("mqadmin:flow", args=["main", seeded.flow]), "children"),
        "outbox": (reverse("mqadmin:outbox"), "entries"),
        "indexes": (reverse("mqadmin:indexes"), "indexes"),
        "schedules": (reverse("mqadmin:schedules"), "schedules"),
        "audit": (reverse("mqadmin:audit"), "entries"),
    }


PAGES = ("home", "throughput", "jobs", "job", "flow", "outbox", "indexes", "schedules", "audit")

# Attributes whose value is a URL the browser follows.
URL_ATTRIBUTE = re.compile(r'\b(?:href|src|action|hx-get|hx-post)="([^"]*)"')


def local_urls(html: str) -> list[str]:
    """Every site-local URL a page links to, fetches or posts to (no fragments, no queries only)."""
    urls = []
    for raw in URL_ATTRIBUTE.findall(html):
        url = raw.replace("&amp;", "&")
        if url.startswith(("#", "?")) or urlsplit(url).scheme or not url:
            continue
        urls.append(url)
    return urls


def test_app_urls_are_namespaced_under_the_hosts_prefix() -> None:
    assert reverse("mqadmin:home") == PREFIX
    assert reverse("mqadmin:jobs") == f"{PREFIX}jobs/"
    assert reverse("mqadmin:job", args=["main", "j/1"]) == f"{PREFIX}stores/main/jobs/j/1"
    # The host's own names are untouched by the app's.
    assert reverse("home") == "/"


@pytest.mark.parametrize("name", PAGES)
def test_every_page_and_its_partial_render_under_the_prefix(
    name: str, seeded: Seeded, member: Callable[..., Client]
) -> None:
    client = member(*ALL_PERMISSIONS, staff=True)
    url, fragment = pages(seeded)[name]
    assert url.startswith(PREFIX)

    full = client.get(url)
    assert full.status_code == 200, full.content[:500]
    html = full.content.decode()
    assert "<html" in html
    # Every link, script, stylesheet, form target and htmx request of the page stays in
    # the app (under the prefix), in the host's static files, or in the host's admin.
    links = local_urls(html)
    assert sum(link.startswith(PREFIX) for link in links) >= 6  # at least the navigation
    for link in links:
        assert link.startswith((PREFIX, "/assets/mqadmin/", "/backoffice/")), (name, link)

    partial = client.get(url, headers={"HX-Request": "true"})
    assert partial.status_code == 200
    fragment_html = partial.content.decode()
    assert "<html" not in fragment_html
    assert f'id="{fragment}"' in fragment_html
    for link in local_urls(fragment_html):
        assert link.startswith(PREFIX), (name, link)


def test_pages_load_static_assets_from_the_hosts_static_url(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    html = member().get(reverse("mqadmin:home")).content.decode()
    for asset in ("app.css", "app.js", "htmx.min.js", "favicon.svg"):
        assert f'"/assets/mqadmin/{asset}"' in html
        # ... and the app static finder (what collectstatic uses) finds each in the app.
        found = finders.find(f"mqadmin/{asset}")
        assert found is not None, asset
        assert Path(mqadmin.__file__).parent / "static" / "mqadmin" / asset == Path(found)


def test_the_templates_come_from_the_app_folder() -> None:
    from django.template.loader import get_template

    origin = Path(get_template("mqadmin/base.html").origin.name)
    assert origin == Path(mqadmin.__file__).parent / "templates" / "mqadmin" / "base.html"


def test_admin_link_points_at_the_hosts_admin_and_no_logout_form_without_a_logout_url(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    html = member(staff=True).get(reverse("mqadmin:home")).content.decode()
    assert 'href="/backoffice/"' in html
    assert 'class="logout"' not in html


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_visitors_go_to_the_hosts_login(
    name: str, seeded: Seeded, client: Client
) -> None:
    url, _ = pages(seeded)[name]

    response = client.get(url)

    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert location.path == LOGIN_PATH
    assert parse_qs(location.query)["next"] == [url]


def test_anonymous_htmx_requests_send_the_tab_to_the_hosts_login(
    seeded: Seeded, client: Client
) -> None:
    response = client.get(
        reverse("mqadmin:throughput"),
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/ops/mq/jobs/?x=1"},
    )
    assert response.status_code == 401
    assert response["HX-Redirect"] == f"{LOGIN_PATH}?next=%2Fops%2Fmq%2Fjobs%2F%3Fx%3D1"


def test_a_login_url_with_its_own_query_string_keeps_it(
    settings: Any, seeded: Seeded, client: Client
) -> None:
    settings.LOGIN_URL = "https://sso.example.com/login?realm=ops"
    url = reverse("mqadmin:jobs")

    plain = client.get(url)
    htmx = client.get(
        url, headers={"HX-Request": "true", "HX-Current-URL": f"http://testserver{url}"}
    )

    for target in (plain["Location"], htmx["HX-Redirect"]):
        parts = urlsplit(target)
        assert (parts.netloc, parts.path) == ("sso.example.com", "/login")
        assert parse_qs(parts.query) == {"realm": ["ops"], "next": [url]}


def test_jobs_lookup_redirects_under_the_prefix(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    response = member().get(reverse("mqadmin:lookup") + f"?store=main&id={seeded.failed}")

    assert response.status_code == 302
    assert response["Location"] == reverse("mqadmin:job", args=["main", seeded.failed])
    assert response["Location"].startswith(PREFIX)


def test_signing_in_with_the_hosts_user_model_and_login_page(
    seeded: Seeded, client: Client
) -> None:
    get_user_model().objects.create_user(email="ops@example.com", password="pw-for-tests")
    target = reverse("mqadmin:jobs")

    response = client.post(
        LOGIN_PATH,
        {"username": "ops@example.com", "password": "pw-for-tests", "next": target},
    )

    assert response.status_code == 302
    assert response["Location"] == target
    page = client.get(target + "?store=main")
    assert page.status_code == 200
    assert "ops@example.com" in page.content.decode()


JOB_ACTIONS = {
    # verb -> (which seeded job, the permission, the state afterwards or None if removed)
    "retry": ("failed", "retry_job", "waiting"),
    "cancel": ("waiting", "cancel_job", "cancelled"),
    "promote": ("delayed", "promote_job", "waiting"),
    "remove": ("completed", "remove_job", None),
}


@pytest.mark.parametrize("verb", sorted(JOB_ACTIONS))
def test_job_actions_with_group_permissions_redirect_under_the_prefix(
    verb: str, seeded: Seeded, member: Callable[..., Client]
) -> None:
    which, codename, state_after = JOB_ACTIONS[verb]
    job_id = getattr(seeded, which)
    client = member(codename, email=f"{'x' * 160}@example.com")

    response = client.post(
        reverse("mqadmin:job_action", args=[verb]), {"store": "main", "job_id": job_id}
    )

    assert response.status_code == 302
    assert response["Location"].startswith(PREFIX)
    landing = client.get(response["Location"])
    assert landing.status_code == 200
    job = seeded.main.get_job(job_id)
    if state_after is None:
        assert job is None
    else:
        assert job is not None and job.state == state_after
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.ok) == (verb, job_id, True)
    # A custom user model's long e-mail "username" is kept, cut to the column.
    assert entry.username == f"{'x' * 160}@example.com"[:150]


def test_a_member_without_the_permission_is_refused(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    client = member("cancel_job")  # not retry_job

    response = client.post(
        reverse("mqadmin:job_action", args=["retry"]), {"store": "main", "job_id": seeded.failed}
    )

    assert response.status_code == 403
    assert "retry_job" in response.content.decode()
    assert seeded.main.get_job(seeded.failed).state == "failed"  # type: ignore[union-attr]


def test_queue_and_schedule_actions(seeded: Seeded, member: Callable[..., Client]) -> None:
    client = member("pause_queue", "trigger_schedule", "remove_schedule")

    paused = client.post(
        reverse("mqadmin:queue_action", args=["pause"]), {"store": "main", "queue": "emails"}
    )
    assert paused.status_code == 302 and paused["Location"].startswith(PREFIX)
    assert "emails" in seeded.main.paused_queues()
    resumed = client.post(
        reverse("mqadmin:queue_action", args=["resume"]), {"store": "main", "queue": "emails"}
    )
    assert resumed.status_code == 302
    assert "emails" not in seeded.main.paused_queues()

    triggered = client.post(
        reverse("mqadmin:schedule_action", args=["trigger"]),
        {"store": "main", "key": seeded.schedule},
    )
    assert triggered.status_code == 302 and triggered["Location"] == reverse("mqadmin:schedules")
    removed = client.post(
        reverse("mqadmin:schedule_action", args=["remove"]),
        {"store": "main", "key": seeded.schedule},
    )
    assert removed.status_code == 302
    assert seeded.main.get_schedule(seeded.schedule) is None


def test_next_under_the_prefix_is_followed_and_a_foreign_one_refused(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    client = member("pause_queue")
    back = reverse("mqadmin:jobs") + "?store=main&queue=emails"

    response = client.post(
        reverse("mqadmin:queue_action", args=["pause"]),
        {"store": "main", "queue": "emails", "next": back},
    )
    assert response.status_code == 302 and response["Location"] == back

    refused = client.post(
        reverse("mqadmin:queue_action", args=["resume"]),
        {"store": "main", "queue": "emails", "next": "//evil.example/ops/mq/"},
    )
    assert refused.status_code == 400
    assert "emails" in seeded.main.paused_queues()


def test_bulk_preview_and_runs(seeded: Seeded, member: Callable[..., Client]) -> None:
    client = member("bulk_action", "retry_job")

    preview = client.get(reverse("mqadmin:bulk_preview") + "?store=main&verb=retry&state=failed")
    assert preview.status_code == 200
    for link in local_urls(preview.content.decode()):
        assert link.startswith((PREFIX, "/assets/mqadmin/")), link

    run = client.post(
        reverse("mqadmin:bulk_run"), {"store": "main", "verb": "retry", "state": "failed"}
    )
    # Redirect-after-POST to the run's own result page, under the host's prefix.
    assert run.status_code == 302
    assert run["Location"].startswith(PREFIX + "bulk/runs/"), run["Location"]
    assert seeded.main.get_job(seeded.failed).state == "waiting"  # type: ignore[union-attr]
    result = client.get(run["Location"])
    assert result.status_code == 200
    assert "retry" in result.content.decode()
    for link in local_urls(result.content.decode()):
        assert link.startswith((PREFIX, "/assets/mqadmin/")), link

    # The job is waiting again: retry no longer applies to the ticked row, and says so.
    refused = client.post(
        reverse("mqadmin:bulk_selected"),
        {"store": "main", "verb": "retry", "ids": [seeded.failed], "next": reverse("mqadmin:jobs")},
    )
    assert refused.status_code == 400
    assert "retry" in refused.content.decode()
    failed_again = seeded.main.enqueue(EnqueueRequest(name="Boom", queue="host"))
    claimed = seeded.main.claim(queue="host", names=["Boom"], token="h:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed)
    seeded.main.ack(failed_again.id, "h:1", Fail({"error": {"type": "E", "message": "x"}}))
    selected = client.post(
        reverse("mqadmin:bulk_selected"),
        {
            "store": "main",
            "verb": "retry",
            "ids": [failed_again.id],
            "next": reverse("mqadmin:jobs"),
        },
    )
    assert selected.status_code == 200
    assert seeded.main.get_job(failed_again.id).state == "waiting"  # type: ignore[union-attr]
    assert AuditEntry.objects.filter(action__startswith="bulk").count() == 2


def test_bulk_needs_both_permissions(seeded: Seeded, member: Callable[..., Client]) -> None:
    client = member("bulk_action")  # no retry_job

    response = client.post(
        reverse("mqadmin:bulk_run"), {"store": "main", "verb": "retry", "state": "failed"}
    )

    assert response.status_code == 403
    assert seeded.main.get_job(seeded.failed).state == "failed"  # type: ignore[union-attr]


def test_the_apps_permissions_are_permission_objects_the_hosts_admin_grants(
    member: Callable[..., Client],
) -> None:
    codenames = set(
        Permission.objects.filter(content_type__app_label="mqadmin").values_list(
            "codename", flat=True
        )
    )
    assert set(ALL_PERMISSIONS) <= codenames
    # The host's admin offers them on its group form.
    admin = get_user_model().objects.create_superuser(email="root@example.com", password=None)
    client = Client()
    client.force_login(admin)
    form = client.get("/backoffice/auth/group/add/")
    assert form.status_code == 200
    assert "mqadmin | audit entry | Can retry failed jobs" in form.content.decode()


def test_a_user_with_no_dashboard_permission_sees_pages_but_no_buttons(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    html = member().get(reverse("mqadmin:job", args=["main", seeded.failed])).content.decode()
    assert reverse("mqadmin:job_action", args=["retry"]) not in html


def test_no_mq_setting_at_all_uses_the_embedded_redis_and_the_mq_prefix(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, member: Callable[..., Client]
) -> None:
    from store.embedded import EmbeddedRedis

    for name in ("MQ_STORES", "MQ_PREFIX", "MQ_REDIS_URL"):
        assert not hasattr(django_settings, name)
    data_dir = tmp_path / "embedded"
    # The one knob used here: the data directory, so the test's server is private.
    monkeypatch.setenv("MQ_DATA_DIR", str(data_dir))
    server = EmbeddedRedis(data_dir, appendonly=False)
    try:
        html = member().get(reverse("mqadmin:home")).content.decode()
        assert "embedded Redis at" in html
        assert server.is_running()
        assert services.configured_stores() == {"default": {"prefix": "mq"}}
        assert services.get_named_store("default").prefix == "mq"
    finally:
        services.reset()
        server.stop()


def test_manage_py_check_passes_in_the_host_project() -> None:
    call_command("check", fail_level="WARNING")


def test_behind_a_script_prefix_every_link_and_redirect_keeps_it(
    seeded: Seeded, member: Callable[..., Client]
) -> None:
    # The whole site served under /corp (SCRIPT_NAME from the web server, which the WSGI
    # handler turns into the script prefix; Django's test client leaves that to us):
    # reverse() and the pages' links carry it, and so do redirects.
    from django.urls import get_script_prefix, set_script_prefix

    client = member("pause_queue")
    before = get_script_prefix()
    set_script_prefix("/corp/")
    try:
        html = client.get(PREFIX + "jobs/?store=main", SCRIPT_NAME="/corp").content.decode()
        response = client.post(
            PREFIX + "actions/queue/pause/",
            {"store": "main", "queue": "emails"},
            SCRIPT_NAME="/corp",
        )
        anonymous = Client().get(PREFIX + "jobs/", SCRIPT_NAME="/corp")
    finally:
        set_script_prefix(before)
    links = local_urls(html)
    assert "/corp/ops/mq/jobs/" in links
    for link in links:
        # STATIC_URL is absolute here ("/assets/"), so it is not prefixed.
        assert link.startswith(("/corp/ops/mq/", "/assets/mqadmin/")), link
    assert response.status_code == 302
    assert response["Location"] == "/corp/ops/mq/"
    location = urlsplit(anonymous["Location"])
    assert location.path == "/corp" + LOGIN_PATH
    assert parse_qs(location.query)["next"] == ["/corp/ops/mq/jobs/"]


def test_ensure_admin_creates_a_superuser_of_the_hosts_user_model(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_ADMIN_PASSWORD", "pw-for-tests")
    settings.BASE_DIR = tmp_path  # the host has no VAR_DIR: the password file goes under BASE_DIR

    call_command("ensure_admin", username="root@example.com")

    admin = get_user_model().objects.get()
    assert (admin.email, admin.is_superuser) == ("root@example.com", True)
    assert admin.check_password("pw-for-tests")


# -- Django 6's Content Security Policy in the host ---------------------------------------

# An inline <script> (no src), a <style> element, a style="" attribute, an on*="" handler.
INLINE_CODE = re.compile(
    r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=\"|\son[a-z]+=\"", re.IGNORECASE
)


@pytest.mark.skipif(
    django.VERSION < (6, 0), reason="Django 6.0 added SECURE_CSP and its middleware"
)
@pytest.mark.parametrize("name", PAGES)
def test_pages_work_under_the_hosts_csp_with_nonces(
    name: str, settings: Any, seeded: Seeded, member: Callable[..., Client]
) -> None:
    from django.utils.csp import CSP

    # The host turns on Django's CSP: a nonce-based policy enforced, another reported.
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.csp.ContentSecurityPolicyMiddleware",
    ]
    settings.SECURE_CSP = {
        "default-src": [CSP.SELF],
        "script-src": [CSP.SELF, CSP.NONCE],
        "style-src": [CSP.SELF, CSP.NONCE],
    }
    settings.SECURE_CSP_REPORT_ONLY = {
        "default-src": [CSP.SELF],
        "script-src": [CSP.SELF],
        "style-src": [CSP.SELF],
        "img-src": [CSP.SELF, "data:"],
    }
    client = member(*ALL_PERMISSIONS, staff=True)
    url, fragment = pages(seeded)[name]
    for headers in ({}, {"HX-Request": "true"}):
        response = client.get(url, headers=headers)
        assert response.status_code == 200, response.content[:300]
        # The app's own strict policy stands (the middleware leaves a view's header alone),
        # and the page has nothing inline that it, or the host's nonce policy, would block.
        policy = response["Content-Security-Policy"]
        assert policy == CONTENT_SECURITY_POLICY
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        html = response.content.decode()
        assert not INLINE_CODE.findall(html), (name, INLINE_CODE.findall(html)[:3])
        assert "Content-Security-Policy-Report-Only" in response
        assert f'id="{fragment}"' in html

    # The host's own pages get the host's policy (the middleware is at work).
    sign_in = Client().get(LOGIN_PATH)
    assert (
        sign_in["Content-Security-Policy"]
        == "default-src 'self'; script-src 'self'; style-src 'self'"
    )


@pytest.mark.skipif(
    django.VERSION < (6, 0), reason="Django 6.0 added SECURE_CSP and its middleware"
)
def test_error_pages_work_under_the_hosts_csp(
    settings: Any, seeded: Seeded, member: Callable[..., Client]
) -> None:
    from django.utils.csp import CSP

    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.csp.ContentSecurityPolicyMiddleware",
    ]
    settings.SECURE_CSP = {"default-src": [CSP.SELF], "script-src": [CSP.SELF, CSP.NONCE]}
    response = member().get(reverse("mqadmin:job", args=["nowhere", "j-1"]))
    assert response.status_code == 404
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert not INLINE_CODE.findall(response.content.decode())
