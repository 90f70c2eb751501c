"""The raw Redis ceiling for a one-round-trip Lua enqueue, measured from Python.

One registered script (redis-py `register_script`, i.e. EVALSHA with a reload on NOSCRIPT)
doing one HSET of 2 fields + one ZADD per call, the same script peer-bench.md feeds to
redis-benchmark:
    redis.call('HSET', KEYS[1], 'data', ARGV[1], 'state', 'waiting')
    redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1])
Modes: "evalsha" = sequential calls from one client (the ceiling for a single `enqueue()` loop);
"evalsha-pipelined" = the same calls, 1000 per non-transactional pipeline (the ceiling for a
bulk API that sends one script call per job).

    python -m bench.ceiling --redis-url URL --n N --mode evalsha|evalsha-pipelined
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

from bench.common import BULK_SIZE, Timer, chunks, emit, parse_args, payload, quiet_logging

SCRIPT = (
    "redis.call('HSET', KEYS[1], 'data', ARGV[1], 'state', 'waiting') "
    "redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1]) return 1"
)
MODES = ("evalsha", "evalsha-pipelined")


def main(argv: list[str] | None = None) -> None:
    args = parse_args("redis", argv, modes=MODES)
    quiet_logging()
    import redis

    client = redis.Redis.from_url(args.redis_url, decode_responses=True)
    script = client.register_script(SCRIPT)
    client.script_load(SCRIPT)  # outside the timed section: no NOSCRIPT round trip inside it
    queue_key = f"{args.prefix}:ceiling:q"
    timer = Timer(args)
    n = args.n
    if args.mode == "evalsha":
        timer.start()
        for i in range(n):
            script(
                keys=[f"{args.prefix}:ceiling:job:{i}", queue_key], args=[json.dumps(payload(i)), i]
            )
        timer.stop()
        variant, api = (
            "c1",
            "register_script(HSET 2 fields + ZADD), sequential EVALSHA, one client",
        )
    else:
        timer.start()
        for part in chunks(n, BULK_SIZE):
            pipe = client.pipeline(transaction=False)
            for i in part:
                script(
                    keys=[f"{args.prefix}:ceiling:job:{i}", queue_key],
                    args=[json.dumps(payload(i)), i],
                    client=pipe,
                )
            pipe.execute()
        timer.stop()
        variant, api = (
            "pipelined",
            f"same EVALSHA, {BULK_SIZE} per pipeline (transaction=False), one client",
        )
    client.close()
    emit("redis", args, timer, variant=variant, api=api, version=f"redis-py {version('redis')}")


if __name__ == "__main__":
    main(sys.argv[1:])
