"""Bulk actions: ticked rows, and "all matching this filter" with preview, chunks and resume."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client

from mqadmin.models import AuditEntry
from mqadmin.queries import bulk as bulk_queries
from store import EnqueueRequest
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db


def many_failed(stores: Stores, n: int, name: str = "Charge", **kw: Any) -> list[str]:
    return [failed_job(stores.main, name=name, queue="billing", **kw) for _ in range(n)]


def test_the_explorer_offers_bulk_actions_to_those_allowed(
    stores: Stores, login: Any, viewer: Client
) -> None:
    many_failed(stores, 2)

    allowed = text_of(login("bulk_action", "retry_job").get("/jobs/?store=main"))
    refused = text_of(viewer.get("/jobs/?store=main"))

    assert 'action="/bulk/selected/"' in allowed
    assert 'action="/bulk/preview/"' in allowed
    assert '<option value="retry" selected>retry</option>' in allowed
    assert '<option value="remove"' not in allowed
    assert allowed.count('name="ids"') == 2
    assert "/bulk/" not in refused
    assert 'name="ids"' not in refused


def test_selected_rows_get_a_result_each(stores: Stores, login: Any) -> None:
    failed = many_failed(stores, 2)
    done = completed_job(stores.main)
    client = login("bulk_action", "retry_job")

    response = client.post(
        "/bulk/selected/",
        {
            "store": "main",
            "verb": "retry",
            "ids": [*failed, done, "ghost"],
            "next": "/jobs/?store=main",
        },
    )

    assert response.status_code == 200
    html = text_of(response)
    assert "Bulk retry: 2 succeeded, 2 failed" in html
    assert f"Cannot retry {done}: the job is completed — only failed jobs can be retried." in html
    assert "Cannot retry ghost: no such job." in html
    assert all(stores.main.get_job(j).state == "waiting" for j in failed)  # type: ignore[union-attr]
    entry = AuditEntry.objects.get()
    assert entry.action == "bulk_retry" and not entry.ok
    assert entry.params["count"] == 4
    assert entry.result == "retry: 2 succeeded, 2 failed"
    assert 'href="/jobs/?store=main"' in html


def test_selecting_nothing_is_a_400(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.post("/bulk/selected/", {"store": "main", "verb": "retry"})

    assert response.status_code == 400
    assert "Select at least one job first." in text_of(response)


def test_preview_counts_exactly_from_counters_and_shows_a_sample(
    stores: Stores, admin_client_: Client
) -> None:
    ids = many_failed(stores, 12)

    response = admin_client_.get("/bulk/preview/?store=main&verb=retry&state=failed&queue=billing")

    html = text_of(response)
    assert response.status_code == 200
    assert "<strong>12</strong> jobs match this filter (exact)." in html
    sample = re.findall(r'<td class="id"><a class="mono" href="/stores/main/jobs/([^"]+)">', html)
    # Latest failure first: failed jobs are listed from their finished-time sets
    # (ties within a millisecond by id string).
    expected = [
        r.id for r in stores.main.list_by_state(["failed"], queue="billing", limit=10).items
    ]
    assert sample == expected and set(sample) <= set(ids)
    assert 'action="/bulk/run/"' in html
    assert '<input type="hidden" name="state" value="failed">' in html
    assert "Retry these 12 jobs" in html


def test_preview_counts_by_paging_when_counters_cannot_tell(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 7, metadata={"batch": "x"})
    many_failed(stores, 3, metadata={"batch": "y"})

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=retry&meta=batch%3Dx"))

    assert "<strong>7</strong> jobs match this filter (exact)." in html


def test_preview_stops_counting_at_its_cap(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_queries, "PREVIEW_CAP", 4)
    monkeypatch.setattr(bulk_queries, "BULK_CHUNK", 2)
    many_failed(stores, 9)

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=retry&name=Charge"))

    assert "<strong>≥ 4</strong> jobs match this filter" in html
    assert "Retry all matching jobs" in html


def test_preview_of_an_unservable_filter_is_a_400(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.get("/bulk/preview/?store=main&verb=retry&order_by=run_at")

    assert response.status_code == 400
    assert "Ordering by run time needs the state “delayed” alone" in text_of(response)


def test_a_filter_run_works_in_bounded_requests_and_resumes(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_queries, "BULK_MAX_ITEMS", 5)
    monkeypatch.setattr(bulk_queries, "BULK_CHUNK", 2)
    ids = many_failed(stores, 12)
    other = failed_job(stores.main, name="Other", queue="billing")

    first = admin_client_.post(
        "/bulk/run/",
        {"store": "main", "verb": "retry", "name": "Charge", "state": "failed", "expected": 12},
    )
    # Post/redirect/get: the results page is its own URL.
    assert first.status_code == 302 and first["Location"].startswith("/bulk/runs/")
    first = admin_client_.get(first["Location"])

    html = text_of(first)
    assert "Bulk retry: 5 succeeded, 0 failed" in html
    assert "5 jobs handled so far of 12 matching when previewed" in html
    run = re.search(r'<input type="hidden" name="run" value="(\d+)">', html)
    assert run
    resume = re.search(r'<input type="hidden" name="resume" value="([^"]+)">', html)
    assert resume
    assert sum(stores.main.get_job(j).state == "waiting" for j in ids) == 5  # type: ignore[union-attr]

    handled = 5
    token: str | None = htmllib.unescape(resume.group(1))
    while token:
        page = admin_client_.post(
            "/bulk/run/",
            {
                "store": "main",
                "verb": "retry",
                "name": "Charge",
                "state": "failed",
                "resume": token,
                "run": run.group(1),
                "expected": 12,
            },
            follow=True,
        )
        html = text_of(page)
        run = re.search(r'<input type="hidden" name="run" value="(\d+)">', html) or run
        match = re.search(r"Bulk retry: (\d+) succeeded, 0 failed", html)
        assert match
        handled += int(match.group(1))
        found = re.search(r'<input type="hidden" name="resume" value="([^"]+)">', html)
        token = htmllib.unescape(found.group(1)) if found else None

    assert handled == 12
    assert "Every job matching the filter has been handled." in html
    assert "12 jobs handled so far of 12" in html
    assert all(stores.main.get_job(j).state == "waiting" for j in ids)  # type: ignore[union-attr]
    assert stores.main.get_job(other).state == "failed"  # type: ignore[union-attr]
    entries = list(AuditEntry.objects.order_by("id"))
    assert len(entries) == 3
    assert all(e.action == "bulk_retry" and e.ok for e in entries)
    assert entries[0].params["stopped_at"] == entries[1].params["resumed_from"]
    assert "name=Charge" in entries[0].target


def test_a_filter_run_reports_jobs_the_verb_does_not_apply_to(
    stores: Stores, admin_client_: Client
) -> None:
    failed = many_failed(stores, 2)
    done = completed_job(stores.main, name="Charge", queue="billing")

    html = text_of(
        admin_client_.post(
            "/bulk/run/", {"store": "main", "verb": "cancel", "queue": "billing"}, follow=True
        )
    )

    assert "Bulk cancel: 0 succeeded, 3 failed" in html
    for job_id in (*failed, done):
        assert f"Cannot cancel {job_id}: the job is" in html


def test_the_run_result_page_is_reload_safe_and_needs_the_bulk_permission(
    stores: Stores, admin_client_: Client, login: Any
) -> None:
    ids = many_failed(stores, 3)
    posted = admin_client_.post(
        "/bulk/run/", {"store": "main", "verb": "retry", "state": "failed", "queue": "billing"}
    )
    location = posted["Location"]
    assert all(stores.main.get_job(j).state == "waiting" for j in ids)  # type: ignore[union-attr]
    # Reloading the result page shows the result again and runs nothing.
    before = AuditEntry.objects.count()
    again = admin_client_.get(location)
    assert again.status_code == 200 and "Bulk retry: 3 succeeded, 0 failed" in text_of(again)
    assert AuditEntry.objects.count() == before
    assert login().get(location).status_code == 403
    assert admin_client_.get("/bulk/runs/999999/").status_code == 404


def test_select_all_matching_is_offered_when_more_pages_exist(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 25)
    html = text_of(admin_client_.get("/jobs/?store=main&state=failed&limit=20"))
    match = re.search(
        r'<p class="select-all-matching callout" hidden>.*?<a href="([^"]+)" data-verb-from="#bulk-verb">'
        r"Select all 25 jobs matching this filter</a>",
        html,
        re.DOTALL,
    )
    assert match
    assert htmllib.unescape(match.group(1)) == "/bulk/preview/?store=main&state=failed&limit=20"
    single = text_of(admin_client_.get("/jobs/?store=main&state=failed"))
    assert "select-all-matching" not in single


# ---------------------------------------------------------------------- state-aware verbs


def waiting_jobs(stores: Stores, n: int, queue: str = "billing", **kw: Any) -> list[str]:
    return [
        stores.main.enqueue(EnqueueRequest(name="Charge", queue=queue, **kw)).id for _ in range(n)
    ]


def delayed_jobs(stores: Stores, n: int, queue: str = "billing") -> list[str]:
    return waiting_jobs(stores, n, queue, delay_ms=3_600_000)


def chooser(html: str, select_id: str) -> tuple[list[str], str | None]:
    """The verbs a bulk chooser offers, and the one selected (None: "choose…")."""
    match = re.search(rf'<select id="{select_id}" name="verb"[^>]*>(.*?)</select>', html, re.S)
    assert match, select_id
    options = re.findall(r'<option value="([^"]*)"( selected)?>', match.group(1))
    selected = [value for value, flag in options if flag]
    assert len(selected) == 1
    return [value for value, _ in options if value], selected[0] or None


@pytest.mark.parametrize(
    ("states", "offered", "default"),
    [
        (["failed"], ["retry", "remove"], "retry"),
        (["delayed"], ["cancel", "promote", "remove"], "promote"),
        (["waiting"], ["cancel", "remove"], None),
        (["failed", "delayed"], ["retry", "cancel", "promote", "remove"], None),
        ([], ["retry", "cancel", "promote", "remove"], None),
    ],
)
def test_the_filter_chooser_offers_only_verbs_for_the_filter_states(
    states: list[str],
    offered: list[str],
    default: str | None,
    stores: Stores,
    admin_client_: Client,
) -> None:
    many_failed(stores, 1)
    delayed_jobs(stores, 1)
    waiting_jobs(stores, 1)
    query = "".join(f"&state={state}" for state in states)

    html = text_of(admin_client_.get(f"/jobs/?store=main{query}"))

    assert chooser(html, "bulk-all-verb") == (offered, default)


def test_the_selection_chooser_offers_the_verbs_of_the_rows_listed(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 2)
    completed_job(stores.main)

    terminal = text_of(admin_client_.get("/jobs/?store=main&state=failed&state=completed"))
    mixed = text_of(admin_client_.get("/jobs/?store=main&queue=billing"))
    waiting_jobs(stores, 1)
    with_waiting = text_of(admin_client_.get("/jobs/?store=main&queue=billing"))

    # Failed and completed rows: promote and cancel apply to neither.
    assert chooser(terminal, "bulk-verb") == (["retry", "remove"], "retry")
    assert chooser(mixed, "bulk-verb") == (["retry", "remove"], "retry")
    assert chooser(with_waiting, "bulk-verb") == (["retry", "cancel", "remove"], "retry")
    assert '<select id="bulk-verb" name="verb" required>' in terminal


def test_an_error_group_filter_offers_the_verbs_of_failed_jobs(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 2)
    group = stores.main.error_groups()[0].id

    html = text_of(admin_client_.get(f"/jobs/?store=main&error={group}"))

    assert chooser(html, "bulk-all-verb") == (["retry", "remove"], "retry")


def test_a_state_mixed_preview_says_per_state_what_the_verb_does(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 3)
    waiting_jobs(stores, 2)

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=retry&queue=billing"))

    assert "<strong>5</strong> jobs match this filter (exact)." in html
    outcome = html.split('<ul class="bulk-outcome"', 1)[1].split("</ul>", 1)[0]
    lines = [" ".join(re.sub(r"<[^>]+>", "", li).split()) for li in outcome.split("<li")[1:]]
    assert lines == [
        'class="skipped" data-state="waiting">2 waiting jobs will be skipped '
        "(only failed jobs can be retried)",
        'class="acted" data-state="failed">3 failed jobs will be retried',
    ]
    others = html.split('<ul class="bulk-others">', 1)[1].split("</ul>", 1)[0]
    text = " ".join(re.sub(r"<[^>]+>", "", others).split())
    assert (
        "cancel: 2 waiting jobs will be cancelled; "
        "3 failed jobs will be skipped (finished jobs cannot be cancelled)"
    ) in text
    assert "remove: 2 waiting jobs will be removed for good" in text
    # Promote would change none of these jobs (no delayed one matches): not suggested.
    assert "promote" not in text
    # Retry is not dangerous: a plain button, no confirmation; it names what it changes.
    button = re.search(
        r'<form method="post" action="/bulk/run/".*?<button([^>]*)>([^<]*)</button>', html, re.S
    )
    assert button
    assert "danger" not in button.group(1) and "data-confirm" not in button.group(1)
    assert button.group(2) == "Retry 3 of these 5 jobs"


def test_a_dangerous_verb_still_asks_to_confirm(stores: Stores, admin_client_: Client) -> None:
    many_failed(stores, 2)

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=remove&state=failed"))

    button = re.search(r'<form method="post" action="/bulk/run/".*?<button([^>]*)>', html, re.S)
    assert button
    assert 'class="danger"' in button.group(1)
    assert 'data-confirm="Remove every job matching this filter?"' in button.group(1)
    assert "<strong>2</strong> failed jobs will be removed for good" in html


def test_a_paged_preview_tallies_the_states_it_counts(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 3, metadata={"batch": "x"})
    waiting_jobs(stores, 4, metadata={"batch": "x"})
    waiting_jobs(stores, 5, metadata={"batch": "y"})

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=cancel&meta=batch%3Dx"))

    assert "<strong>7</strong> jobs match this filter (exact)." in html
    assert re.search(r"<strong>4</strong> waiting jobs will be cancelled", html)
    assert re.search(
        r"<strong>3</strong> failed jobs will be skipped \(finished jobs cannot be cancelled\)",
        html,
    )
    assert "Cancel 4 of these 7 jobs" in html


def test_a_preview_without_a_verb_says_what_each_verb_would_do(
    stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 2)
    delayed_jobs(stores, 1)

    html = text_of(admin_client_.get("/bulk/preview/?store=main&queue=billing"))

    assert "Bulk actions: preview" in html and "Choose an action" in html
    others = html.split('<ul class="bulk-others">', 1)[1].split("</ul>", 1)[0]
    verbs = re.findall(r'<li data-verb="([^"]+)">', others)
    assert verbs == ["retry", "cancel", "promote", "remove"]
    assert "&amp;verb=promote" in others
    assert 'action="/bulk/run/"' not in html  # nothing runs without a chosen verb


def test_a_preview_when_no_match_allows_the_verb_offers_no_run(
    stores: Stores, admin_client_: Client
) -> None:
    waiting_jobs(stores, 2)

    html = text_of(admin_client_.get("/bulk/preview/?store=main&verb=retry&queue=billing"))

    assert "<strong>2</strong> waiting jobs will be skipped" in html
    assert "Nothing to retry: only failed jobs can be retried." in html
    assert 'action="/bulk/run/"' not in html


def test_the_preview_names_the_error_group_and_lists_errors(stores: Stores, login: Any) -> None:
    many_failed(stores, 2)
    group = stores.main.error_groups()[0]
    url = f"/bulk/preview/?store=main&verb=retry&error={group.id}"

    seeing = text_of(login("bulk_action", "retry_job", "view_payload").get(url))
    blind = text_of(login("bulk_action", "retry_job").get(url))

    for html in (seeing, blind):
        assert f"Failed with <strong>{group.qualified_type}</strong>" in html
        assert '<th scope="col">Error</th>' in html
        assert html.count('<span class="error-type" title="ValueError">ValueError</span>') == 2
        assert "<b>bold</b>" not in html
    assert "card declined &lt;b&gt;bold&lt;/b&gt;" in seeing
    assert "card declined" not in blind
    assert "hidden: needs the view payload permission" in blind


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "/bulk/preview/?store=main&verb=promote&state=failed",
            "Cannot promote these jobs: they are all failed, and only delayed jobs can be "
            "promoted. Choose one of: retry, remove.",
        ),
        (
            "/bulk/preview/?store=main&verb=retry&state=waiting&state=delayed",
            "Cannot retry these jobs: they are all waiting or delayed, and only failed jobs "
            "can be retried.",
        ),
    ],
)
def test_a_verb_for_none_of_the_listed_states_is_refused(
    url: str, message: str, stores: Stores, admin_client_: Client
) -> None:
    many_failed(stores, 1)

    response = admin_client_.get(url)

    assert response.status_code == 400
    assert message in htmllib.unescape(text_of(response))


def test_a_run_of_a_verb_for_none_of_the_listed_states_is_refused(
    stores: Stores, admin_client_: Client
) -> None:
    ids = many_failed(stores, 2)

    by_filter = admin_client_.post(
        "/bulk/run/", {"store": "main", "verb": "promote", "state": "failed"}
    )
    by_error = admin_client_.post(
        "/bulk/run/",
        {"store": "main", "verb": "cancel", "error": stores.main.error_groups()[0].id},
    )
    selected = admin_client_.post(
        "/bulk/selected/", {"store": "main", "verb": "promote", "ids": [*ids, "ghost"]}
    )
    unnamed = admin_client_.post("/bulk/run/", {"store": "main", "state": "failed"})

    assert by_filter.status_code == 400
    assert "only delayed jobs can be promoted" in text_of(by_filter)
    assert by_error.status_code == 400
    assert "finished jobs cannot be cancelled" in text_of(by_error)
    assert selected.status_code == 400
    assert "Cannot promote these jobs: they are all failed" in text_of(selected)
    assert unnamed.status_code == 400
    assert "Choose the action to run" in text_of(unnamed)
    assert all(stores.main.get_job(j).state == "failed" for j in ids)  # type: ignore[union-attr]
    assert not AuditEntry.objects.exists()
