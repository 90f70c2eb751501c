"""The queue page: counts, limits (the prefilled form) and the busiest job groups."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from mqadmin.templatetags.mqadmin_tags import absolute
from store import Claimed, EnqueueRequest, Rate, RedisJobStore
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of
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
