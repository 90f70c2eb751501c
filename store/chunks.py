"""Chunked sorted sets: how the all-jobs set and the list indexes are stored.

A sorted set of more than ``zset-max-listpack-entries`` members (128 by default) is a
skiplist, about 110 bytes a member; a listpack about 25.  The all-jobs set ``all`` and the
optional ``byname:<name>`` / ``byqueue:<queue>`` indexes hold every job, so they are kept
in chunks of at most 64 members (half the listpack limit: cheaper to fill) that stay
listpacks (``lua/lib/chunks.lua`` has the algorithm):

* ``<index key>`` is the directory: one entry per chunk, member ``<lower bound id> NUL
  <chunk number>``, scored by the lower bound's score;
* ``<index key> NUL <number>`` is a chunk;
* ``{prefix}:ixcount`` (hash) holds the number of members in each set's chunks (field:
  the directory key), ``{prefix}:ixseq`` draws chunk numbers;
* ``{prefix}:ixpend`` (list) is the head shared by the store's sets: the rows single
  inserts appended (score, id, index flags, queue, name: five items a row) that no chunk
  holds yet.  A single insert is one RPUSH there instead of one listpack insert per set;
  the insert that brings it to 128 rows moves them into the chunks in one sorted batch, and
  every script that reads or changes the chunks does so first.

Members keep the order of one sorted set ((enqueued_at, id), ids as bytes); every read
and write is one script call of O(log chunks + 128).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from store.keys import NUL, StoreKeys

#: Members a chunk holds at most (CZ_CAP; zset-max-listpack-entries is 128 by default).
#: Layout 3 filled chunks to 128: those are split when they next take a member.
CHUNK_CAPACITY = 64
#: Rows the head holds at most (insert_job in lua/lib/rows.lua folds it at 5 x 128
#: items), five items each.
HEAD_ROWS = 128
HEAD_ROW_ITEMS = 5
#: The fields (after ``<directory> NUL``) layout 3 kept in ixcount as a cache of each
#: set's last chunk; layout 4 has none (store/layout.py drops them).
TAIL_FIELDS = ("n", "c", "b", "i")
#: Members one chunk_page call returns at most.
PAGE = 500

Run = Callable[..., Any]


def chunk_kind(keys: StoreKeys, kind: str, arg: str = "") -> str:
    """The directory key of the chunked set ``kind`` ('all', 'byname', 'byqueue')."""
    if kind == "all":
        return keys.all
    if kind == "byname":
        return keys.byname(arg)
    if kind == "byqueue":
        return keys.byqueue(arg)
    raise ValueError(f"not a chunked set: {kind!r}")


def split_chunk_key(key: str) -> tuple[str, str] | None:
    """(directory key, chunk number) of a chunk key; None for any other key."""
    directory, sep, number = key.rpartition(NUL)
    if not sep or not number.isdigit():
        return None
    return directory, number


def iter_members(
    run: Run,
    kind: str,
    arg: str = "",
    *,
    min_score: int | None = None,
    page: int = PAGE,
    newest_first: bool = False,
) -> Iterator[list[tuple[str, str]]]:
    """Pages of (id, score) of a chunked set in ascending order (``newest_first``:
    descending), ``page`` per script call.

    ``run(script, *args)`` runs a store script.  With ``min_score``, only members scored at
    or above it.  The walk's cursor is a value, so chunks split or merged meanwhile do not
    make it skip a member present throughout.
    """
    walk = MemberWalk(kind, arg, min_score=min_score, page=page, newest_first=newest_first)
    while not walk.done:
        members = walk.read(run("chunk_page", *walk.args()))
        if members:
            yield members


class MemberWalk:
    """The state of a walk over a chunked set (``iter_members``), without the I/O: run
    ``chunk_page`` with :meth:`args` and hand the reply to :meth:`read` until ``done``."""

    def __init__(
        self,
        kind: str,
        arg: str = "",
        *,
        min_score: int | None = None,
        page: int = PAGE,
        newest_first: bool = False,
    ) -> None:
        if min_score is not None and newest_first:
            raise ValueError("min_score walks ascending")
        self.kind, self.arg, self.page, self.newest_first = kind, arg, page, newest_first
        self.cursor: tuple[str, str] | None = (
            None if min_score is None else (str(int(min_score)), "")
        )
        self.done = False

    def args(self) -> list[Any]:
        """The arguments of the next ``chunk_page`` call."""
        args: list[Any] = [self.kind, self.arg]
        args += ["1", self.cursor[0], self.cursor[1]] if self.cursor else ["0", "", ""]
        return [*args, self.page, "desc" if self.newest_first else ""]

    def read(self, reply: list[Any]) -> list[tuple[str, str]]:
        """The members of one ``chunk_page`` reply; moves the cursor past them."""
        flat = reply[1:]
        members = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        if members:
            self.cursor = (members[-1][1], members[-1][0])
        self.done = reply[0] == "1" or not members
        return members


def sizes(client: Any, keys: StoreKeys, directories: list[str]) -> list[int]:
    """The member counts of chunked sets: their chunks' (one HMGET) plus their rows in the
    head (at most 128 rows, read in the same round trip).  Reads only."""
    if not directories:
        return []
    pipe = client.pipeline(transaction=False)
    pipe.hmget(keys.index_counts, directories)
    pipe.lrange(keys.index_pending, 0, -1)
    raw, head = pipe.execute()
    counts = [int(v or 0) for v in raw]
    wanted = {d: i for i, d in enumerate(directories)}
    for at in range(0, len(head) - HEAD_ROW_ITEMS + 1, HEAD_ROW_ITEMS):
        idx, queue, name = head[at + 2], head[at + 3], head[at + 4]
        for directory in (
            keys.all,
            keys.byname(name) if idx[:1] == "1" else None,
            keys.byqueue(queue) if idx[1:2] == "1" else None,
        ):
            i = wanted.get(directory) if directory else None
            if i is not None:
                counts[i] += 1
    return counts
