"""Every Redis key of a store, in one place.

All keys of the store with prefix ``p`` live under the hash tag ``{p}``, so a
store maps to a single Redis Cluster slot and several stores spread over a
cluster.  The Lua side builds the same names in ``lua/lib/keys.lua``; keep
the two in step.  Two user strings in one key or member are joined with NUL.
"""

from __future__ import annotations

NUL = "\0"

#: Digits of the zero-padded FIFO ordinal that starts a waiting-set member (the job id
#: follows it); ``WAITING_SEQ_WIDTH`` / ``WAITING_SEQ_ZEROS`` in lua/lib/keys.lua.
WAITING_SEQ_WIDTH = 16

#: How many lately settled flow parents a store keeps in ``flows_settled`` (the newest);
#: ``FLOWS_SETTLED_CAP`` in lua/lib/parked.lua.
FLOWS_SETTLED_CAP = 1000


def check_prefix(prefix: str) -> None:
    """Raise ValueError unless ``prefix`` can name a store (non-empty; no braces, no NUL)."""
    if not prefix or any(c in prefix for c in "{}\0"):
        raise ValueError("a store prefix must be non-empty and must not contain '{', '}' or NUL")


class StoreKeys:
    """Key names of one store."""

    def __init__(self, prefix: str) -> None:
        check_prefix(prefix)
        self.prefix = prefix
        self.tag = "{" + prefix + "}"
        tag = self.tag
        self.seq = f"{tag}:seq"
        self.all = f"{tag}:all"
        self.active = f"{tag}:active"
        self.counts = f"{tag}:counts"
        self.paused = f"{tag}:paused"
        self.dedupe_windows = f"{tag}:dedupes:window"
        self.dedupe_pending = f"{tag}:dedupes:pending"
        self.keepage = f"{tag}:keepage"
        self.wake = f"{tag}:wake"
        self.outbox = f"{tag}:outbox"
        self.outbox_seq = f"{tag}:outbox:seq"
        self.flow_owes = f"{tag}:flow:owes"
        self.flow_pending = f"{tag}:flow:pending"
        self.flow_cascade = f"{tag}:flow:cascade"
        self.flow_gc = f"{tag}:flow:gc"
        #: Flow parents that reached a terminal state lately, scored by finished_at, capped
        #: to the newest FLOWS_SETTLED_CAP (lua/lib/parked.lua).
        self.flows_settled = f"{tag}:flows:settled"
        self.outbox_unroutable = f"{tag}:outbox:unroutable"
        self.schedules = f"{tag}:schedules"
        self.schedules_paused = f"{tag}:schedules:paused"
        self.qnames = f"{tag}:qnames"
        self.workers = f"{tag}:workers"
        #: Operator commands to workers (field: worker id, value: "quiet" or "stop"), read by
        #: each worker every second (store/worker.py, the dashboard's workers page).
        self.worker_control = f"{tag}:workers:control"
        self.stats_pruned = f"{tag}:stats:pruned"
        # "<queue> NUL <name>" of jobs that workers run through a name resolver (no
        # registered Job), e.g. mqadmin's Django Tasks backend; see Worker(resolver=...).
        self.resolvable = f"{tag}:resolvable"
        #: Jobs that ever reached each terminal state, per queue (field ``<queue>|<state>``).
        self.finished_total = f"{tag}:finishedtotal"
        #: The last mqcheck report (JSON), shown on the dashboard's index page.
        self.check_last = f"{tag}:check:last"
        #: The data layout version of the store's job hashes (store/layout.py).
        self.layout = f"{tag}:layout"
        #: The chunked sets' chunk-number counter, their chunks' sizes and their head (rows
        #: single inserts appended that no chunk holds yet; store/chunks.py).
        self.index_seq = f"{tag}:ixseq"
        self.index_counts = f"{tag}:ixcount"
        self.index_pending = f"{tag}:ixpend"
        #: Flow control (store/flow_control.py): each limited queue's settings (field: the
        #: queue), its rate's TAT (when the next claim may come), and the queues a claim found at
        #: their concurrency limit.  Field NUL + queue marks a queue that has job groups.
        self.limits = f"{tag}:limits"
        self.limits_rate = f"{tag}:limits:rate"
        self.limits_blocked = f"{tag}:limits:blocked"
        # The event stream and its cap (lua/lib/events.lua, store/events.py).
        self.events = f"{tag}:events"
        self.events_cap = f"{tag}:events:cap"

    def migrating(self, key: str) -> str:
        """Where ``migrate_set`` keeps the rest of the plain set ``key`` (a key of this
        store) while it turns it into a chunked set (store/layout.py)."""
        return f"{self.tag}:migrate:{key[len(self.tag) + 1 :]}"

    def chunk(self, directory: str, number: str | int) -> str:
        """A chunk of the chunked set whose directory is ``directory`` (``all``, an index)."""
        return f"{directory}{NUL}{number}"

    def job(self, job_id: str) -> str:
        return f"{self.tag}:job:{job_id}"

    def logs(self, job_id: str) -> str:
        """A job's log lines (lua/log.lua); deleted with the job."""
        return f"{self.tag}:logs:{job_id}"

    def attempts(self, job_id: str) -> str:
        return f"{self.tag}:attempts:{job_id}"

    def waiting(self, queue: str, name: str) -> str:
        return f"{self.tag}:waiting:{queue}{NUL}{name}"

    def limit_active(self, queue: str) -> str:
        """The jobs of a limited queue that hold a claim, scored by lock expiry."""
        return f"{self.tag}:limits:active:{queue}"

    # Job groups (store/lua/lib/limits.lua, docs/flow-control.md).
    def group_wait(self, queue: str, group: str) -> str:
        """A group's waiting jobs (members and scores as in ``waiting``)."""
        return f"{self.tag}:groups:wait:{queue}{NUL}{group}"

    def group_active(self, queue: str, group: str) -> str:
        """A group's claims that count against its concurrency, scored by lock expiry."""
        return f"{self.tag}:groups:active:{queue}{NUL}{group}"

    def group_waiting(self, queue: str, name: str) -> str:
        """The grouped waiting jobs of one (queue, job name), as ``waiting`` holds the rest."""
        return f"{self.tag}:groups:waiting:{queue}{NUL}{name}"

    def group_turns(self, queue: str) -> str:
        """The queue's groups that have waiting jobs and take turns, scored by turn."""
        return f"{self.tag}:groups:turns:{queue}"

    def group_held(self, queue: str) -> str:
        """The queue's groups held back by their limits, scored by when to look again."""
        return f"{self.tag}:groups:held:{queue}"

    def group_sizes(self, queue: str) -> str:
        """The queue's groups scored by their number of waiting jobs (busiest first, reversed)."""
        return f"{self.tag}:groups:size:{queue}"

    def group_tat(self, queue: str) -> str:
        """Each group's rate TAT ("<ms>:<remainder>", see lua/lib/limits.lua LIMITS.tat),
        kept while the group has waiting jobs or cools down after its last."""
        return f"{self.tag}:groups:tat:{queue}"

    def group_cool(self, queue: str) -> str:
        """Groups without waiting jobs whose rate TAT is still ahead, scored by the TAT."""
        return f"{self.tag}:groups:cool:{queue}"

    def delayed(self, queue: str) -> str:
        return f"{self.tag}:delayed:{queue}"

    def parked(self, queue: str) -> str:
        """Flow parents of ``queue`` in waiting-children, scored by their fan-out run's start."""
        return f"{self.tag}:parked:{queue}"

    def finished(self, state: str) -> str:
        return f"{self.tag}:finished:{state}"

    def terminal(self, name: str, state: str) -> str:
        return f"{self.tag}:terminal:{state}:{name}"

    def byname(self, name: str) -> str:
        return f"{self.tag}:byname:{name}"

    def byqueue(self, queue: str) -> str:
        return f"{self.tag}:byqueue:{queue}"

    def index_ready(self, kind: str) -> str:
        return f"{self.tag}:index:{kind}:ready"

    def dedupe(self, name: str, key: str) -> str:
        return f"{self.tag}:dedupe:{name}{NUL}{key}"

    def stats(self, state: str) -> str:
        return f"{self.tag}:stats:{state}"

    def job_metrics_minute(self, minute: int, name: str) -> str:
        """Run aggregates of job ``name`` in one minute (``ms // 60000``)."""
        return f"{self.tag}:jobmetrics:m:{minute}:{name}"

    def job_metrics_hour(self, hour: int, name: str) -> str:
        """Run aggregates of job ``name`` in one clock hour (``ms // 3600000``)."""
        return f"{self.tag}:jobmetrics:h:{hour}:{name}"

    def flowchild(self, flow_id: str, child_key: str) -> str:
        return f"{self.tag}:flowchild:{flow_id}{NUL}{child_key}"

    def flowchildren(self, flow_id: str) -> str:
        return f"{self.tag}:flowchildren:{flow_id}"

    def errors(self) -> str:
        return f"{self.tag}:errors"

    def error(self, group: str) -> str:
        return f"{self.tag}:error:{group}"

    def error_jobs(self, group: str) -> str:
        return f"{self.tag}:error:{group}:jobs"

    def schedule(self, key: str) -> str:
        return f"{self.tag}:schedule:{key}"
