"""The flow page: counters, paged children in their own stores, nested flows on demand,
the outbox reports that name the parent, and why the parent is still waiting."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client

from mqadmin.queries import flows as flow_queries
from store import Claimed, Complete, EnqueueRequest, Fail
from store.flow_runtime import child_job_id, relay_outbox
from store.records import FanOut, FlowChildSpec, ParentEnvelope
from store.registry import StoreRegistry
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, fan_out, text_of

pytestmark = pytest.mark.django_db


def finish_child(stores: Stores, outcome: str = "completed") -> str:
    """Claim the next child in the side store and finish it (its report goes to the outbox)."""
    claimed = stores.side.claim(
        queue="parts", names=["RenderPart"], token="w-child:1", lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed)
    if outcome == "completed":
        stores.side.ack(claimed.job.id, "w-child:1", Complete({"pages": 3}))
    else:
        stores.side.ack(
            claimed.job.id,
            "w-child:1",
            Fail(
                {
                    "error": {
                        "type": "KeyError",
                        "module": "builtins",
                        "message": "'col'",
                        "kind": "error",
                        "traceback": "Traceback...\nKeyError: 'col'",
                    }
                }
            ),
        )
    return claimed.job.id


def relay(stores: Stores) -> None:
    registry = StoreRegistry()
    registry.register(stores.main)
    registry.register(stores.side)
    relay_outbox(stores.side, registry)


def child_keys(html: str) -> list[str]:
    body = html.split('<table class="children dense">', 1)[1].split("</table>", 1)[0]
    return [
        htmllib.unescape(k)
        for k in re.findall(r'class="child-key"[^>]*>\s*<(?:a|code)\b[^>]*>([^<]*)</', body)
    ]


def test_counters_children_and_links_into_the_child_store(
    stores: Stores, admin_client_: Client
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b", "c"])
    finish_child(stores, "completed")
    finish_child(stores, "failed")
    relay(stores)

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    assert re.search(r'<span class="n">3</span><span class="label">children</span>', html)
    assert re.search(r'pending"><span class="n">1</span>', html)
    assert re.search(r'ok"><span class="n">1</span>', html)
    assert re.search(r'bad"><span class="n">1</span>', html)
    assert child_keys(html) == ["a", "b", "c"]
    for key in ("a", "b", "c"):
        assert f'href="/stores/side/jobs/{child_job_id("main", flow_id, key)}"' in html
    assert "<code>KeyError</code>: &#x27;col&#x27;" in html
    assert "{&quot;pages&quot;: 3}" in html
    assert (
        "It waits for 1 of 3 children to report an outcome (1 completed, 1 failed, 0 cancelled so far)."
        in html
    )
    assert "Of the pending children on this page: 1 waiting." in html


def test_reports_waiting_in_an_outbox_are_listed_and_explained(
    stores: Stores, admin_client_: Client
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b"])
    finish_child(stores, "completed")

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    outbox = html.split("Reports naming this flow in outboxes", 1)[1].split("</section>", 1)[0]
    assert "Outbox of side" in outbox
    assert "<td><code>a</code></td>" in outbox
    assert "1 child reports naming this flow wait in outboxes (side (1))" in html
    assert (
        "1 of them already finished in their store but their report has not been applied yet"
        in html
    )
    assert "But no live worker of store “side” can deliver to “main”" in html

    relay(stores)
    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))
    assert "None: no child report for this flow waits to be relayed." in html


def test_a_live_worker_that_routes_the_reports_is_named(
    stores: Stores, admin_client_: Client
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a"])
    finish_child(stores, "completed")
    stores.side.register_worker(
        "w-relay",
        queues={"parts": ["RenderPart"]},
        routes=["main", "side"],
        started_at=stores.side.now(),
    )

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    assert "A live worker of store “side” (w-relay) routes reports to “main”" in html


def test_missing_children_are_explained(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b"])
    stores.side.remove(child_job_id("main", flow_id, "a"))

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    assert '<span class="badge missing"' in html
    assert "1 pending children are missing from their store" in html


def test_children_are_paged_forward_and_back(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow_queries, "FLOW_PAGE", 3)
    keys = [f"k{n:02d}" for n in range(8)]
    flow_id = fan_out(stores.main, stores.side, keys)

    pages = []
    url: str | None = f"/stores/main/flows/{flow_id}"
    urls = []
    while url:
        html = text_of(admin_client_.get(url))
        pages.append(child_keys(html))
        urls.append(url)
        nxt = re.search(r'<a rel="next" href="([^"]*)"', html)
        url = htmllib.unescape(nxt.group(1)) if nxt else None

    assert pages == [keys[0:3], keys[3:6], keys[6:8]]
    html = text_of(admin_client_.get(urls[-1]))
    for expected in reversed(pages[:-1]):
        prev = re.search(r'<a rel="prev" href="([^"]*)"', html)
        assert prev
        html = text_of(admin_client_.get(htmllib.unescape(prev.group(1))))
        assert child_keys(html) == expected
    assert 'rel="prev"' not in html

    partial = text_of(admin_client_.get(urls[1], headers={"HX-Request": "true"}))
    assert partial.lstrip().startswith('<section id="children"')
    assert child_keys(partial) == keys[3:6]


def test_nested_flows_are_expanded_on_demand_only(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["region"])
    claimed = stores.side.claim(
        queue="parts", names=["RenderPart"], token="w-n:1", lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed)
    nested_id = claimed.job.id
    grand = [
        FlowChildSpec(
            child_key=country,
            store_key="side",
            request=EnqueueRequest(
                id=child_job_id("side", nested_id, country),
                name="RenderCountry",
                queue="countries",
                parent=ParentEnvelope("Nested", nested_id, country, "side", 2),
            ),
        )
        for country in ("de", "fr")
    ]
    stores.side.ack(nested_id, "w-n:1", FanOut(False, grand))
    stores.side.enqueue_many([g.request for g in grand])

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    # The parent page shows the nested flow's row and an expander, not its children.
    assert "Expand flow" in html
    assert "RenderCountry" not in html
    expand = re.search(r'hx-get="([^"]*\?embed=1)" hx-target="#(nested-[0-9a-f]+-1)"', html)
    assert expand
    assert f'<div id="{expand.group(2)}" class="nested"' in html

    nested = text_of(
        admin_client_.get(htmllib.unescape(expand.group(1)), headers={"HX-Request": "true"})
    )

    assert "<html" not in nested
    assert nested.lstrip().startswith('<div class="nested-flow">')
    assert child_keys(nested) == ["de", "fr"]
    assert f'href="/stores/side/flows/{nested_id}"' in nested
    # Without htmx the expander is a plain link to the nested flow's own page.
    plain = admin_client_.get(f"/stores/side/flows/{nested_id}")
    assert plain.status_code == 200 and "<html" in text_of(plain)


def test_a_job_that_never_fanned_out(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="A", queue="q")).id

    html = text_of(admin_client_.get(f"/stores/main/flows/{job_id}"))

    assert "This job has not fanned out yet: no child manifest exists." in html
    assert "This flow has no children." in html


def test_a_settled_flow_waits_for_its_collect_phase(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a"])
    finish_child(stores)
    relay(stores)
    stores.main.pause("reports")

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    assert (
        "Every child has reported; the parent waits for a worker of queue “reports” to run its collect phase."
        in html
    )
    assert "Queue “reports” is paused" in html


def test_children_in_a_store_not_configured_here(
    stores: Stores, admin_client_: Client, settings: Any, redis_url: str
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a"])
    settings.MQ_STORES = {"main": settings.MQ_STORES["main"]}

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    assert "(not configured here)" in html
    assert "1 pending children live in stores this dashboard does not configure" in html


# ---------------------------------------------------------------- the list of flows and the tree


def nest(stores: Stores, flow_id: str, token: str = "w-n:1") -> str:
    """Claim the side store's next child of ``flow_id`` and fan it out into "de" and "fr" in
    the main store: a flow nested in a flow, across the two stores.  Returns its id."""
    claimed = stores.side.claim(
        queue="parts", names=["RenderPart"], token=token, lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed) and claimed.job.parent is not None
    assert claimed.job.parent.flow_id == flow_id
    nested_id = claimed.job.id
    grand = [
        FlowChildSpec(
            child_key=country,
            store_key="main",
            request=EnqueueRequest(
                id=child_job_id("side", nested_id, country),
                name="RenderCountry",
                queue="countries",
                parent=ParentEnvelope("Nested", nested_id, country, "side", 2),
            ),
        )
        for country in ("de", "fr")
    ]
    stores.side.ack(nested_id, token, FanOut(False, grand))
    stores.main.enqueue_many([g.request for g in grand])
    return nested_id


def flow_rows(html: str) -> list[str]:
    """The parent ids the flows list shows, in order (from each row's full-id title)."""
    body = html.split('<table class="flows dense">', 1)[1].split("</table>", 1)[0]
    return [
        htmllib.unescape(i)
        for i in re.findall(r'<td class="id"[^>]*><a [^>]*title="([^"]*)"', body)
    ]


def test_the_flows_page_lists_waiting_parents_with_counters_and_links(
    stores: Stores, admin_client_: Client
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b", "c"])
    finish_child(stores)
    relay(stores)
    stores.main.enqueue(EnqueueRequest(name="Plain", queue="reports"))  # not a flow

    response = admin_client_.get("/flows/?store=main")

    assert response.status_code == 200
    html = text_of(response)
    assert flow_rows(html) == [flow_id]
    assert f'href="/stores/main/flows/{flow_id}"' in html
    assert "1 / 3" in html  # children done / total, from the parent's flow counters
    assert "BuildReport" in html and ">reports<" in html
    assert "Plain" not in html
    assert 'aria-current="page">Flows</a>' in html
    # Nothing settled yet.
    settled = text_of(admin_client_.get("/flows/?store=main&state=settled"))
    assert "No flow parent settled lately in main." in settled


def test_settled_parents_are_listed_once_they_finish(stores: Stores, admin_client_: Client) -> None:
    waiting = fan_out(stores.main, stores.side, ["a"])
    cancelled = fan_out(stores.main, stores.side, ["a", "b"])
    stores.main.cancel(cancelled)

    settled_html = text_of(admin_client_.get("/flows/?store=main&state=settled"))
    waiting_html = text_of(admin_client_.get("/flows/?store=main&state=waiting"))

    assert flow_rows(settled_html) == [cancelled]
    assert "state-cancelled" in settled_html
    # Cancelling a parked parent settles its rows too (cancelled): every child is done.
    assert "2 / 2" in settled_html
    assert flow_rows(waiting_html) == [waiting]


def test_the_flows_page_is_paged_by_cursor(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow_queries, "FLOWS_PAGE", 2)
    settled = [fan_out(stores.main, stores.side, ["a"]) for _ in range(3)]
    for flow_id in settled:
        stores.main.cancel(flow_id)
    waiting = [fan_out(stores.main, stores.side, ["a"]) for _ in range(3)]

    for state, ids in (("waiting", waiting), ("settled", settled)):
        first = text_of(admin_client_.get(f"/flows/?store=main&state={state}"))
        more = re.search(r'<a rel="next" href="([^"]*)"', first)
        assert more, state
        next_url = htmllib.unescape(more.group(1))
        second = text_of(admin_client_.get(next_url))
        assert '<a rel="next"' not in second
        assert "« Newest" in second
        assert len(flow_rows(first)) == 2 and len(flow_rows(second)) == 1
        assert sorted(flow_rows(first) + flow_rows(second)) == sorted(ids), state
        # The htmx partial of a next page is the list alone.
        partial = text_of(admin_client_.get(next_url, headers={"HX-Request": "true"}))
        assert "<html" not in partial and 'id="parents"' in partial
        assert flow_rows(partial) == flow_rows(second)


def test_a_user_without_permissions_sees_the_flows_page(stores: Stores, viewer: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a"])
    response = viewer.get("/flows/?store=side")
    assert response.status_code == 200
    assert "No flow parent waits for its children in side." in text_of(response)
    assert flow_id in text_of(viewer.get("/flows/"))  # the first store by default


def test_a_nested_flow_links_up_to_its_parent_across_stores(
    stores: Stores, admin_client_: Client
) -> None:
    root = fan_out(stores.main, stores.side, ["region"])
    nested = nest(stores, root)

    html = text_of(admin_client_.get(f"/stores/side/flows/{nested}"))

    crumbs = html.split('<nav class="crumbs flow-crumbs"', 1)[1].split("</nav>", 1)[0]
    assert 'href="/flows/?store=side"' in crumbs
    assert re.findall(r'class="ancestor" href="([^"]*)"', crumbs) == [f"/stores/main/flows/{root}"]
    assert "BuildReport" in crumbs and "child “region”" in crumbs
    assert f'class="up-link" href="/stores/main/flows/{root}"' in html
    assert "Nested: child “region” of flow Report" in html
    # The root links down to the nested flow's own page; a plain child has no flow link.
    top = text_of(admin_client_.get(f"/stores/main/flows/{root}"))
    assert f'href="/stores/side/flows/{nested}" title="The flow page of child region"' in top
    assert 'class="ancestor"' not in top
    # And the nested flow's job page links to its parent flow.
    job = text_of(admin_client_.get(f"/stores/side/jobs/{nested}"))
    assert f'href="/stores/main/flows/{root}"' in job


def test_the_breadcrumb_lists_every_ancestor_root_first(
    stores: Stores, admin_client_: Client
) -> None:
    root = fan_out(stores.main, stores.side, ["region"])
    nested = nest(stores, root)
    # The grandchild "de" (in main) fans out in turn: three levels over two stores.
    claimed = stores.main.claim(
        queue="countries", names=["RenderCountry"], token="w-g:1", lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed)
    grand = claimed.job.id
    leaf = FlowChildSpec(
        child_key="city",
        store_key="side",
        request=EnqueueRequest(
            id=child_job_id("main", grand, "city"),
            name="RenderCity",
            queue="cities",
            parent=ParentEnvelope("Deep", grand, "city", "main", 3),
        ),
    )
    stores.main.ack(grand, "w-g:1", FanOut(False, [leaf]))

    html = text_of(admin_client_.get(f"/stores/main/flows/{grand}"))

    crumbs = html.split('<nav class="crumbs flow-crumbs"', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r'class="ancestor" href="([^"]*)"', crumbs) == [
        f"/stores/main/flows/{root}",
        f"/stores/side/flows/{nested}",
    ]
    view = flow_queries.flow_view("main", grand, None)
    assert view is not None
    up, cut = flow_queries.ancestors_of(view.record, limit=1)
    assert [a.flow_id for a in up] == [nested] and cut
    assert [a.child_key for a in view.ancestors] == ["region", claimed.job.parent.child_key]  # type: ignore[union-attr]


def test_children_are_labelled_by_key_with_the_full_id_on_request(
    stores: Stores, admin_client_: Client
) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b"])

    html = text_of(admin_client_.get(f"/stores/main/flows/{flow_id}"))

    full = child_job_id("main", flow_id, "a")
    assert f'title="{full}">a</a>' in html
    assert (
        f'<summary>full id<span class="visually-hidden"> of child a</span></summary><code class="select-all">{full}</code>'
        in html
    )
    # Every cell carries its label for the phone layout; a child that is not a flow has an
    # empty last cell (hidden on phones), never an empty labelled line.
    assert '<td class="flow-cell" data-label="Nested flow"></td>' in html
    assert 'data-label="Live state"' in html
