"""The lookup box and the job page."""

from __future__ import annotations

import html as htmllib
import json
import re
import time
from typing import Any

import pytest
from django.test import Client

from store import (
    Claimed,
    EnqueueRequest,
    FakeClock,
    RedisJobStore,
    Retry,
)
from store.records import DedupePolicy, TraceContext
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, fan_out, text_of

pytestmark = pytest.mark.django_db


# ---------------------------------------------------------------------- lookup


@pytest.mark.parametrize(
    "job_id", ["plain-1", "a/b/c", "with:colons:1", "spaces and %25 percent", "ünï/cøde?x=1#frag"]
)
def test_lookup_goes_to_the_job_page_whatever_the_id(
    job_id: str, stores: Stores, admin_client_: Client
) -> None:
    stores.main.enqueue(EnqueueRequest(id=job_id, name="A", queue="q"))

    response = admin_client_.get("/jobs/lookup/", {"store": "main", "id": job_id})

    assert response.status_code == 302
    page = admin_client_.get(response["Location"])
    assert page.status_code == 200
    assert htmllib.escape(job_id, quote=False) in text_of(page)


def test_lookup_of_an_unknown_id_says_where_it_looked(
    stores: Stores, admin_client_: Client
) -> None:
    response = admin_client_.get("/jobs/lookup/", {"store": "side", "id": "nope"})

    assert response.status_code == 404
    assert "Store “side” has no job with id “nope”." in text_of(response)


def test_an_unknown_job_page_is_404(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.get("/stores/main/jobs/ghost")

    assert response.status_code == 404
    assert "has no job with id “ghost”" in text_of(response)


# ---------------------------------------------------------------------- job page


def test_every_record_field_is_shown(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(
        EnqueueRequest(
            name="Charge",
            queue="billing",
            payload={"amount": 1299, "nested": {"list": [1, None, True]}},
            metadata={"tenant": "acme"},
            priority=7,
            attempts_max=4,
            backoff={"kind": "exponential", "delay_ms": 30_000},
            keep={"completed": {"count": 100}, "failed": {"age_ms": 86_400_000}},
            timeout_ms=45_000,
            dedupe=DedupePolicy(key="invoice-9"),
            trace=TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True),
        )
    ).id

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    for fragment in (
        "<dt>Priority</dt><dd>7</dd>",
        "0 of 4 made",
        "exponential, 30.0 s",
        "completed: last 100; failed: 24 h",
        "45.0 s",
        "invoice-9",
        "held by this job",
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        "sampled",
        '<span class="j-key">&quot;amount&quot;</span>',
        '<span class="j-num">1299</span>',
        '<span class="j-lit">null</span>',
        '<span class="j-str">&quot;acme&quot;</span>',
        "Enqueued</dt>",
        "Runs at</dt>",
        "Last claimed</dt>",
        "Finished</dt>",
        "No attempt yet",
        "absent (the job has not finished)",
    ):
        assert fragment in html, fragment


def test_a_failure_shows_its_traceback_and_the_ledger_shows_every_attempt(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(name="Charge", queue="billing", attempts_max=2)).id
    claimed = main.claim(queue="billing", names=["Charge"], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed)
    main.ack(
        job_id,
        "w:1",
        Retry(
            0,
            {
                "error": {
                    "type": "TimeoutError",
                    "module": "builtins",
                    "message": "slow",
                    "kind": "error",
                    "traceback": "Traceback...\nTimeoutError: slow",
                }
            },
        ),
    )
    failed_id = failed_job(main, name="Other", queue="billing")

    retried = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))
    failed = text_of(admin_client_.get(f"/stores/main/jobs/{failed_id}"))

    assert '<span class="badge outcome-retried">retried</span>' in retried
    assert "<code>TimeoutError</code>: slow" in retried
    assert re.search(r"waited \d+ ms · ran \d+ ms", retried)
    assert "Failed with <code>ValueError</code>" in failed
    assert '<pre class="traceback">Traceback (most recent call last):' in failed
    assert "ValueError: card declined &lt;b&gt;bold&lt;/b&gt;" in failed
    assert '<span class="badge outcome-failed">failed</span>' in failed


def test_failed_reason_is_shown_only_when_the_store_recorded_one(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    handler_failed = failed_job(main)
    stalled = main.enqueue(EnqueueRequest(name="Charge", queue="billing")).id
    claimed = main.claim(queue="billing", names=["Charge"], token="w:9", lock_duration_ms=1)
    assert isinstance(claimed, Claimed) and claimed.job.id == stalled
    time.sleep(0.02)
    main.recover_stalled(max_stalled_count=0)
    reason = main.get_job(stalled).failed_reason
    assert main.get_job(stalled).state == "failed" and reason

    # A handler's error is the failure box (from the exit); no empty "Failed reason" row.
    assert "Failed reason" not in text_of(admin_client_.get(f"/stores/main/jobs/{handler_failed}"))
    stalled_html = text_of(admin_client_.get(f"/stores/main/jobs/{stalled}"))
    assert f"<dt>Failed reason</dt><dd>{reason}</dd>" in stalled_html


def test_an_active_job_shows_its_lock_owner_expiry_and_cancel_flag(
    stores: Stores, login: Any
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(name="Charge", queue="billing")).id
    main.claim(queue="billing", names=["Charge"], token="worker-7f3a:42", lock_duration_ms=120_000)
    client = login("cancel_job", "view_payload")

    html = text_of(client.get(f"/stores/main/jobs/{job_id}"))

    assert '<a class="lock-owner" href="/workers/#worker-worker-7f3a"' in html
    assert "<code>worker-7f3a</code>" in html
    assert "token <code>worker-7f3a:42</code>" in html
    until = re.search(r'<time class="countdown" data-until="(\d+)"', html)
    assert until and int(until.group(1)) > main.now()
    assert "Cancel requested</dt><dd>no" in html

    response = client.post("/actions/job/cancel/", {"store": "main", "job_id": job_id}, follow=True)

    html = text_of(response)
    assert "Cancel requested for" in html
    assert "<strong>yes</strong> — the worker stops it at its next heartbeat" in html


def test_an_expired_lock_is_flagged(stores: Stores, admin_client_: Client) -> None:
    clock = FakeClock(stores.main.now() - 600_000)
    past = RedisJobStore(
        stores.main.client, prefix=stores.main_prefix, store_key="main", clock=clock
    )
    try:
        job_id = past.enqueue(EnqueueRequest(name="Charge", queue="billing")).id
        past.claim(queue="billing", names=["Charge"], token="gone:1", lock_duration_ms=30_000)
    finally:
        past.close()  # the claim started a wake subscription

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    assert re.search(r"expired (9|10) min ago", html)
    assert "the stall sweep requeues or fails the job" in html


def test_dedupe_key_links_to_the_job_that_holds_it(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    first = main.enqueue(
        EnqueueRequest(name="Mail", queue="q", dedupe=DedupePolicy(key="user-1"))
    ).id
    dropped = main.enqueue(
        EnqueueRequest(name="Mail", queue="q", dedupe=DedupePolicy(key="user-1"))
    )
    assert dropped.duplicate and dropped.id == first

    html = text_of(admin_client_.get(f"/stores/main/jobs/{first}"))
    assert "held by this job" in html and "while it is pending" in html

    main.cancel(first)  # a terminal job frees a pending-mode key
    html = text_of(admin_client_.get(f"/stores/main/jobs/{first}"))
    assert "free: no job holds this key now" in html

    second = main.enqueue(
        EnqueueRequest(name="Mail", queue="q", dedupe=DedupePolicy(key="user-1"))
    ).id
    html = text_of(admin_client_.get(f"/stores/main/jobs/{first}"))
    assert f'now held by <a class="mono" href="/stores/main/jobs/{second}">{second}</a>' in html

    window = main.enqueue(
        EnqueueRequest(name="Sync", queue="q", dedupe=DedupePolicy(key="w", ttl_ms=3_600_000))
    ).id
    html = text_of(admin_client_.get(f"/stores/main/jobs/{window}"))
    assert "held by this job, window ends" in html


def test_flow_links_both_ways(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b"])
    child = stores.side.list().items[0]

    parent_html = text_of(admin_client_.get(f"/stores/main/jobs/{flow_id}"))
    child_html = text_of(admin_client_.get(f"/stores/side/jobs/{child.id}"))

    assert f'<a href="/stores/main/flows/{flow_id}">2 children</a>' in parent_html
    assert "2 pending" in parent_html
    assert f'href="/stores/main/flows/{flow_id}"' in child_html
    assert "parent store main" in child_html


@pytest.mark.parametrize(
    ("state", "shown", "hidden"),
    [
        ("failed", ["retry", "remove"], ["cancel", "promote"]),
        ("delayed", ["cancel", "promote", "remove"], ["retry"]),
        ("waiting", ["cancel", "remove"], ["retry", "promote"]),
        ("active", ["cancel"], ["retry", "promote", "remove"]),
        ("completed", ["remove"], ["retry", "cancel", "promote"]),
        ("waiting-children", ["cancel"], ["retry", "promote", "remove"]),
    ],
)
def test_actions_are_shown_only_when_the_state_allows_them(
    state: str, shown: list[str], hidden: list[str], stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    if state == "failed":
        job_id = failed_job(main)
    elif state == "completed":
        job_id = completed_job(main)
    elif state == "waiting-children":
        job_id = fan_out(main, stores.side, ["a"])
    else:
        job_id = main.enqueue(
            EnqueueRequest(name="A", queue="q", delay_ms=60_000 if state == "delayed" else 0)
        ).id
        if state == "active":
            main.claim(queue="q", names=["A"], token="w:1")
    assert main.get_job(job_id).state == state  # type: ignore[union-attr]

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    for verb in shown:
        assert f'action="/actions/job/{verb}/"' in html, verb
    for verb in hidden:
        assert f'action="/actions/job/{verb}/"' not in html, verb


def test_buttons_need_their_permissions(stores: Stores, login: Any) -> None:
    job_id = failed_job(stores.main)

    html = text_of(login("retry_job").get(f"/stores/main/jobs/{job_id}"))

    assert 'action="/actions/job/retry/"' in html
    assert 'action="/actions/job/remove/"' not in html


def test_payload_exit_and_metadata_values_need_the_view_payload_permission(
    stores: Stores, viewer: Client, login: Any
) -> None:
    job_id = failed_job(
        stores.main, payload={"secret": "s3cr3t-value"}, metadata={"tenant": "m3ta-value"}
    )

    hidden = text_of(viewer.get(f"/stores/main/jobs/{job_id}"))
    listed = text_of(viewer.get("/jobs/?store=main"))
    shown = text_of(login("view_payload").get(f"/stores/main/jobs/{job_id}"))

    for html in (hidden, listed):
        assert "s3cr3t-value" not in html
        assert "m3ta-value" not in html
        assert "card declined" not in html
    assert "hidden: needs the view payload permission" in hidden
    assert "<code>tenant</code>" in hidden  # keys stay visible
    assert "s3cr3t-value" in shown and "m3ta-value" in shown and "card declined" in shown


def test_the_summary_polls_until_the_job_finishes_and_follows_the_stream(
    stores: Stores, admin_client_: Client
) -> None:
    waiting = stores.main.enqueue(EnqueueRequest(name="A", queue="q")).id
    done = completed_job(stores.main)

    live = text_of(
        admin_client_.get(f"/stores/main/jobs/{waiting}", headers={"HX-Request": "true"})
    )
    final = text_of(admin_client_.get(f"/stores/main/jobs/{done}", headers={"HX-Request": "true"}))

    assert live.lstrip().startswith('<div id="job-summary" class="poll" hx-get=')
    assert 'hx-trigger="every 3s, mq:visible from:body, sse:state"' in live
    # A finished job polls no more, but its page still follows the event stream (a retry).
    final_div = final.split(">", 1)[0]
    assert 'hx-trigger="sse:state"' in final_div
    assert "every 3s" not in final_div and 'class="poll"' not in final_div


# ---------------------------------------------------------------------- groups and limits


def test_the_job_page_shows_the_group_and_why_a_full_group_waits(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    main.set_queue_limits("tenants", group_concurrency=1)
    first = main.enqueue(EnqueueRequest(name="Sync", queue="tenants", group="<b>x</b>")).id
    second = main.enqueue(EnqueueRequest(name="Sync", queue="tenants", group="<b>x</b>")).id
    claimed = main.claim(queue="tenants", names=["Sync"], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == first

    waiting = text_of(admin_client_.get(f"/stores/main/jobs/{second}"))
    running = text_of(admin_client_.get(f"/stores/main/jobs/{first}"))

    assert "<b>x</b>" not in waiting
    assert '<code class="wrap" data-job-group>&lt;b&gt;x&lt;/b&gt;</code>' in waiting
    assert 'href="/stores/main/queues/tenants#groups-title"' in waiting
    assert 'data-wait-kind="group full"' in waiting
    assert "<strong>Held back:</strong> group full: 1 of 1 running" in waiting
    # Running, it no longer waits: the group shows, the reason does not.
    assert "data-job-group" in running and "Held back" not in running


def test_the_job_page_says_until_when_a_limit_holds_a_job(
    stores: Stores, admin_client_: Client
) -> None:
    from mqadmin.templatetags.mqadmin_tags import absolute

    main = stores.main
    main.set_queue_limits("tenants", group_concurrency=1)
    main.enqueue(EnqueueRequest(name="Sync", queue="tenants", group="g"))
    second = main.enqueue(EnqueueRequest(name="Sync", queue="tenants", group="g")).id
    claimed = main.claim(queue="tenants", names=["Sync"], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed)
    # A second claim finds the group full and holds it until the first lock expires.
    main.claim(queue="tenants", names=["Sync"], token="w:2", lock_duration_ms=30_000)

    html = text_of(admin_client_.get(f"/stores/main/jobs/{second}"))

    expires = claimed.job.processed_at + 30_000  # type: ignore[operator]
    assert re.search(
        r"group full: 1 of 1 running · may be claimed in (29|30) s <[^>]*>·</span> <time [^>]*>"
        + re.escape(absolute(expires)),
        html,
    )


def test_a_paused_queue_is_why_its_job_waits(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="Sync", queue="tenants")).id
    stores.main.pause("tenants")

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    assert 'data-wait-kind="paused"' in html
    assert "queue &#x27;tenants&#x27; is paused" in html


def test_a_job_nothing_holds_back_shows_no_reason_and_no_group(
    stores: Stores, admin_client_: Client
) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="Sync", queue="tenants")).id

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    assert "Held back" not in html
    assert "data-job-group" not in html


def test_the_payload_has_a_copy_button_with_the_escaped_json(stores: Stores, login: Any) -> None:
    job_id = stores.main.enqueue(
        EnqueueRequest(name="Mail", queue="m", payload={"to": '<b>"x"</b>'})
    ).id
    html = text_of(login("view_payload").get(f"/stores/main/jobs/{job_id}"))
    copy = re.search(r'<button type="button" class="copy copy-json" data-copy="([^"]*)"', html)
    assert copy is not None
    assert "&lt;b&gt;" in copy.group(1) and "<b>" not in copy.group(1)
    assert json.loads(htmllib.unescape(copy.group(1))) == {"to": '<b>"x"</b>'}
    hidden = text_of(login().get(f"/stores/main/jobs/{job_id}"))
    assert "copy-json" not in hidden and "&lt;b&gt;" not in hidden
