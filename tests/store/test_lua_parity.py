"""The Lua helpers and the Python store agree on key names and shared constants.

Both sides build every key of a store (``store/keys.py`` and ``lua/lib/keys.lua``).
Each Lua builder is evaluated by Redis itself (EVAL of the joined helper library,
``bind(KEYS[1])`` and a table of builder calls) and compared with ``StoreKeys``; the
constants both sides spell (waiting-sequence width, the chunked sets' head) likewise.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from store import chunks, scripts
from store.keys import FLOWS_SETTLED_CAP, NUL, WAITING_SEQ_WIDTH, StoreKeys

ID, QUEUE, NAME, STATE = "j-42", "q:ueue", "Na:me", "failed"
CHILD, GROUP, DEDUPE = "child:1", "0123456789abcdef", "dedupe:key"

#: Python key name (a StoreKeys attribute or call) -> the Lua expression building it.
PAIRS: list[tuple[Any, str]] = [
    (lambda k: k.seq, "K_SEQ"),
    (lambda k: k.all, "K_ALL"),
    (lambda k: k.active, "K_ACTIVE"),
    (lambda k: k.counts, "K_COUNTS"),
    (lambda k: k.paused, "K_PAUSED"),
    (lambda k: k.dedupe_windows, "K_DEDUPE_WINDOWS"),
    (lambda k: k.dedupe_pending, "K_DEDUPE_PENDING"),
    (lambda k: k.keepage, "K_KEEPAGE"),
    (lambda k: k.wake, "K_WAKE"),
    (lambda k: k.outbox, "K_OUTBOX"),
    (lambda k: k.outbox_seq, "K_OUTBOX_SEQ"),
    (lambda k: k.flow_owes, "K_FLOW_OWES"),
    (lambda k: k.schedules, "K_SCHEDULES"),
    (lambda k: k.qnames, "K_QNAMES"),
    (lambda k: k.flow_pending, "K_FLOW_PENDING"),
    (lambda k: k.flow_cascade, "K_FLOW_CASCADE"),
    (lambda k: k.flow_gc, "K_FLOW_GC"),
    (lambda k: k.index_pending, "K_IXPEND"),
    (lambda k: k.limits, "K_LIMIT.settings"),
    (lambda k: k.limits_rate, "K_LIMIT.rate"),
    (lambda k: k.limits_blocked, "K_LIMIT.blocked"),
    (lambda k: k.limit_active(QUEUE), "K_LIMIT.active .. ARGV[2]"),
    (lambda k: k.group_wait(QUEUE, GROUP), "K_LIMIT.gwait .. ARGV[2] .. NUL .. ARGV[6]"),
    (lambda k: k.group_active(QUEUE, GROUP), "K_LIMIT.gactive .. ARGV[2] .. NUL .. ARGV[6]"),
    (lambda k: k.group_waiting(QUEUE, NAME), "K_LIMIT.gwaiting .. ARGV[2] .. NUL .. ARGV[3]"),
    (lambda k: k.group_turns(QUEUE), "K_LIMIT.turns .. ARGV[2]"),
    (lambda k: k.group_held(QUEUE), "K_LIMIT.held .. ARGV[2]"),
    (lambda k: k.group_tat(QUEUE), "K_LIMIT.gtat .. ARGV[2]"),
    (lambda k: k.group_cool(QUEUE), "K_LIMIT.gcool .. ARGV[2]"),
    (lambda k: k.group_sizes(QUEUE), "K_LIMIT.gsize .. ARGV[2]"),
    (lambda k: k.events, "K_LIMIT.events"),
    (lambda k: k.events_cap, "K_LIMIT.evcap"),
    (lambda k: k.logs(ID), "K_LIMIT.logs .. ARGV[1]"),
    (lambda k: k.flows_settled, "K_LIMIT.settled"),
    (lambda k: k.index_seq, "k_ixseq()"),
    (lambda k: k.index_counts, "k_ixcount()"),
    (lambda k: k.finished_total, "k_finished_total()"),
    (lambda k: k.stats(STATE), "K_STATS .. ARGV[4]"),
    (lambda k: k.job(ID), "k_job(ARGV[1])"),
    (lambda k: k.attempts(ID), "k_attempts(ARGV[1])"),
    (lambda k: k.waiting(QUEUE, NAME), "k_waiting(ARGV[2], ARGV[3])"),
    (lambda k: k.delayed(QUEUE), "k_delayed(ARGV[2])"),
    (lambda k: k.parked(QUEUE), "k_parked(ARGV[2])"),
    (lambda k: k.finished(STATE), "k_finished(ARGV[4])"),
    (lambda k: k.terminal(NAME, STATE), "k_terminal(ARGV[3], ARGV[4])"),
    (lambda k: k.byname(NAME), "k_byname(ARGV[3])"),
    (lambda k: k.byqueue(QUEUE), "k_byqueue(ARGV[2])"),
    (lambda k: k.dedupe(NAME, DEDUPE), "k_dedupe(dedupe_member(ARGV[3], ARGV[7]))"),
    (lambda k: k.schedule(NAME), "k_schedule(ARGV[3])"),
    (lambda k: k.flowchild(ID, CHILD), "k_flowchild(ARGV[1], ARGV[5])"),
    (lambda k: k.flowchildren(ID), "k_flowchildren(ARGV[1])"),
    (lambda k: k.job_metrics_minute(7, NAME), "k_jobmetrics_minute(7, ARGV[3])"),
    (lambda k: k.job_metrics_hour(3, NAME), "k_jobmetrics_hour(3, ARGV[3])"),
    (lambda k: k.errors(), "k_errors()"),
    (lambda k: k.error(GROUP), "k_error(ARGV[6])"),
    (lambda k: k.error_jobs(GROUP), "k_error_jobs(ARGV[6])"),
    (lambda k: k.migrating(k.byname(NAME)), "k_migrating(k_byname(ARGV[3]))"),
    (lambda k: k.chunk(k.all, 5), "cz_chunk(K_ALL, 5)"),
]


#: Lua-only keys (no Python reader): the scratch set a chunk merge sorts in.
LUA_ONLY = {"k_czsort()": ":czsort"}


def _lua(client: Any, tag: str, body: str) -> list[Any]:
    text = f"{scripts._preamble()}\nbind(KEYS[1])\n{body}"
    return list(client.eval(text, 1, tag, ID, QUEUE, NAME, STATE, CHILD, GROUP, DEDUPE))


@pytest.mark.parametrize("prefix_", ["p", "tenant:a", "a b:c.d", "ünï:cödé"])
def test_every_lua_key_builder_matches_store_keys(redis_client: Any, prefix_: str) -> None:
    keys = StoreKeys(prefix_)
    body = "return {\n" + ",\n".join(lua for _, lua in PAIRS) + "\n}"
    got = _lua(redis_client, keys.tag, body)
    assert len(got) == len(PAIRS)
    for (python, lua), value in zip(PAIRS, got, strict=True):
        assert value == python(keys), lua
        assert value.startswith(keys.tag + ":"), lua
    scratch = _lua(redis_client, keys.tag, "return {" + ", ".join(LUA_ONLY) + "}")
    assert scratch == [keys.tag + suffix for suffix in LUA_ONLY.values()]


def test_every_lua_key_builder_is_compared() -> None:
    """A builder added to lib/keys.lua needs a pair here (or an entry in LUA_ONLY)."""
    text = (scripts.LUA_DIR / "lib" / "keys.lua").read_text(encoding="utf-8")
    builders = (
        set(re.findall(r"local function (k_\w+)", text))
        | set(re.findall(r"^  (K_\w+) = ", text, re.MULTILINE))
        | set(re.findall(r"^ *(?:function )?(K_LIMIT\.\w+)", text, re.MULTILINE))
    )
    compared = "\n".join([*(lua for _, lua in PAIRS), *LUA_ONLY])
    missing = sorted(b for b in builders if not re.search(rf"\b{b}\b", compared))
    assert missing == [], f"Lua key builders without a parity pair: {missing}"


def test_waiting_members_and_constants_match(redis_client: Any) -> None:
    body = (
        "return { WAITING_SEQ_WIDTH, WAITING_SEQ_ZEROS, waiting_member('42', ARGV[1]),"
        " waiting_member(7, ARGV[1]), string.sub(waiting_member('42', ARGV[1]),"
        " WAITING_SEQ_WIDTH + 1), CZ_HEAD_ROWS, CZ_HEAD_ROW_ITEMS, CZ_CAP, NUL,"
        " FLOWS_SETTLED_CAP }"
    )
    width, zeros, member, member7, back, head_rows, row_items, cap, nul, settled_cap = _lua(
        redis_client, "{p}", body
    )
    assert width == WAITING_SEQ_WIDTH
    assert zeros == "0" * WAITING_SEQ_WIDTH
    assert member == "42".zfill(WAITING_SEQ_WIDTH) + ID
    assert member7 == "7".zfill(WAITING_SEQ_WIDTH) + ID
    assert back == ID
    assert head_rows == chunks.HEAD_ROWS
    assert row_items == chunks.HEAD_ROW_ITEMS
    assert cap == chunks.CHUNK_CAPACITY
    assert nul == NUL
    assert settled_cap == FLOWS_SETTLED_CAP


def test_fmt_keeps_texts_but_never_confuses_zero_and_minus_zero(redis_client: Any) -> None:
    """fmt remembers the texts of recent numbers by number; -0 and 0 are one table key in
    Lua, so a remembered "-0" must never answer for 0 (nor "0" for -0)."""
    body = (
        "local neg = -tonumber('0')\n"
        "return { fmt(neg), fmt(0), fmt(1234567890123), fmt(1234567890123), fmt(0),"
        " fmt(neg), fmt(-5), fmt(2.6) }"
    )
    got = _lua(redis_client, "{p}", body)
    assert got[1] == "0" and got[4] == "0"
    assert got[0] in ("-0", "0") and got[5] == got[0]  # -0 formats as itself, never memoised
    assert got[2] == got[3] == "1234567890123"
    assert got[6:] == ["-5", "3"]


def test_every_script_compiles_with_locals_to_spare(redis_client: Any) -> None:
    """Lua allows 200 locals in a chunk; EVAL runs the joined helpers and a body as one.

    Each script must still compile with a few more locals than it has, so that a helper
    added later fails here, by name, instead of in whichever operation crosses the line.
    """
    spare = "\nlocal spare_1, spare_2, spare_3 = 1, 2, 3"
    for name in scripts.script_names():
        head = f"\n-- >>> {name}.lua\n"
        text = scripts.script_text(name).replace(head, spare + head, 1)
        assert spare in text
        redis_client.script_load(text)
