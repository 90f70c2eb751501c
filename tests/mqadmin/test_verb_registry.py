"""The verb registry (``mqadmin/actions.py``) is the single source of every dashboard verb.

Forms, permissions, the Permission migration, the job page's buttons, the overview's
and schedules page's buttons, the explorer's bulk choices and the audit links are all
checked against the registry, and a verb added to it only for this test shows up in
each of them with no other edit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from django import forms as django_forms
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client

from mqadmin import actions, forms, permissions
from mqadmin.models import AuditEntry
from store import EnqueueRequest, ScheduleRecord
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import (
    Stores,
    completed_job,
    failed_job,
    fan_out,
    make_user,
    text_of,
)

pytestmark = pytest.mark.django_db


def action_urls(html: str, kind: str) -> list[str]:
    """The verbs of ``kind`` whose forms ``html`` shows, in page order."""
    return re.findall(rf'action="/actions/{kind}/([^/"]+)/"', html)


def actions_bar(html: str) -> str:
    return html.split('<div class="actions-bar">', 1)[1].split("</div>", 1)[0]


def row_of(html: str, marker: str) -> str:
    return html.split(marker, 1)[1].split("</tr>", 1)[0]


# ---------------------------------------------------------------------- the registry itself


def test_the_registry_is_consistent() -> None:
    assert actions.check_registry() == []
    assert [verb.name for verb in actions.job_verbs()] == ["retry", "cancel", "promote", "remove"]
    assert len({verb.key for verb in actions.VERBS}) == len(actions.VERBS)


def test_the_registry_check_finds_what_is_wrong() -> None:
    retry = actions.find("job", "retry")
    assert retry is not None
    stray = actions.Grant("frobnicate_job", "Can frobnicate jobs")
    broken = [
        *actions.VERBS,
        replace(retry, grant=stray, key="frobnicate", name="frobnicate"),
        replace(retry, key="cancel", name="again"),
        replace(retry, key="odd", name="odd", checked_as="nothing"),
    ]

    problems = actions.check_registry(broken)

    assert "two verbs use the key 'cancel'" in problems
    assert "verb 'frobnicate' needs 'frobnicate_job', missing from GRANTS" in problems
    assert "verb 'odd' is checked as an unknown verb 'nothing'" in problems


def test_a_verb_without_refusal_words_or_bulk_with_fields_is_refused() -> None:
    retry = actions.find("job", "retry")
    assert retry is not None

    with pytest.raises(ValueError, match="doing"):
        replace(retry, key="x", name="x", doing="")
    with pytest.raises(ValueError, match="bulk"):
        replace(retry, key="x", name="x", fields={"note": django_forms.CharField})


def test_every_verb_has_its_permission_in_the_migration() -> None:
    state = MigrationLoader(connection).project_state()
    migrated = state.models[("mqadmin", "auditentry")].options["permissions"]

    assert [tuple(p) for p in migrated] == actions.model_permissions()
    assert AuditEntry._meta.permissions == actions.model_permissions()
    codenames = {codename for codename, _ in migrated}
    for verb in actions.VERBS:
        assert verb.grant.codename in codenames, verb.key


def test_the_bulk_forms_offer_exactly_the_registry_bulk_verbs() -> None:
    expected = [(verb.name, verb.label) for verb in actions.VERBS if verb.bulk]

    assert list(forms.BulkSelectedForm().fields["verb"].choices) == expected
    assert list(forms.BulkFilterForm().fields["verb"].choices) == expected


def test_the_state_rules_come_from_the_registry() -> None:
    for state in ("waiting", "delayed", "active", "waiting-children", "completed", "failed"):
        allowed = actions.actions_for_state(state)
        assert list(allowed) == [verb.name for verb in actions.job_verbs()]
        for verb in actions.job_verbs():
            assert allowed[verb.name] == verb.applies_to(state)
    assert actions.actions_for_state("failed") == {
        "retry": True,
        "cancel": False,
        "promote": False,
        "remove": True,
    }
    assert actions.state_rules()["promote"] == "only delayed jobs can be promoted"


@pytest.mark.parametrize("verb", actions.VERBS, ids=lambda verb: verb.key)
def test_each_verb_is_allowed_by_its_grant_alone(
    verb: actions.Verb, django_user_model: Any
) -> None:
    user = make_user(django_user_model, "only", verb.grant.codename)

    allowed = permissions.allowed_actions(user)

    assert allowed[verb.key] is True
    assert permissions.verb_denial(user, verb) is None
    others = {v.key for v in actions.VERBS if v.grant != verb.grant}
    assert not any(allowed[key] for key in others)
    stranger = make_user(django_user_model, "none")
    denial = permissions.verb_denial(stranger, verb)
    assert denial is not None and f"“{verb.grant.codename}”" in denial


# ---------------------------------------------------------------------- the pages


def jobs_in_every_state(stores: Stores) -> dict[str, str]:
    main = stores.main
    jobs = {"failed": failed_job(main), "completed": completed_job(main)}
    jobs["delayed"] = main.enqueue(EnqueueRequest(name="A", queue="q", delay_ms=3_600_000)).id
    jobs["cancelled"] = main.enqueue(EnqueueRequest(name="A", queue="q")).id
    main.cancel(jobs["cancelled"])
    jobs["active"] = main.enqueue(EnqueueRequest(name="B", queue="r")).id
    main.claim(queue="r", names=["B"], token="w:1")
    jobs["waiting"] = main.enqueue(EnqueueRequest(name="A", queue="q")).id
    jobs["waiting-children"] = fan_out(main, stores.side, ["a"])
    return jobs


def test_the_job_page_shows_exactly_the_registry_verbs_for_each_state(
    stores: Stores, admin_client_: Client, login: Any
) -> None:
    jobs = jobs_in_every_state(stores)
    only_remove = login(actions.REMOVE_JOB.codename)

    for state, job_id in jobs.items():
        assert stores.main.get_job(job_id).state == state  # type: ignore[union-attr]
        expected = [verb.name for verb in actions.job_verbs() if verb.applies_to(state)]
        bar = actions_bar(text_of(admin_client_.get(f"/stores/main/jobs/{job_id}")))
        assert action_urls(bar, "job") == expected, state
        for verb in actions.job_verbs():
            if verb.name in expected:
                assert f">{verb.label}</button>" in bar
                if verb.asks_to_confirm:
                    assert f'data-confirm="{verb.confirm_text(job_id, "main")}"' in bar
        limited = actions_bar(text_of(only_remove.get(f"/stores/main/jobs/{job_id}")))
        assert action_urls(limited, "job") == [name for name in expected if name == "remove"]


def test_the_overview_and_schedules_show_the_registry_verbs(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    main.enqueue(EnqueueRequest(name="A", queue="running-q"))
    main.enqueue(EnqueueRequest(name="A", queue="paused-q"))
    main.pause("paused-q")
    for key in ("S/active", "S/paused"):
        main.upsert_schedule(
            ScheduleRecord(
                key=key,
                job_name="A",
                queue="q",
                cron="0 7 * * *",
                next_run_at=main.now() + 3_600_000,
            )
        )
    main.pause_schedule("S/paused")

    home = text_of(admin_client_.get("/"))
    schedules = text_of(admin_client_.get("/schedules/"))

    for queue, state in (("running-q", "running"), ("paused-q", "paused")):
        row = row_of(home, f'&amp;queue={queue}">')
        expected = [v.name for v in actions.verbs("queue") if v.applies_to(state)]
        assert action_urls(row, "queue") == expected
    for key, state in (("S/active", "active"), ("S/paused", "paused")):
        row = row_of(schedules, f'data-schedule="{key}"')
        expected = [v.name for v in actions.verbs("schedule") if v.applies_to(state)]
        assert action_urls(row, "schedule") == expected


def test_the_explorer_offers_the_registry_bulk_verbs_the_user_may_run(
    stores: Stores, admin_client_: Client, login: Any
) -> None:
    failed_job(stores.main)
    # "All matching this filter" without a state filter: every state is possible.
    options = re.compile(r'<select id="bulk-all-verb" name="verb">(.*?)</select>', re.S)

    everything = options.search(text_of(admin_client_.get("/jobs/?store=main")))
    some = options.search(
        text_of(login("bulk_action", "cancel_job", "promote_job").get("/jobs/?store=main"))
    )

    assert everything is not None and some is not None
    offered = re.findall(r'<option value="([^"]+)"', everything.group(1))
    assert offered == [verb.name for verb in actions.VERBS if verb.bulk]
    assert re.findall(r'<option value="([^"]+)"', some.group(1)) == ["cancel", "promote"]


def test_audit_links_follow_the_registry(stores: Stores) -> None:
    for verb in actions.VERBS:
        entry = AuditEntry(action=verb.key, store="main", target="x", ok=True)
        assert entry.links_to_job == (verb.kind == "job" and not verb.removes), verb.key
        assert not AuditEntry(action=verb.key, store="main", target="x", ok=False).links_to_job
    assert not AuditEntry(action="bulk_retry", store="main", target="x").links_to_job


# ---------------------------------------------------------------------- a verb added for this test


def _touch(job_store: Any, store_name: str, job_id: str, values: Mapping[str, Any]) -> Any:
    record = job_store.get_job(job_id)
    if record is None:
        raise actions.TargetMissing(job_id)
    if record.state != "failed":
        raise actions.StateRefused(record.state)
    note = values.get("note")
    suffix = f" ({note})" if note else ""
    return actions.ActionResult(True, f"Touched {job_id} in {store_name}{suffix}.")


TOUCH = actions.Verb(
    actions.JOB,
    "touch",
    "Touch",
    actions.RETRY_JOB,
    _touch,
    doing="touch jobs",
    states=frozenset({"failed"}),
    refusal="only failed jobs can be touched",
    style="danger",
    confirm=lambda target, **facts: f"Touch job {target}?",
    bulk=True,
)
ANNOTATE = actions.Verb(
    actions.JOB,
    "annotate",
    "Annotate",
    actions.RETRY_JOB,
    _touch,
    doing="annotate jobs",
    states=frozenset({"failed"}),
    refusal="only failed jobs can be annotated",
    fields={"note": lambda: django_forms.CharField(max_length=50)},
)


@pytest.fixture
def extra_verbs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actions, "VERBS", (*actions.VERBS, TOUCH, ANNOTATE))
    assert actions.check_registry() == []


def test_a_verb_added_to_the_registry_shows_up_everywhere(
    extra_verbs: None, stores: Stores, login: Any
) -> None:
    job_id = failed_job(stores.main)
    done = completed_job(stores.main)
    client = login("retry_job", "bulk_action", "view_auditentry")

    page = text_of(client.get(f"/stores/main/jobs/{job_id}"))
    bar = actions_bar(page)
    explorer = text_of(client.get("/jobs/?store=main"))

    assert action_urls(bar, "job") == ["retry", "touch", "annotate"]
    assert f'class="action-touch danger" data-confirm="Touch job {job_id}?">Touch</button>' in bar
    assert 'name="note"' in bar and 'maxlength="50"' in bar
    assert '<option value="touch">touch</option>' in explorer
    assert '<option value="annotate">' not in explorer  # verbs with fields do not run in bulk
    assert "touch" in dict(forms.BulkSelectedForm().fields["verb"].choices)
    assert "touch" not in action_urls(
        actions_bar(text_of(client.get(f"/stores/main/jobs/{done}"))), "job"
    )

    touched = client.post("/actions/job/touch/", {"store": "main", "job_id": job_id}, follow=True)
    annotated = client.post(
        "/actions/job/annotate/", {"store": "main", "job_id": job_id, "note": "hi"}, follow=True
    )
    refused = client.post("/actions/job/touch/", {"store": "main", "job_id": done}, follow=True)
    no_note = client.post("/actions/job/annotate/", {"store": "main", "job_id": job_id})
    bulk = client.post("/bulk/selected/", {"store": "main", "verb": "touch", "ids": [job_id, done]})

    assert touched.redirect_chain[-1][0] == f"/stores/main/jobs/{job_id}"
    assert f"Touched {job_id} in main." in text_of(touched)
    assert f"Touched {job_id} in main (hi)." in text_of(annotated)
    assert (
        f"Cannot touch {done}: the job is completed — only failed jobs can be touched."
        in text_of(refused)
    )
    assert no_note.status_code == 400 and "Cannot annotate that job" in text_of(no_note)
    assert "touch: 1 succeeded, 1 failed" in text_of(bulk)
    entries = list(AuditEntry.objects.order_by("id"))
    assert [(e.action, e.ok) for e in entries] == [
        ("touch", True),
        ("annotate", True),
        ("touch", False),
        ("bulk_touch", False),
    ]
    assert entries[1].params == {"note": "hi"}
    assert entries[0].links_to_job
    audit = text_of(client.get("/audit/"))
    assert f'<a class="mono" href="/stores/main/jobs/{job_id}">{job_id}</a>' in audit


def test_an_added_verb_is_refused_without_its_grant(
    extra_verbs: None, stores: Stores, login: Any
) -> None:
    job_id = failed_job(stores.main)
    client = login("cancel_job")

    page = actions_bar(text_of(client.get(f"/stores/main/jobs/{job_id}")))
    response = client.post("/actions/job/touch/", {"store": "main", "job_id": job_id})

    assert "touch" not in action_urls(page, "job")
    assert response.status_code == 403
    assert "You need the “retry_job” permission to touch jobs." in text_of(response)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.ok) == ("touch", False)
