"""Error messages are normalised before grouping (``ERROR_GROUPING.normalise`` in
``lua/lib/errors.lua``, mirrored by ``store.insights.normalise_error_message``): the rules
on examples, Lua and Python agreeing on generated messages, and real failures grouped by
cause with the queues and job names each group failed in."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import EnqueueRequest, Fail, scripts
from store.insights import (
    ERROR_GROUP_MAX_PLACES,
    ERROR_MESSAGE_MAX,
    error_group_id,
    normalise_error_message,
)
from store.jobs import encode_failure
from tests.store.helpers import claim_job

EXAMPLES = [
    ("card 4242 declined for 'bob@x.io'", "card <n> declined for '…'"),
    ('column "total amount" is null', 'column "…" is null'),
    ("'a b'", "'…'"),  # a quote may open the message
    # A bare identifier in quotes names code (a key, a column): kept.
    ("KeyError 'user_id'", "KeyError 'user_id'"),
    ('constraint "users_email_key" violated', 'constraint "users_email_key" violated'),
    ("can't reach it, won't retry", "can't reach it, won't retry"),  # apostrophes stay
    ("job 123e4567-e89b-12d3-a456-426614174000 gone", "job <uuid> gone"),
    ("mail to ops+alerts@mail.example.org bounced", "mail to <email> bounced"),
    ("connect to db-3.internal:5432 refused", "connect to <host> refused"),
    ("connect to 10.0.0.7:6379 refused", "connect to <host> refused"),
    ("no route to 10.0.0.7.", "no route to <host>."),
    ("GET https://api.example.com/v1 failed", "GET https://<host>/v<n> failed"),
    ("localhost:6379 down", "<host> down"),
    ("pointer 0x1f3a invalid", "pointer <hex> invalid"),
    ("object deadbeef01 and req_abc123def456 missing", "object <hex> and req_<hex> missing"),
    ("upstream timed out after 30 s", "upstream timed out after <n> s"),
    ("row 12345678 bad", "row <n> bad"),  # digits only: a number, not hex
    ("see config.yaml and a.b", "see config.yaml and a.b"),  # one dot, no port: text
    ("at 2024-05-01T10:00:00Z", "at <n>-<n>-<n>T<n>:<n>:<n>Z"),
]


@pytest.mark.parametrize(("message", "pattern"), EXAMPLES)
def test_messages_are_normalised_by_the_documented_rules(message: str, pattern: str) -> None:
    assert normalise_error_message(message) == pattern


def test_messages_are_cut_at_the_byte_budget_never_inside_a_character() -> None:
    long = "x" * (ERROR_MESSAGE_MAX - 1) + "é tail"  # the cut splits "é"
    assert normalise_error_message(long) == "x" * (ERROR_MESSAGE_MAX - 1)
    assert error_group_id("E", "", long) == error_group_id("E", "", long + " more")
    assert error_group_id("E", "", "a 1") != error_group_id("E", "", "a b")


# ------------------------------------------------------------ Lua and Python agree

LUA_IDS = (
    "local out = {}\n"
    "for i = 3, #ARGV do\n"
    "  local p = ERROR_GROUPING.normalise(ERROR_GROUPING.cut(ARGV[i]))\n"
    "  out[#out + 1] = string.gsub(p, '.', function(c) return string.format('%02x', string.byte(c)) end)\n"
    "  out[#out + 1] = string.sub(redis.sha1hex(ARGV[1] .. NUL .. ARGV[2] .. NUL .. p), 1, 16)\n"
    "end\n"
    "return out"
)


def lua_groups(
    client: Any, module: str, etype: str, messages: list[str]
) -> list[tuple[bytes, str]]:
    """(pattern, group id) per message as the fail path computes them (patterns sent as
    hex: a cut message need not be valid UTF-8 in a buggy version)."""
    reply = client.eval(f"{scripts._preamble()}\n{LUA_IDS}", 0, module, etype, *messages)
    return [(bytes.fromhex(reply[i]), reply[i + 1]) for i in range(0, len(reply), 2)]


def assert_parity(
    client: Any, messages: list[str], module: str = "app.m", etype: str = "E"
) -> None:
    got = lua_groups(client, module, etype, messages)
    assert len(got) == len(messages)
    for message, (pattern, gid) in zip(messages, got, strict=True):
        assert pattern.decode() == normalise_error_message(message), message
        assert gid == error_group_id(etype, module, message), message


#: Pieces messages are built from: every rule's matches, near misses and the characters
#: the rules' boundaries look at.
FRAGMENTS = [
    "card",
    "declined",
    "for",
    " ",
    " ",
    " ",
    ", ",
    ".",
    ":",
    "-",
    "_",
    "'",
    '"',
    "@",
    "/",
    "=",
    "(",
    ")",
    "<",
    ">",
    "0",
    "7",
    "42",
    "9999",
    "12345678",
    "0x1f3A",
    "0X",
    "deadbeef01",
    "abcdef",
    "ABCDEF12",
    "abc123def456",
    "123e4567-e89b-12d3-a456-426614174000",
    "123E4567-E89B-12D3-A456-42661417400",
    "bob@x.io",
    "a.b+c@mail.example.org",
    "x@y",
    "db-3.internal",
    "db-3.internal:5432",
    "10.0.0.7",
    "10.0.0.7:6379",
    "1.2.3",
    "localhost",
    "localhost:80",
    "api.example.com",
    "a..b.com",
    ".x.y.com",
    "v1.2.3",
    "config.yaml",
    "e.g.",
    "user_id",
    "'bob'",
    "'user_id'",
    '"a b"',
    "can't",
    "é",
    "日本",
    "\t",
    "\n",
    "\x00",
    "%",
]


def random_message(rng: random.Random) -> str:
    parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 14))]
    if rng.random() < 0.2:
        parts.append("".join(rng.choice("ab0x.:-@'\" ") for _ in range(rng.randint(1, 30))))
    return "".join(parts)


def test_lua_and_python_group_thousands_of_generated_messages_alike(redis_client: Any) -> None:
    rng = random.Random(20240501)
    messages = [random_message(rng) for _ in range(3000)]
    messages += ["x" * 299 + "é", "'" * 400, "1." * 200, "a@" * 200 + "b.co"]  # cut and long
    for start in range(0, len(messages), 500):
        assert_parity(redis_client, messages[start : start + 500])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=12).map(
            "".join
        ),
        min_size=1,
        max_size=10,
    )
)
def test_lua_and_python_agree_on_any_text(redis_client: Any, messages: list[str]) -> None:
    assert_parity(redis_client, messages)


def test_shared_constants_match(redis_client: Any) -> None:
    got = redis_client.eval(
        f"{scripts._preamble()}\nreturn {{ERROR_MESSAGE_MAX, ERROR_GROUPING.MAX_PLACES}}", 0
    )
    assert list(got) == [ERROR_MESSAGE_MAX, ERROR_GROUP_MAX_PLACES]


# ------------------------------------------------------------ real failures, grouped


def fail_with(store: Any, message: str, queue: str = "q", name: str = "A") -> str:
    store.enqueue(EnqueueRequest(name=name, queue=queue, payload=1))
    job = claim_job(store, queue=queue, names=[name], token="t")
    try:
        raise ValueError(message)
    except ValueError as raised:
        store.ack(job.id, "t", Fail(encode_failure(raised)))
    return job.id


def test_failures_differing_in_values_form_one_group(store: Any, clock: Any) -> None:
    bob = fail_with(store, "card 4242 declined for 'bob@x.io'", queue="billing", name="Charge")
    clock.advance(1000)
    amy = fail_with(store, "card 9999 declined for 'amy@y.io'", queue="billing", name="Refund")
    clock.advance(1000)
    other = fail_with(store, "connect to db-3.internal:5432 refused", queue="sync")
    fail_with(store, "connect to 10.0.0.7:6379 refused", queue="sync")
    groups = {g.pattern: g for g in store.error_groups()}
    assert set(groups) == {"card <n> declined for '…'", "connect to <host> refused"}
    card = groups["card <n> declined for '…'"]
    assert card.count == 2 and card.message == "card 4242 declined for 'bob@x.io'"
    assert card.id == error_group_id("ValueError", "builtins", "card 1 declined for 'c@d.ef'")
    assert [j.id for j in store.list_by_error(card.id).items] == [amy, bob]
    assert card.queues == {"billing": 2} and card.names == {"Charge": 1, "Refund": 1}
    assert card.may_have_failed_in(queue="billing", name="Refund")
    assert not card.may_have_failed_in(queue="sync")
    hosts = groups["connect to <host> refused"]
    assert hosts.count == 2 and hosts.queues == {"sync": 2} and other in hosts.last_job + other


def test_a_group_counts_a_bounded_number_of_queues_and_names(store: Any) -> None:
    for i in range(ERROR_GROUP_MAX_PLACES + 2):
        fail_with(store, f"boom {i}", queue=f"q{i}", name="Same")
    [group] = store.error_groups()
    assert len(group.queues) == ERROR_GROUP_MAX_PLACES
    assert group.queues_overflow == 2 and group.names == {"Same": ERROR_GROUP_MAX_PLACES + 2}
    assert group.names_overflow == 0
    # Past the bound a queue filter cannot rule the group out.
    assert group.may_have_failed_in(queue="never-seen")
    assert not group.may_have_failed_in(name="Other")


def test_a_long_message_cut_inside_a_character_stays_readable(store: Any) -> None:
    message = "x" * (ERROR_MESSAGE_MAX - 2) + "日本 failed"
    fail_with(store, message)
    [group] = store.error_groups()  # a split character would make the reply undecodable
    assert group.message == "x" * (ERROR_MESSAGE_MAX - 2)
    assert group.id == error_group_id("ValueError", "builtins", message)


def test_groups_recorded_before_normalisation_stay_readable(
    store: Any, redis_client: Any, clock: Any
) -> None:
    old_id = "0123456789abcdef"
    redis_client.hset(
        store.keys.error(old_id),
        mapping={
            "type": "ValueError",
            "module": "builtins",
            "message": "card 4242 declined for 'bob@x.io'",
            "count": "3",
            "first_seen": "1",
            "last_seen": "2",
            "last_job": "j-old",
            "last_queue": "billing",
            "last_name": "Charge",
        },
    )
    redis_client.zadd(store.keys.errors(), {old_id: 2})
    clock.advance(10)
    fail_with(store, "card 9999 declined for 'amy@y.io'", queue="billing", name="Charge")
    new, old = store.error_groups()
    assert old.id == old_id and old.pattern == "" and old.count == 3 and not old.tracks_places
    assert old.may_have_failed_in(queue="billing") and not old.may_have_failed_in(queue="x")
    assert new.id != old_id and new.count == 1  # new failures go to the new group
