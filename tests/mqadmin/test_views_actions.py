"""Single actions: each does what it says, explains a wrong state, reports and is audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from mqadmin.models import AuditEntry
from store import EnqueueRequest, ScheduleRecord
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, fan_out, text_of

pytestmark = pytest.mark.django_db


def post(client: Client, verb: str, job_id: str, **extra: str) -> Any:
    return client.post(
        f"/actions/job/{verb}/", {"store": "main", "job_id": job_id, **extra}, follow=True
    )


def test_retry_a_failed_job(stores: Stores, login: Any) -> None:
    job_id = failed_job(stores.main)
    client = login("retry_job")

    response = post(client, "retry", job_id)

    assert response.redirect_chain[-1][0] == f"/stores/main/jobs/{job_id}"
    assert stores.main.get_job(job_id).state == "waiting"  # type: ignore[union-attr]
    assert f"Retried {job_id}: it is waiting again." in text_of(response)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.store, entry.target, entry.ok) == ("retry", "main", job_id, True)
    assert entry.username == entry.user.username  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("verb", "make", "message"),
    [
        (
            "retry",
            "completed",
            "cannot retry {id}: the job is completed — only failed jobs can be retried",
        ),
        (
            "cancel",
            "completed",
            "cannot cancel {id}: the job is completed — finished jobs cannot be cancelled",
        ),
        (
            "promote",
            "waiting",
            "cannot promote {id}: the job is waiting — only delayed jobs can be promoted",
        ),
        (
            "remove",
            "active",
            "cannot remove {id}: the job is active — active jobs and flow parents waiting for children cannot be removed",
        ),
    ],
)
def test_a_wrong_state_is_explained_and_audited_as_failed(
    verb: str, make: str, message: str, stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    if make == "completed":
        job_id = completed_job(main)
    else:
        job_id = main.enqueue(EnqueueRequest(name="A", queue="q")).id
        if make == "active":
            main.claim(queue="q", names=["A"], token="w:1")

    response = post(admin_client_, verb, job_id)

    html = text_of(response)
    expected = message.format(id=job_id)
    assert expected[0].upper() + expected[1:] in html
    assert 'class="message error"' in html
    entry = AuditEntry.objects.get()
    assert entry.action == verb and not entry.ok
    assert main.get_job(job_id).state == make  # type: ignore[union-attr]


def test_an_unknown_job_is_reported(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.post(
        "/actions/job/retry/", {"store": "main", "job_id": "ghost", "next": "/jobs/"}, follow=True
    )

    assert "Cannot retry ghost: no such job." in text_of(response)
    assert not AuditEntry.objects.get().ok


def test_cancel_waiting_and_active_jobs(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    running = main.enqueue(EnqueueRequest(name="A", queue="q")).id
    waiting = main.enqueue(EnqueueRequest(name="A", queue="q")).id
    main.claim(queue="q", names=["A"], token="w:1")  # claims the oldest: `running`

    first = text_of(post(admin_client_, "cancel", waiting))
    second = text_of(post(admin_client_, "cancel", running))

    assert f"Cancelled {waiting}." in first
    assert f"Cancel requested for {running}: it is running" in second
    assert main.get_job(waiting).state == "cancelled"  # type: ignore[union-attr]
    record = main.get_job(running)
    assert record is not None and record.state == "active" and record.cancel_requested


def test_promote_a_delayed_job(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="A", queue="q", delay_ms=3_600_000)).id

    response = post(admin_client_, "promote", job_id)

    assert f"Promoted {job_id}: it is waiting now." in text_of(response)
    assert stores.main.get_job(job_id).state == "waiting"  # type: ignore[union-attr]


def test_remove_goes_back_to_the_explorer(stores: Stores, admin_client_: Client) -> None:
    job_id = completed_job(stores.main)

    response = post(admin_client_, "remove", job_id, next=f"/stores/main/jobs/{job_id}")

    assert response.redirect_chain[-1][0] == "/jobs/?store=main"
    assert stores.main.get_job(job_id) is None
    assert f"Removed {job_id}." in text_of(response)


def test_cancel_a_flow_parent_waiting_for_children(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b"])

    post(admin_client_, "cancel", flow_id)

    record = stores.main.get_job(flow_id)
    assert record is not None and record.state == "cancelled"
    assert record.flow is not None and record.flow.cancelled == 2


def test_trigger_and_remove_a_schedule(stores: Stores, login: Any) -> None:
    main = stores.main
    main.upsert_schedule(
        ScheduleRecord(
            key="Digest/daily",
            job_name="Digest",
            queue="mail",
            cron="0 7 * * *",
            tz="Europe/Berlin",
            next_run_at=main.now() + 3_600_000,
        )
    )
    client = login("trigger_schedule", "remove_schedule")

    triggered = client.post(
        "/actions/schedule/trigger/", {"store": "main", "key": "Digest/daily"}, follow=True
    )

    jobs = main.list(name="Digest").items
    assert len(jobs) == 1
    assert f"Triggered “Digest/daily”: enqueued job {jobs[0].id}." in text_of(triggered)
    # The new job is a link in the message (escaped, built server-side).
    assert f'<a href="/stores/main/jobs/{jobs[0].id}">Open it</a>' in text_of(triggered)
    assert triggered.redirect_chain[-1][0] == "/schedules/"
    entry = AuditEntry.objects.get()
    assert entry.action == "trigger_schedule" and entry.params == {"job_id": jobs[0].id}

    removed = client.post(
        "/actions/schedule/remove/", {"store": "main", "key": "Digest/daily"}, follow=True
    )

    assert "Removed schedule “Digest/daily”." in text_of(removed)
    assert main.list_schedules() == []
    again = client.post(
        "/actions/schedule/trigger/", {"store": "main", "key": "Digest/daily"}, follow=True
    )
    assert "Cannot trigger “Digest/daily”: no such schedule." in text_of(again)
    assert [e.ok for e in AuditEntry.objects.order_by("id")] == [True, True, False]


def test_the_audit_log_lists_every_action_for_those_allowed_to_see_it(
    stores: Stores, login: Any, viewer: Client
) -> None:
    job_id = failed_job(stores.main)
    actor = login("retry_job", "view_auditentry")
    post(actor, "retry", job_id)
    post(actor, "retry", job_id)  # now waiting: refused by the store
    viewer.post("/actions/job/remove/", {"store": "main", "job_id": job_id})  # no permission

    denied = viewer.get("/audit/")
    html = text_of(actor.get("/audit/"))
    failed_only = text_of(actor.get("/audit/?outcome=failed"))
    by_action = text_of(actor.get("/audit/?action=remove"))

    assert denied.status_code == 403
    assert "view_auditentry" in text_of(denied)
    assert html.count('<tr class="ok-row">') == 1
    assert html.count('<tr class="failed-row">') == 2
    assert f'<a class="mono" href="/stores/main/jobs/{job_id}">{job_id}</a>' in html
    assert "refused: You need the “remove_job” permission" in html
    assert failed_only.count('<tr class="failed-row">') == 2
    assert '<tr class="ok-row">' not in failed_only
    assert by_action.count('<tr class="failed-row">') == 1


def test_the_audit_log_pages_by_entry_number(stores: Stores, login: Any) -> None:
    client = login("pause_queue", "view_auditentry")
    for _ in range(55):
        client.post("/actions/queue/pause/", {"store": "main", "queue": "q"})

    first = text_of(client.get("/audit/"))
    oldest_id = AuditEntry.objects.order_by("id").first().id  # type: ignore[union-attr]

    assert first.count('<tr class="ok-row">') == 50
    assert 'rel="next"' in first
    second = text_of(client.get(f"/audit/?before={oldest_id + 5}"))
    assert second.count('<tr class="ok-row">') == 5
    assert 'rel="next"' not in second


def test_pause_and_resume_a_schedule_and_see_its_last_runs(stores: Stores, login: Any) -> None:
    main = stores.main
    main.upsert_schedule(
        ScheduleRecord(
            key="Digest/daily",
            job_name="Digest",
            queue="mail",
            cron="0 7 * * *",
            next_run_at=main.now() + 3_600_000,
        )
    )
    client = login("trigger_schedule", "remove_schedule")
    client.post("/actions/schedule/trigger/", {"store": "main", "key": "Digest/daily"})
    page = text_of(client.get("/schedules/"))
    row = page.split('data-schedule="Digest/daily"', 1)[1].split("</tr>", 1)[0]
    assert 'href="/stores/main/jobs/sched/Digest/daily/manual/' in row  # its last run
    assert 'action="/actions/schedule/pause/"' in row

    paused = client.post(
        "/actions/schedule/pause/", {"store": "main", "key": "Digest/daily"}, follow=True
    )
    assert "Paused schedule “Digest/daily”" in text_of(paused)
    assert main.paused_schedules() == {"Digest/daily"}
    row = text_of(paused).split('data-schedule="Digest/daily"', 1)[1].split("</tr>", 1)[0]
    assert 'class="badge paused"' in row and 'action="/actions/schedule/resume/"' in row

    resumed = client.post(
        "/actions/schedule/resume/", {"store": "main", "key": "Digest/daily"}, follow=True
    )
    assert "Resumed schedule “Digest/daily”" in text_of(resumed)
    assert main.paused_schedules() == set()
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["trigger_schedule", "pause_schedule", "resume_schedule"]
    # Pausing needs the permission to remove schedules.
    denied = login("trigger_schedule").post(
        "/actions/schedule/pause/", {"store": "main", "key": "Digest/daily"}
    )
    assert denied.status_code == 403
    assert main.paused_schedules() == set()


def test_set_and_clear_queue_limits(stores: Stores, login: Any) -> None:
    client = login("change_limits")

    done = client.post(
        "/actions/queue/limits/",
        {"store": "main", "queue": "emails", "concurrency": "3", "rate": "20/250ms"},
    )
    limits = stores.main.queue_limits("emails")
    cleared = client.post("/actions/queue/clear_limits/", {"store": "main", "queue": "emails"})

    assert done.status_code == 302
    assert (limits.concurrency, limits.rate.limit, limits.rate.per_ms) == (3, 20, 250)  # type: ignore[union-attr]
    assert cleared.status_code == 302
    assert not stores.main.queue_limits("emails").limited
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["limits", "clear_limits"]


def test_a_bad_rate_is_a_form_error(stores: Stores, login: Any) -> None:
    client = login("change_limits")

    response = client.post(
        "/actions/queue/limits/", {"store": "main", "queue": "emails", "rate": "fast"}
    )

    assert response.status_code == 400
    assert "Rate “fast”" in text_of(response)
    assert not stores.main.queue_limits("emails").limited


def test_limits_without_any_value_are_refused(stores: Stores, login: Any) -> None:
    client = login("change_limits")

    response = client.post(
        "/actions/queue/limits/", {"store": "main", "queue": "emails"}, follow=True
    )

    assert "give at least one of concurrency, rate, group concurrency and group rate" in text_of(
        response
    )
    assert not AuditEntry.objects.get().ok


def test_group_limits_set_through_the_verb_reach_the_store(stores: Stores, login: Any) -> None:
    client = login("change_limits")

    response = client.post(
        "/actions/queue/limits/",
        {
            "store": "main",
            "queue": "emails",
            "concurrency": "",
            "rate": "",
            "group_concurrency": "2",
            "group_rate": "10/min",
        },
        follow=True,
    )

    limits = stores.main.queue_limits("emails")
    assert (limits.concurrency, limits.rate) == (None, None)
    assert limits.group_concurrency == 2
    assert (limits.group_rate.limit, limits.group_rate.per_ms) == (10, 60_000)  # type: ignore[union-attr]
    assert (
        "Limited queue “emails” of main: at most 2 running per group and group rate 10/min."
        in text_of(response)
    )
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.ok) == ("limits", "emails", True)
    assert entry.params["group_concurrency"] == 2
    assert entry.params["group_rate"] == "10/min"


def test_setting_limits_replaces_all_four(stores: Stores, login: Any) -> None:
    from store import Rate

    stores.main.set_queue_limits(
        "emails", concurrency=5, group_concurrency=1, group_rate=Rate(1, 1_000)
    )
    client = login("change_limits")

    client.post(
        "/actions/queue/limits/",
        {"store": "main", "queue": "emails", "concurrency": "3", "group_rate": ""},
    )

    limits = stores.main.queue_limits("emails")
    assert (limits.concurrency, limits.rate, limits.group_concurrency, limits.group_rate) == (
        3,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("group_rate", "fast", "Group rate “fast”: a rate looks like N/PERIOD"),
        ("group_rate", "0/s", "Group rate “0/s”: a rate&#x27;s limit must be between 1"),
        ("group_concurrency", "0", "group_concurrency: Ensure this value is greater than"),
        ("group_concurrency", "two", "group_concurrency: Enter a whole number."),
    ],
)
def test_an_invalid_group_limit_is_refused_and_nothing_is_written(
    field: str, value: str, message: str, stores: Stores, login: Any
) -> None:
    stores.main.set_queue_limits("emails", concurrency=3)
    before = stores.main.queue_limits("emails")
    client = login("change_limits")

    response = client.post(
        "/actions/queue/limits/",
        {"store": "main", "queue": "emails", "concurrency": "7", field: value},
    )

    assert response.status_code == 400
    assert message in text_of(response)
    assert stores.main.queue_limits("emails") == before
    assert not AuditEntry.objects.exists()
