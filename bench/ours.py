"""Our store's driver: `enqueue()` loop, `enqueue_many()` 1000/call, and a claim+ack loop.

Run with the project's interpreter and the repo on the path (throughput.py does this):
    python -m bench.ours --redis-url URL --n N --mode enqueue-single|enqueue-bulk|process
    python -m bench.ours --check     # exit 0 if `store` is importable, 3 with the reason if not

"process" here is NOT a worker: it is one client calling `claim()` then `ack(Complete)` in a
sequential loop over N pre-enqueued jobs (the table calls it "claim+ack loop"). A worker
runtime comes later and will get its own row.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench.common import (
    BULK_SIZE,
    EXIT_NOT_IMPORTABLE,
    Timer,
    chunks,
    emit,
    fail,
    parse_args,
    payload,
    quiet_logging,
)

QUEUE = "default"
NAME = "noop"
LOCK_MS = 30_000
WORKER = "w1"
MIN_RATE = 100  # jobs/s below which the claim+ack loop is considered stuck


def import_store() -> Any:
    """Import `store` or stop with a message that says what is missing."""
    try:
        import store
    except Exception as exc:  # any import-time failure means "not ready"
        fail(
            f"ours: the project's `store` package is not importable yet "
            f"({type(exc).__name__}: {exc}).\n"
            "ours: run throughput.py with --skip-ours for a peers-only run, "
            "or finish store/ first.",
            EXIT_NOT_IMPORTABLE,
        )
    missing = [
        n
        for n in ("connect", "RedisJobStore", "EnqueueRequest", "Complete", "Claimed")
        if not hasattr(store, n)
    ]
    if missing:
        fail(
            f"ours: `store` lacks {', '.join(missing)}; run with --skip-ours until it has them.",
            EXIT_NOT_IMPORTABLE,
        )
    return store


def main(argv: list[str]) -> None:
    if argv[:1] == ["--check"]:
        import_store()
        print("ours: store is importable")
        return
    args = parse_args("ours", argv)
    quiet_logging()
    store = import_store()
    client = store.connect(args.redis_url)
    jobs = store.RedisJobStore(client, prefix=args.prefix)
    request = store.EnqueueRequest
    timer = Timer(args)
    n = args.n

    def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            jobs.enqueue_many([request(name=NAME, queue=QUEUE, payload=payload(i)) for i in part])

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            jobs.enqueue(request(name=NAME, queue=QUEUE, payload=payload(i)))
        timer.stop()
        variant, api = "single", "jobs.enqueue(EnqueueRequest(...)) loop"
    elif args.mode == "enqueue-bulk":
        timer.start()
        enqueue_bulk()
        timer.stop()
        variant, api = (
            "enqueue_many",
            f"jobs.enqueue_many([...]), {BULK_SIZE}/call (500/script inside)",
        )
    else:
        enqueue_bulk()
        claimed_class, complete = store.Claimed, store.Complete
        names = [NAME]
        done = 0
        # A broken store can make each claim block for seconds; give up instead of hanging.
        budget_s = max(30.0, n / MIN_RATE)
        deadline = time.perf_counter() + budget_s
        res: Any = None
        timer.start()
        while done < n:
            token = f"{WORKER}:{done + 1}"
            res = jobs.claim(queue=QUEUE, names=names, token=token, lock_duration_ms=LOCK_MS)
            if not isinstance(res, claimed_class):
                break
            jobs.ack(res.job.id, token, complete(None))
            done += 1
            if time.perf_counter() > deadline:
                break
        timer.stop()
        if done != n:
            if not isinstance(res, claimed_class):
                fail(f"ours: claim returned {type(res).__name__} after {done} of {n} jobs")
            fail(
                f"ours: claim+ack loop did only {done} of {n} jobs in {timer.seconds:.1f} s "
                f"(< {MIN_RATE} jobs/s); aborted: is claim() blocking?"
            )
        variant, api = (
            "claim+ack loop",
            "claim() + ack(Complete(None)), one client, sequential (not a worker)",
        )
    jobs.close()
    emit("ours", args, timer, variant=variant, api=api, version="working tree")


if __name__ == "__main__":
    main(sys.argv[1:])
