"""Template access to the verb registry (:mod:`mqadmin.actions`).

``{% verbs "job" can=can as job_verbs %}`` gives the verbs of a target kind the
user may run, in page order; ``{% include "mqadmin/action_form.html" %}`` renders
one verb's button form from them, so a page lists no verb by name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from mqadmin import actions, forms

register = template.Library()


@register.simple_tag
def verbs(
    kind: str, can: Mapping[str, bool] | None = None, bulk: bool = False
) -> tuple[actions.Verb, ...]:
    """The registry's verbs of ``kind`` (only those ``can`` allows; only bulk ones if asked)."""
    return tuple(
        verb
        for verb in actions.verbs(kind)
        if (can is None or can.get(verb.key)) and (verb.bulk or not bulk)
    )


@dataclass(frozen=True)
class BulkOffer:
    """A bulk chooser's options: the verbs that apply to the listed states, and the one
    it starts on (None: "choose…" is selected)."""

    verbs: tuple[actions.Verb, ...]
    default: actions.Verb | None


@register.simple_tag
def bulk_offer(
    can: Mapping[str, bool], query: Any = None, rows: Iterable[Any] | None = None
) -> BulkOffer:
    """The bulk verbs for a filter's states (``query``) or for the states of ``rows``.

    Only verbs that apply to at least one of the states are offered (every bulk verb
    when the filter leaves the state open), and only those ``can`` allows.
    """
    from mqadmin.queries.bulk import offered_verbs, query_states

    if rows is not None:
        states: Iterable[str] | None = {row.state for row in rows}
    else:
        states = query_states(query) if query is not None else None
    offered = tuple(offered_verbs(states, can))
    return BulkOffer(offered, actions.default_bulk_verb(offered))


@register.filter
def applies_to(verb: actions.Verb, state: str) -> bool:
    """``verb|applies_to:job.state``: the target's state accepts the verb."""
    return verb.applies_to(state)


@register.simple_tag
def verb_confirm(verb: actions.Verb, target: str, store: str, **facts: Any) -> str:
    """The question the verb's button asks first (escaped by the template engine)."""
    return verb.confirm_text(str(target), str(store), **facts)


@register.simple_tag
def verb_fields(
    verb: actions.Verb,
    initial: Mapping[str, Any] | None = None,
    store: str = "",
    target: str = "",
) -> SafeString:
    """The inputs of the verb's extra form fields (nothing for most verbs).

    ``initial`` fills them in (the "Set limits" form shows the queue's current limits).
    A page may hold one form per target (a row per queue), so the inputs' ids carry a
    digest of the store and target: every label points at its own input.
    """
    if not verb.fields:
        return SafeString("")
    digest = hashlib.blake2s(f"{store}\0{target}".encode(), digest_size=4).hexdigest()
    form = forms.action_form_class(verb)(
        initial=dict(initial) if initial else None, auto_id=f"id_{verb.key}_{digest}_%s"
    )
    return format_html(
        '<div class="verb-fields">{}</div>',
        format_html_join(
            "", "{} {}", ((form[name].label_tag(), form[name]) for name in verb.fields)
        ),
    )
