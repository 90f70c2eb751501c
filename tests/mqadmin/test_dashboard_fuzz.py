"""Fuzzed query strings: whatever a browser sends, a page answers without a 5xx.

Hypothesis builds query strings from the dashboard's real parameter names (and junk
names) with hostile values: garbage cursors, unknown states, huge and negative limits,
metadata without "=", NUL and lone-surrogate escapes, very long strings, repeated keys.
Every page is asked with and without the htmx header.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Seeded, page_urls

pytestmark = pytest.mark.django_db

PARAMS = [
    "store", "queue", "name", "state", "meta", "order_by", "order", "limit", "cursor",
    "before", "after", "id", "action", "user", "outcome", "trail", "embed", "kind", "x",
]  # fmt: skip
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "", "0", "-1", "99999999999999999999", "1e309", "nan", "1.5:x", ":x", "abc",
            "waiting", "completed", "delayed", "finished_at", "run_at", "asc", "desc",
            "k=v", "=", "k==", "%00", "%ud800", "\x00", "main", "side", "nope", "a" * 3000,
            "<script>alert(1)</script>", "../../etc/passwd", "1:", "9" * 40 + ":id",
        ]
    ),
)  # fmt: skip
QUERY = st.lists(st.tuples(st.sampled_from(PARAMS), HOSTILE), max_size=8)


@pytest.mark.parametrize(
    "page", ["explorer", "outbox", "audit", "schedules", "indexes", "flow", "job"]
)
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(query=QUERY, htmx=st.booleans())
def test_fuzzed_query_strings_never_answer_5xx(
    page: str, query: list[tuple[str, str]], htmx: bool, seeded: Seeded, admin_client_: Client
) -> None:
    url, _ = page_urls(seeded)[page]
    base, _, fixed = url.partition("?")
    pairs = [fixed] if fixed else []
    pairs += [f"{quote(k)}={quote(v, safe='')}" for k, v in query]
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = admin_client_.get(f"{base}?{'&'.join(pairs)}", **headers)
    assert response.status_code < 500, (page, query, response.status_code)
    if response.status_code == 400:
        assert b'class="error' in response.content or b"error" in response.content.lower()
