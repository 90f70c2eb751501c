"""The queue page: counts, limits (the prefilled form), the busiest job groups, and the
queue's drain and clean (preview, bounded runs with "continue", permissions, audit)."""

from __future__ import annotations

import html as htmllib
import re
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from mqadmin.models import AuditEntry
from mqadmin.queries import bulk as bulk_queries
from mqadmin.templatetags.mqadmin_tags import absolute
from store import Claimed, EnqueueRequest, Rate, RedisJobStore
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of
from tests.mqadmin.test_views_overview import LIMIT_INPUTS, form_values

pytestmark = pytest.mark.django_db

Q = "tenants"


def put(store: RedisJobStore, group: str | None, n: int = 1, queue: str = Q) -> list[str]:
    return [
        store.enqueue(EnqueueRequest(name="Sync", queue=queue, group=group)).id for _ in range(n)
    ]


def take(store: RedisJobStore, token: str, queue: str = Q) -> Any:
    return store.claim(queue=queue, names=["Sync"], token=token, lock_duration_ms=30_000)


def group_rows(html: str) -> list[tuple[str, str, str, str]]:
    """(group, waiting, running, held) of each row of the groups table, tags stripped."""
    table = html.split('class="dense groups responsive"', 1)[1].split("</table>", 1)[0]
    rows = []
    for row in re.findall(r"<tr data-group=.*?</tr>", table, re.DOTALL):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.DOTALL)
        rows.append(tuple(" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells))
    return rows  # type: ignore[return-value]


def test_the_busiest_groups_are_listed_most_waiting_first(
    stores: Stores, admin_client_: Client
) -> None:
    put(stores.main, "small", 1)
    put(stores.main, "big", 4)
    put(stores.main, "middle", 2)
    put(stores.main, None, 3)  # jobs without a group are not a group

    html = text_of(admin_client_.get(f"/stores/main/queues/{Q}"))

    assert "3 groups with waiting jobs" in html
    assert group_rows(html) == [
        ("big", "4", "—", "no"),
        ("middle", "2", "—", "no"),
        ("small", "1", "—", "no"),
    ]
    assert re.search(r'data-queue-state="waiting"><a[^>]*>10</a>', html)


def test_group_names_are_escaped(stores: Stores, admin_client_: Client) -> None:
    put(stores.main, "<b>x</b>", 2)

    html = text_of(admin_client_.get(f"/stores/main/queues/{Q}"))

    assert "<b>x</b>" not in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert group_rows(html) == [("&lt;b&gt;x&lt;/b&gt;", "2", "—", "no")]


def test_at_most_ten_groups_are_listed_of_the_total(stores: Stores, admin_client_: Client) -> None:
    for n in range(12):
        put(stores.main, f"g{n:02d}", n + 1)

    html = text_of(admin_client_.get(f"/stores/main/queues/{Q}"))

    assert "12 groups with waiting jobs; the 10 with the most waiting jobs:" in html
    rows = group_rows(html)
    assert [row[0] for row in rows] == [f"g{n:02d}" for n in range(11, 1, -1)]


def test_a_queue_without_groups_says_so(stores: Stores, admin_client_: Client) -> None:
    put(stores.main, None, 2, queue="plain")

    html = text_of(admin_client_.get("/stores/main/queues/plain"))

    assert "No job groups: no job of this queue is waiting in a group." in html
    assert "groups responsive" not in html


def test_a_full_group_shows_why_and_until_when(stores: Stores, admin_client_: Client) -> None:
    stores.main.set_queue_limits(Q, group_concurrency=1)
    put(stores.main, "busy", 2)
    put(stores.main, "idle", 1)
    first = take(stores.main, "w:1")
    assert isinstance(first, Claimed)
    # The next claim finds "busy" full: it is held until its claim's lock expires.
    while isinstance(claimed := take(stores.main, "w:2"), Claimed):
        assert claimed.job.group != first.job.group

    html = text_of(admin_client_.get(f"/stores/main/queues/{Q}"))

    rows = {row[0]: row[1:] for row in group_rows(html)}
    held = rows[first.job.group]  # type: ignore[index]
    assert held[:2] == ("1", "1 of 1")
    # Held until the lock of its running job expires.
    expires = absolute(first.job.processed_at + 30_000)  # type: ignore[operator]
    assert re.fullmatch(rf"group full next claim in (29|30) s · {re.escape(expires)}", held[2])
    assert "max 1 running per group" in html


def test_the_limits_form_is_prefilled_and_returns_here(stores: Stores, login: Any) -> None:
    stores.main.set_queue_limits(Q, concurrency=2, group_rate=Rate(3, 2_000))
    client = login("change_limits")

    html = text_of(client.get(f"/stores/main/queues/{Q}"))
    values = form_values(html, "/actions/queue/limits/", Q)
    done = client.post(
        "/actions/queue/limits/",
        {
            **{name: values[name] or "" for name in LIMIT_INPUTS},
            "store": "main",
            "queue": Q,
            "next": values["next"],
        },
    )

    assert [values[name] for name in LIMIT_INPUTS] == ["2", None, None, "3/2s"]
    assert done.status_code == 302 and done["Location"] == f"/stores/main/queues/{Q}"
    limits = stores.main.queue_limits(Q)
    assert (limits.concurrency, limits.group_rate) == (2, Rate(3, 2_000))


def test_reading_the_page_needs_a_login_and_changing_limits_the_permission(
    stores: Stores, client: Client, viewer: Client
) -> None:
    put(stores.main, "g", 1)
    url = f"/stores/main/queues/{Q}"

    anonymous = client.get(url)
    seen = viewer.get(url)

    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login/?next=")
    assert seen.status_code == 200
    assert "1 group with waiting jobs" in text_of(seen)
    assert "/actions/queue/limits/" not in text_of(seen)


def test_queue_names_with_slashes_and_markup(stores: Stores, admin_client_: Client) -> None:
    from tests.mqadmin.test_views_common import ESCAPED, MARKUP

    queue = f"a/b{MARKUP}"
    put(stores.main, "g", 1, queue=queue)
    url = reverse("mqadmin:queue", args=["main", queue])

    html = text_of(admin_client_.get(url))

    assert MARKUP not in html
    assert ESCAPED in html
    assert "1 group with waiting jobs" in html


def test_a_nul_in_the_queue_name_is_a_400(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.get("/stores/main/queues/a%00b")

    assert response.status_code == 400
    assert "cannot contain NUL" in text_of(response)


def test_an_unknown_store_is_a_404(stores: Stores, admin_client_: Client) -> None:
    response = admin_client_.get("/stores/nowhere/queues/q")

    assert response.status_code == 404


# ---------------------------------------------------------------------- drain and clean


def delayed(store: RedisJobStore, n: int, queue: str = Q) -> list[str]:
    return [
        store.enqueue(EnqueueRequest(name="Sync", queue=queue, delay_ms=3_600_000)).id
        for _ in range(n)
    ]


def states_of(store: RedisJobStore, ids: list[str]) -> list[str | None]:
    return [record.state if record else None for record in store.get_jobs(ids)]


def follow_run(client: Client, data: dict[str, Any]) -> tuple[str, int]:
    """POST a run and its "continue" requests until done: (last page, requests made)."""
    response = client.post("/queues/sweep/run/", data)
    assert response.status_code == 302, text_of(response)
    html = text_of(client.get(response["Location"]))
    requests = 1
    while found := re.search(r'<input type="hidden" name="resume" value="([^"]+)">', html):
        run = re.search(r'<input type="hidden" name="run" value="(\d+)">', html)
        assert run
        response = client.post(
            "/queues/sweep/run/",
            {**data, "resume": htmllib.unescape(found.group(1)), "run": run.group(1)},
        )
        html = text_of(client.get(response["Location"]))
        requests += 1
    return html, requests


def test_the_queue_page_offers_drain_and_clean_to_those_allowed(
    stores: Stores, admin_client_: Client, login: Any, viewer: Client
) -> None:
    put(stores.main, None, 2)

    full = text_of(admin_client_.get(f"/stores/main/queues/{Q}"))
    drain_only = text_of(login("drain_queue").get(f"/stores/main/queues/{Q}"))
    nothing = text_of(viewer.get(f"/stores/main/queues/{Q}"))

    assert 'data-sweep="drain"' in full and 'data-sweep="clean"' in full
    assert 'data-sweep="drain"' in drain_only and 'data-sweep="clean"' not in drain_only
    assert "queue-sweeps" not in nothing
    assert re.search(r'value="waiting" checked> waiting \(2\)', full)


def test_a_drain_preview_counts_what_it_removes_and_what_stays(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    put(main, None, 3)
    delayed(main, 2)
    put(main, None, 1)
    take(main, "w:1")  # one active job: never removed
    completed_job(main, queue=Q)
    put(main, None, 4, queue="other")

    html = text_of(admin_client_.get(f"/queues/sweep/preview/?store=main&queue={Q}&sweep=drain"))

    assert "<strong>5</strong> jobs will be removed (exact)." in html
    assert re.search(r'data-state="waiting"><strong>3</strong> waiting jobs', html)
    assert re.search(r'data-state="delayed"><strong>2</strong> delayed jobs', html)
    assert "<strong>1</strong> active job left alone (never removed)" in html
    assert html.count('<td class="id">') == 5
    assert 'action="/queues/sweep/run/"' in html
    assert '<input type="hidden" name="expected" value="5">' in html
    assert 'data-confirm="Remove these 5 jobs of queue tenants for good?"' in html


def test_a_drain_removes_exactly_the_queue_waiting_and_delayed_jobs(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    waiting = put(main, None, 4) + put(main, "g1", 2)
    later = delayed(main, 2)
    active = take(main, "w:1").job.id
    waiting.remove(active)
    done = completed_job(main, queue=Q)
    elsewhere = put(main, None, 3, queue="other") + delayed(main, 1, queue="other")
    side = put(stores.side, None, 2)

    html, _ = follow_run(
        admin_client_,
        {"store": "main", "queue": Q, "sweep": "drain", "expected": len(waiting) + 2},
    )

    assert f'Drain queue <span class="queue-name">{Q}</span>: 7 removed, 0 skipped' in html
    assert states_of(main, waiting + later) == [None] * 7
    assert states_of(main, [active, done]) == ["active", "completed"]
    assert states_of(main, elsewhere) == ["waiting", "waiting", "waiting", "delayed"]
    assert states_of(stores.side, side) == ["waiting", "waiting"]
    assert main.counts(Q)["waiting"] == 0 and main.counts(Q)["delayed"] == 0
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.store, entry.target, entry.ok) == ("drain_queue", "main", Q, True)
    assert entry.params["removed"] == 7 and entry.params["states"] == ["waiting", "delayed"]
    assert sorted(entry.params["ids"]) == sorted(waiting + later)
    assert entry.result == "drain: 7 removed, 0 skipped"


def test_a_drain_of_waiting_only_keeps_delayed_jobs(stores: Stores, admin_client_: Client) -> None:
    waiting = put(stores.main, None, 2)
    later = delayed(stores.main, 2)

    follow_run(admin_client_, {"store": "main", "queue": Q, "sweep": "drain", "state": "waiting"})

    assert states_of(stores.main, waiting) == [None, None]
    assert states_of(stores.main, later) == ["delayed", "delayed"]


def test_a_drain_runs_in_bounded_requests_and_continues(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_queries, "BULK_MAX_ITEMS", 5)
    monkeypatch.setattr(bulk_queries, "BULK_CHUNK", 2)
    ids = put(stores.main, None, 12)
    kept = put(stores.main, None, 2, queue="other")

    html, requests = follow_run(
        admin_client_, {"store": "main", "queue": Q, "sweep": "drain", "expected": 12}
    )

    assert requests == 3
    assert "12 jobs handled so far of 12 counted when previewed" in html
    assert "Done: every job the drain covers has been handled." in html
    assert states_of(stores.main, ids) == [None] * 12
    assert states_of(stores.main, kept) == ["waiting", "waiting"]
    entries = list(AuditEntry.objects.order_by("id"))
    assert [e.params["count"] for e in entries] == [5, 5, 2]
    assert [e.params["done_before"] for e in entries] == [0, 5, 10]
    assert entries[0].params["stopped_at"] == entries[1].params["resumed_from"]


def test_a_job_claimed_during_a_drain_is_skipped_and_reported(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = put(stores.main, None, 3)
    original = bulk_queries.fetch_page
    claimed: list[str] = []

    def page_then_a_worker_claims(*args: Any, **kwargs: Any) -> Any:
        page = original(*args, **kwargs)
        if not claimed:
            claimed.append(take(stores.main, "w:race").job.id)
        return page

    monkeypatch.setattr(bulk_queries, "fetch_page", page_then_a_worker_claims)

    html, _ = follow_run(admin_client_, {"store": "main", "queue": Q, "sweep": "drain"})

    assert "2 removed, 1 skipped" in html
    assert f"Cannot remove {claimed[0]}: the job is active" in htmllib.unescape(html)
    assert states_of(stores.main, ids).count("active") == 1
    assert AuditEntry.objects.get().params["skipped_count"] == 1


def test_a_clean_removes_finished_jobs_of_the_chosen_states(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    done = [completed_job(main, name="Sync", queue=Q) for _ in range(2)]
    failed = [failed_job(main, name="Sync", queue=Q) for _ in range(2)]
    cancelled = put(main, None, 1)
    main.cancel(cancelled[0])
    waiting = put(main, None, 1)
    other = completed_job(main, name="Sync", queue="other")

    preview = text_of(admin_client_.get(f"/queues/sweep/preview/?store=main&queue={Q}&sweep=clean"))
    only_failed = text_of(
        admin_client_.get(f"/queues/sweep/preview/?store=main&queue={Q}&sweep=clean&state=failed")
    )
    follow_run(admin_client_, {"store": "main", "queue": Q, "sweep": "clean", "state": "failed"})
    failed_gone = states_of(main, done + failed + cancelled)
    follow_run(admin_client_, {"store": "main", "queue": Q, "sweep": "clean"})

    assert "<strong>5</strong> jobs will be removed (exact)." in preview
    assert "<strong>2</strong> jobs will be removed (exact)." in only_failed
    assert failed_gone == ["completed", "completed", None, None, "cancelled"]
    assert states_of(main, done + failed + cancelled) == [None] * 5
    assert states_of(main, waiting + [other]) == ["waiting", "completed"]
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["clean_queue"] * 2


def test_a_clean_with_an_age_removes_only_jobs_finished_before_it(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_queries, "BULK_CHUNK", 2)  # pages cross the cut-off
    main = stores.main
    old = [completed_job(main, name="Sync", queue=Q) for _ in range(3)]
    old.append(failed_job(main, name="Sync", queue=Q))
    time.sleep(0.005)
    cutoff = main.now()
    time.sleep(0.005)
    new = [completed_job(main, name="Sync", queue=Q) for _ in range(2)]
    new.append(failed_job(main, name="Sync", queue=Q))
    base = f"/queues/sweep/preview/?store=main&queue={Q}&sweep=clean"

    preview = text_of(admin_client_.get(f"{base}&finished_before={cutoff}"))
    by_age = text_of(admin_client_.get(f"{base}&older_than=1d"))
    html, _ = follow_run(
        admin_client_,
        {"store": "main", "queue": Q, "sweep": "clean", "finished_before": cutoff},
    )

    assert "<strong>4</strong> jobs will be removed (exact)." in preview
    assert re.search(r'data-state="completed"><strong>3</strong> completed jobs', preview)
    assert f'<input type="hidden" name="finished_before" value="{cutoff}">' in preview
    # An age is fixed to a cut-off by the preview; nothing finished a day ago.
    assert "<strong>0</strong> jobs will be removed." in by_age
    assert "Nothing to remove." in by_age
    assert re.search(r'name="finished_before" value="\d+"', by_age) is None  # no run form
    assert "4 removed, 0 skipped" in html
    assert states_of(main, old) == [None] * 4
    assert states_of(main, new) == ["completed", "completed", "failed"]
    assert AuditEntry.objects.get().params["finished_before"] == cutoff


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sweep=drain&state=active", "A drain removes only waiting and delayed jobs, not active."),
        ("sweep=clean&state=waiting", "removes only completed and failed and cancelled jobs"),
        ("sweep=clean&older_than=soon", "“soon” is not an age"),
        ("sweep=drain&older_than=1d", "Only a clean takes an age"),
        ("sweep=flush", "“flush” is not a sweep"),
    ],
)
def test_a_malformed_sweep_is_a_400(
    query: str, message: str, stores: Stores, admin_client_: Client
) -> None:
    response = admin_client_.get(f"/queues/sweep/preview/?store=main&queue={Q}&{query}")

    assert response.status_code == 400
    assert message in text_of(response)


def test_sweeps_need_their_own_permission(stores: Stores, login: Any) -> None:
    ids = put(stores.main, None, 2)
    cleaner = login("clean_queue", "remove_job", "bulk_action")
    drainer = login("drain_queue")

    preview = cleaner.get(f"/queues/sweep/preview/?store=main&queue={Q}&sweep=drain")
    run = cleaner.post("/queues/sweep/run/", {"store": "main", "queue": Q, "sweep": "drain"})
    allowed = drainer.post("/queues/sweep/run/", {"store": "main", "queue": Q, "sweep": "drain"})
    result = allowed["Location"]

    assert preview.status_code == 403 and "drain_queue" in text_of(preview)
    assert run.status_code == 403 and "drain_queue" in text_of(run)
    assert allowed.status_code == 302
    assert states_of(stores.main, ids) == [None, None]
    assert drainer.get(result).status_code == 200
    assert cleaner.get(result).status_code == 403
    refused, done = AuditEntry.objects.order_by("id")
    assert (refused.action, refused.ok) == ("drain_queue", False)
    assert refused.result.startswith("refused:")
    assert (done.action, done.ok) == ("drain_queue", True)
    assert drainer.get("/queues/sweep/runs/999999/").status_code == 404
