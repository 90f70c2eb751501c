"""The consistency checker behind ``manage.py mqcheck`` (plain Python, no Django).

A store can be damaged by state it did not write itself: a job hash deleted by
hand or evicted while its ids stay in the sorted sets, a counter edited, an
index zset dropped.  ``check_store`` reads the whole store in bounded pages
and reports every disagreement; with ``repair=True`` it fixes each one
atomically (a Lua call per page of at most 500 items re-checks the item and
repairs it in the same step), and says what it did.

Passes, in order (each a stream of bounded calls):

1. **keys** -- SCAN of the store's own keys (``{prefix}:*``, COUNT 500): job
   hashes are checked page by page as they are found (``check_jobs``: remnant
   hashes, a missing all/state-set/index membership, lock fields on a job that
   is not active) and their (queue, state) tallies summed; the set, dedupe and
   flow keys are collected for the next passes.
2. **members** -- ZSCAN (COUNT 500) of every state set, and a walk of the
   all-jobs set and each index (chunked sets, store/chunks.py: their chunks
   and directory entries are checked first, ``check_chunks``, and their size
   counter compared with the members counted), with ``check_members``:
   dangling members (hash gone) and members of a set that does not fit the job
   (wrong state, queue or name; a lock of a job that is not active; listed
   under another score than its enqueued_at).  Store-wide sets go first, the
   queue index last, because the queue of a dangling member of a store-wide set
   is looked up in that index.
3. **dedupes** -- every dedupe entry and both dedupe indexes
   (``check_dedupes``).
4. **flows** -- each flow's dependency rows, counted by status against the
   parent's counters (``check_flow``; repaired compare-and-set by ``fix_flow``).
5. **counters** -- the O(1) ``counts`` hash against the tallies of pass 1.
   A counter that moved while the check ran (other than by the check's own
   repairs) is not judged (``unsettled``); a repair is compare-and-set
   (``fix_counter``), so it never overwrites a concurrent change.

On a store that keeps working during the check, an item is only ever reported
after an atomic re-check of that item, but the whole-store tallies are not a
snapshot: run it again (or on a quiet store) when ``unsettled`` is not zero.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from store.chunks import iter_members, sizes, split_chunk_key
from store.keys import NUL
from store.records import ALL_STATES, TERMINAL_STATES

#: Items per Redis call (SCAN/ZSCAN COUNT, ids per Lua call).
PAGE = 500
#: Job hashes per ``check_jobs`` call: each job is looked up in up to three chunked sets (a
#: binary search of each directory, about 25 commands a job), so 500 a call took up to 33 ms
#: at 100k jobs; 200 keeps a call near a third of that.
JOB_PAGE = 200
#: Problems kept per kind in a report (the counts are always complete).
SAMPLES_PER_KIND = 20

#: Every kind of problem, with the words the command prints for it.
KINDS: dict[str, str] = {
    "dangling_member": "set members whose job hash is gone",
    "wrong_set_member": "set members whose job is in another state, queue or name",
    "partial_hash": "job hashes without state, queue, name or seq",
    "missing_from_all": "jobs missing from the all-jobs set",
    "missing_from_state_set": "jobs missing from the set of their state",
    "missing_from_index": "jobs missing from an enabled name/queue index",
    "stray_lock": "locks without an active job",
    "counter": "O(1) counters that differ from the rows",
    "dedupe_dangling": "dedupe entries pointing at missing jobs",
    "dedupe_unindexed": "dedupe entries missing from their index",
    "flow_counter": "flow counters that disagree with the child rows",
    "flow_orphan_rows": "flow rows whose parent job is gone",
    "index_chunk": "chunks of the all-jobs set or an index that their directory does not match",
    "index_count": "sizes of the all-jobs set or an index that differ from their members",
}

#: What ``--repair`` does for each kind.
REPAIRS: dict[str, str] = {
    "dangling_member": "removed the member (and took back the counter it held)",
    "wrong_set_member": "removed the member from the set that does not fit",
    "partial_hash": "deleted the remnant hash",
    "missing_from_all": "added the job to the all-jobs set",
    "missing_from_state_set": "added the job to the set of its state",
    "missing_from_index": "added the job to the index",
    "stray_lock": "deleted the lock",
    "counter": "set the counter to the number of rows",
    "dedupe_dangling": "unregistered the entry",
    "dedupe_unindexed": "indexed the entry",
    "flow_counter": "set the parent's counters to the row counts",
    "flow_orphan_rows": "deleted the rows",
    "index_chunk": "fixed the directory entry, or put the stray chunk's members back in the set",
    "index_count": "set the size to the number of members",
}

Progress = Callable[[str, int, int | None], None]

#: The key kinds pass 1 collects, with the part after the tag they start with.
_SET_PREFIXES = (
    "waiting:",
    "delayed:",
    "finished:",
    "terminal:",
    "byname:",
    "byqueue:",
    "limits:active:",
    "groups:waiting:",
    "groups:wait:",
    "groups:active:",
)


@dataclass
class Problem:
    kind: str
    subject: str
    detail: str = ""
    repaired: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "detail": self.detail,
            "repaired": self.repaired,
        }


@dataclass
class CheckReport:
    """What one check found (and, with repair, fixed)."""

    prefix: str
    repair: bool
    started_at: int
    finished_at: int = 0
    jobs: int = 0
    keys: int = 0
    calls: int = 0
    found: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)
    samples: list[Problem] = field(default_factory=list)
    #: Counters that moved while the check ran (not judged; check again).
    unsettled: int = 0
    interrupted: bool = False

    @property
    def problems(self) -> int:
        return sum(self.found.values())

    @property
    def unrepaired(self) -> int:
        return self.problems - sum(self.repaired.values())

    @property
    def consistent(self) -> bool:
        """Nothing found, or everything found was repaired (and the check ran to its end)."""
        return not self.interrupted and self.unrepaired == 0

    def add(self, kind: str, subject: str, detail: str = "", repaired: bool = False) -> None:
        self.found[kind] = self.found.get(kind, 0) + 1
        if repaired:
            self.repaired[kind] = self.repaired.get(kind, 0) + 1
        if sum(1 for p in self.samples if p.kind == kind) < SAMPLES_PER_KIND:
            self.samples.append(Problem(kind, subject, detail, repaired))

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "repair": self.repair,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "jobs": self.jobs,
            "keys": self.keys,
            "calls": self.calls,
            "found": self.found,
            "repaired": self.repaired,
            "unsettled": self.unsettled,
            "interrupted": self.interrupted,
            "consistent": self.consistent,
            "samples": [p.to_json() for p in self.samples],
        }


class CheckInterrupted(Exception):
    """Raised inside the check when ``should_stop`` says so; the report is marked interrupted."""


class _Checker:
    def __init__(
        self,
        store: Any,
        repair: bool,
        progress: Progress | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.store = store
        self.keys = store.keys
        self.repair = repair
        self.flag = "1" if repair else "0"
        self.progress = progress or (lambda phase, done, total: None)
        self.should_stop = should_stop or (lambda: False)
        self.report = CheckReport(store.prefix, repair, store.now())
        self.tallies: dict[str, int] = {}
        self.deltas: dict[str, int] = {}
        self.sets: list[tuple[str, str, str]] = []
        #: Chunk numbers of each chunked set, by (kind, name or queue).
        self.chunks: dict[tuple[str, str], list[str]] = {}
        self.dedupes: list[str] = []
        self.flows: list[str] = []
        self.tag_len = len(self.keys.tag) + 1

    # ------------------------------------------------------------ plumbing

    def run(self, script: str, *args: Any) -> Any:
        if self.should_stop():
            raise CheckInterrupted
        self.report.calls += 1
        return self.store._run(script, *args)

    def command(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.should_stop():
            raise CheckInterrupted
        self.report.calls += 1
        return self.store._command("mqcheck", name, *args, **kwargs)

    def record(self, problems: list[str]) -> None:
        for k in range(0, len(problems), 3):
            self.report.add(problems[k], problems[k + 1], problems[k + 2], self.repair)

    def scan_keys(self) -> Iterator[list[str]]:
        """The store's keys, one SCAN page (COUNT 500) at a time."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.keys.tag) + ":*"
        client = self.store.client
        kwargs: dict[str, Any] = {"match": pattern, "count": PAGE}
        node = _cluster_node(client, self.keys.tag)
        if node is not None:
            kwargs["target_nodes"] = node
        cursor: Any = 0
        while True:
            cursor, page = self.command("scan", cursor, **kwargs)
            if isinstance(cursor, dict):  # a cluster client: ({node: cursor}, keys)
                cursor = next(iter(cursor.values()), 0)
            yield list(page)
            if int(cursor) == 0:
                return

    def zscan(self, key: str) -> Iterator[list[str]]:
        cursor: Any = 0
        while True:
            cursor, page = self.command("zscan", key, cursor, count=PAGE)
            if page:
                yield [member for member, _score in page]
            if int(cursor) == 0:
                return

    # ------------------------------------------------------------ passes

    def check(self) -> CheckReport:
        store = self.store
        # Rows single inserts left in the chunked sets' head join their chunks, so that
        # the key scan finds every chunked set and chunk (store/chunks.py).
        self.run("fold_head")
        self.counts_before = self.read_counts()
        total = sizes(self.store.client, self.keys, [self.keys.all])[0]
        self.report.calls += 1
        self.pass_keys(total)
        self.pass_members()
        self.pass_dedupes()
        self.pass_flows()
        self.pass_counters()
        self.report.finished_at = store.now()
        return self.report

    def read_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        cursor: Any = 0
        while True:
            cursor, page = self.command("hscan", self.keys.counts, cursor, count=PAGE)
            for name, value in page.items():
                try:
                    out[name] = int(value)
                except ValueError:
                    out[name] = 0
            if int(cursor) == 0:
                return out

    def pass_keys(self, total: int) -> None:
        jobs: list[str] = []
        indexes = self.store._idx
        for page in self.scan_keys():
            for key in page:
                self.report.keys += 1
                rest = key[self.tag_len :]
                if rest.startswith("job:"):
                    jobs.append(rest[4:])
                elif rest.startswith("dedupe:"):
                    self.dedupes.append(rest[7:])
                elif rest.startswith("flowchildren:"):
                    self.flows.append(rest[13:])
                elif (chunk := _parse_chunk(key, self.tag_len)) is not None:
                    self.chunks.setdefault(chunk[0], []).append(chunk[1])
                elif rest.startswith(_SET_PREFIXES):
                    parsed = _parse_set(rest)
                    if parsed is not None:
                        self.sets.append(parsed)
            while len(jobs) >= JOB_PAGE:
                self.check_jobs(jobs[:JOB_PAGE], indexes)
                del jobs[:JOB_PAGE]
                self.progress("jobs", self.report.jobs, total)
        if jobs:
            self.check_jobs(jobs, indexes)
        self.progress("jobs", self.report.jobs, total)

    def check_jobs(self, ids: list[str], indexes: str) -> None:
        tallies, problems = self.run("check_jobs", self.store.now(), self.flag, indexes, *ids)
        self.report.jobs += len(ids)
        for k in range(0, len(tallies), 2):
            name = tallies[k]
            self.tallies[name] = self.tallies.get(name, 0) + int(tallies[k + 1])
        self.record(problems)

    def pass_members(self) -> None:
        order = {"active": 0, "finished": 1, "all": 2, "keepage": 2, "delayed": 3, "waiting": 3}
        sets = [("all", "", ""), ("active", "", ""), ("keepage", "", ""), *self.sets]
        sets.sort(key=lambda s: order.get(s[0], 4) + (1 if s[0] == "byqueue" else 0))
        known = {(kind, a) for kind, a, _b in sets}
        sets += [(kind, a, "") for kind, a in self.chunks if (kind, a) not in known]
        for done, (kind, a, b) in enumerate(sets, 1):
            if kind in _CHUNKED:
                self.check_chunked(kind, a)
                pages: Iterator[list[str]] = (
                    [x for pair in page for x in pair]
                    for page in iter_members(self.run, kind, a, page=PAGE // 2)
                )
            else:
                pages = self.zscan(_set_key(self.keys, kind, a, b))
            for members in pages:
                problems, counters = self.run("check_members", self.flag, kind, a, b, *members)
                self.record(problems)
                for name in counters:
                    self.deltas[name] = self.deltas.get(name, 0) - 1
            self.progress("sets", done, len(sets))

    def check_chunked(self, kind: str, a: str) -> None:
        """The structure of one chunked set: stray chunks, directory entries, its size."""
        numbers = self.chunks.get((kind, a), [])
        for start in range(0, len(numbers), PAGE):
            problems, _ = self.run(
                "check_chunks", self.flag, kind, a, "chunks", *numbers[start : start + PAGE]
            )
            self.record(problems)
        directory = _set_key(self.keys, kind, a, "")
        before = sizes(self.store.client, self.keys, [directory])[0]
        counted = 0
        for entries in self.zscan(directory):
            problems, members = self.run("check_chunks", self.flag, kind, a, "entries", *entries)
            self.record(problems)
            counted += int(members)
        after = sizes(self.store.client, self.keys, [directory])[0]
        self.report.calls += 2
        if before != after:
            self.report.unsettled += 1
            return
        if counted == after:
            return
        fixed = False
        if self.repair:
            _, fixed = self.run("check_chunks", self.flag, kind, a, "size", after, counted)
        subject = "all" if kind == "all" else f"{kind}:{a}"
        self.report.add("index_count", subject, f"size {after}, members {counted}", bool(fixed))

    def pass_dedupes(self) -> None:
        now = self.store.now()
        for start in range(0, len(self.dedupes), PAGE):
            chunk = self.dedupes[start : start + PAGE]
            self.record(self.run("check_dedupes", now, self.flag, "entries", *chunk))
        for what, key in (
            ("pending", self.keys.dedupe_pending),
            ("window", self.keys.dedupe_windows),
        ):
            for members in self.zscan(key):
                self.record(self.run("check_dedupes", now, self.flag, what, *members))
        self.progress("dedupes", len(self.dedupes), len(self.dedupes))

    def pass_flows(self) -> None:
        for done, flow_id in enumerate(self.flows, 1):
            self.check_flow(flow_id)
            self.progress("flows", done, len(self.flows))

    def check_flow(self, flow_id: str) -> None:
        rows = [0, 0, 0, 0]
        first: str | None = None
        parent = ""
        cursor = ""
        orphan_rows = dangling = 0
        while True:
            reply = self.run("check_flow", self.flag, flow_id, cursor, PAGE)
            parent = reply[0]
            if first is None:
                first = parent
            counted = [int(x) for x in reply[1:5]]
            for k in range(4):
                rows[k] += counted[k]
            dangling += int(reply[5])
            if parent == "":
                orphan_rows += sum(counted) + int(reply[5])
                if self.repair:
                    # The page's rows were deleted: start over until none are left.
                    if not reply[6]:
                        break
                    continue
            cursor = reply[6]
            if not cursor:
                break
        if dangling and parent != "":
            self.report.add(
                "dangling_member", flow_id, f"flowchildren ({dangling} keys)", self.repair
            )
        if parent == "":
            if orphan_rows:
                self.report.add("flow_orphan_rows", flow_id, f"{orphan_rows} rows", self.repair)
            return
        if parent == "-" or parent != first:
            return  # no manifest (a fan-out in progress), or the parent moved meanwhile
        counters = [int(x) for x in parent.split(",")]
        if counters == rows:
            return
        detail = (
            "counters pending/completed/failed/cancelled "
            f"{'/'.join(map(str, counters))}, rows {'/'.join(map(str, rows))}"
        )
        fixed = False
        if self.repair:
            fixed = bool(self.run("fix_flow", flow_id, *counters, *rows))
        self.report.add("flow_counter", flow_id, detail, fixed)

    def pass_counters(self) -> None:
        after = self.read_counts()
        names = set(self.tallies) | {n for n in after if n.rsplit("|", 1)[-1] in ALL_STATES}
        for name in sorted(names):
            observed = after.get(name, 0)
            expected = self.tallies.get(name, 0)
            if self.counts_before.get(name, 0) + self.deltas.get(name, 0) != observed:
                self.report.unsettled += 1
                continue
            if observed == expected:
                continue
            fixed = False
            if self.repair:
                fixed = bool(self.run("fix_counter", name, observed, expected))
                if not fixed:
                    self.report.unsettled += 1
            self.report.add("counter", name, f"counter {observed}, rows {expected}", fixed)
        self.progress("counters", len(names), len(names))


def _cluster_node(client: Any, tag: str) -> Any:
    get_node = getattr(client, "get_node_from_key", None)
    if get_node is None:
        return None
    return get_node(tag)


_CHUNKED = ("all", "byname", "byqueue")


def _parse_chunk(key: str, tag_len: int) -> tuple[tuple[str, str], str] | None:
    """((kind, name or queue), chunk number) of a chunk key of a chunked set, else None."""
    split = split_chunk_key(key)
    if split is None:
        return None
    rest = split[0][tag_len:]
    if rest == "all":
        return ("all", ""), split[1]
    for kind in ("byname", "byqueue"):
        if rest.startswith(kind + ":"):
            return (kind, rest[len(kind) + 1 :]), split[1]
    return None


def _parse_set(rest: str) -> tuple[str, str, str] | None:
    """(kind, a, b) of a set key (the part after ``{prefix}:``), as check_members names it."""
    kind, _, tail = rest.partition(":")
    if kind == "waiting":
        queue, sep, name = tail.partition(NUL)
        return ("waiting", queue, name) if sep else None
    if kind == "terminal":
        state, sep, name = tail.partition(":")
        return ("terminal", state, name) if sep and state in TERMINAL_STATES else None
    if kind == "finished":
        return ("finished", tail, "") if tail in TERMINAL_STATES else None
    if kind in ("delayed", "byname", "byqueue"):
        return (kind, tail, "")
    if kind == "limits" and tail.startswith("active:"):
        return ("limitactive", tail[len("active:") :], "")
    if kind == "groups":
        sub, _, rest = tail.partition(":")
        queue, sep, other = rest.partition(NUL)
        kinds = {"waiting": "groupwaiting", "wait": "groupwait", "active": "groupactive"}
        if sep and sub in kinds:
            return (kinds[sub], queue, other)
    return None


def _set_key(keys: Any, kind: str, a: str, b: str) -> str:
    if kind == "all":
        return str(keys.all)
    if kind == "active":
        return str(keys.active)
    if kind == "keepage":
        return str(keys.keepage)
    if kind == "waiting":
        return str(keys.waiting(a, b))
    if kind == "terminal":
        return str(keys.terminal(b, a))
    if kind == "finished":
        return str(keys.finished(a))
    if kind == "delayed":
        return str(keys.delayed(a))
    if kind == "byname":
        return str(keys.byname(a))
    if kind == "limitactive":
        return str(keys.limit_active(a))
    if kind == "groupwaiting":
        return str(keys.group_waiting(a, b))
    if kind == "groupwait":
        return str(keys.group_wait(a, b))
    if kind == "groupactive":
        return str(keys.group_active(a, b))
    return str(keys.byqueue(a))


def check_store(
    store: Any,
    *,
    repair: bool = False,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    save: bool = True,
) -> CheckReport:
    """Check (and with ``repair``, fix) one store; see the module docstring.

    ``progress(phase, done, total)`` is called after each page; ``should_stop()``
    is polled before each Redis call (a True ends the check, the report marked
    ``interrupted``).  The report is kept under the store's tag
    (``last_check``) unless ``save`` is False.  Redis errors raise
    ``JobStoreError``.
    """
    checker = _Checker(store, repair, progress, should_stop)
    try:
        report = checker.check()
    except CheckInterrupted:
        report = checker.report
        report.interrupted = True
        report.finished_at = store.now()
    if save:
        store._command(
            "mqcheck", "set", store.keys.check_last, json.dumps(report.to_json(), sort_keys=True)
        )
    return report


def last_check(store: Any) -> dict[str, Any] | None:
    """The last saved check report of a store (as JSON data), or None."""
    raw = store._command("last_check", "get", store.keys.check_last)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
