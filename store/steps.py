"""Store operations written once, run by the sync store and by the asyncio store.

An operation that talks to Redis is a generator of *steps* (sans-I/O): it yields what
to ask Redis, receives each step's reply (or has the step's exception thrown in at the
``yield``), and returns the operation's result.  ``RedisJobStore`` drives the generators
with blocking calls (:func:`drive`), ``store.aio.AsyncRedisJobStore`` awaits the very same
steps (:func:`adrive`): argument building, reply parsing, id draws, owed work and error
mapping exist once, and the async store only does the awaiting.

Steps are plain tuples (they sit on every operation's hot path):

* ``(RUN, script, args)`` -- one store script (``store._run``: errors mapped, owed work done);
* ``(CMD, operation, command, args, kwargs)`` -- one client command; with an ``operation``
  its Redis errors reach the operation as ``JobStoreError`` (``redis_errors``), with None
  as the raw redis-py exception (the script registry reads those);
* ``(PIPE, operation, calls)`` -- one non-transactional pipeline of ``(command, args)``;
* ``(WAKE, queue)`` -- wake this process's claimers of ``queue`` (the scripts publish the
  wake for every other process);
* ``(SLEEP, seconds)`` -- pause (``time.sleep`` / ``asyncio.sleep``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar

from store.errors import redis_errors

T = TypeVar("T")

RUN = "run"
CMD = "cmd"
PIPE = "pipe"
WAKE = "wake"
SLEEP = "sleep"

Step = tuple[Any, ...]
#: An operation: yields steps, is sent their replies, returns its result.
Steps = Generator[Step, Any, T]


def run(script: str, *args: Any) -> Step:
    return (RUN, script, args)


def cmd(operation: str | None, command: str, *args: Any, **kwargs: Any) -> Step:
    return (CMD, operation, command, args, kwargs)


def pipe(operation: str, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> Step:
    return (PIPE, operation, calls)


def wake(queue: str) -> Step:
    return (WAKE, queue)


def sleep(seconds: float) -> Step:
    return (SLEEP, seconds)


def drive(steps: Steps[T], do: Callable[[Step], Any]) -> T:
    """Run ``steps`` to completion with the blocking ``do(step) -> reply``."""
    value: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = steps.send(value) if failure is None else steps.throw(failure)
        except StopIteration as done:
            return done.value
        failure = None
        try:
            value = do(step)
        except Exception as exc:  # handed to the operation, which may handle it
            value, failure = None, exc


async def adrive(steps: Steps[T], do: Callable[[Step], Awaitable[Any]]) -> T:
    """Run ``steps`` to completion with the awaitable ``do(step) -> reply``."""
    value: Any = None
    failure: Exception | None = None
    while True:
        try:
            step = steps.send(value) if failure is None else steps.throw(failure)
        except StopIteration as done:
            return done.value
        failure = None
        try:
            value = await do(step)
        except Exception as exc:
            value, failure = None, exc


def client_step(client: Any, step: Step) -> Any:
    """A CMD, PIPE or SLEEP step on a blocking redis-py client."""
    if step[0] == SLEEP:
        time.sleep(step[1])
        return None
    if step[1] is None:
        return _issue(client, step)
    with redis_errors(step[1]):
        return _issue(client, step)


async def aclient_step(client: Any, step: Step) -> Any:
    """A CMD, PIPE or SLEEP step on a ``redis.asyncio`` client."""
    if step[0] == SLEEP:
        await asyncio.sleep(step[1])
        return None
    if step[1] is None:
        return await _issue(client, step)
    with redis_errors(step[1]):
        return await _issue(client, step)


def _issue(client: Any, step: Step) -> Any:
    """Send a CMD or PIPE step: the reply from a blocking client, an awaitable of it from
    an asyncio one."""
    if step[0] == CMD:
        return getattr(client, step[2])(*step[3], **step[4])
    if step[0] == PIPE:
        pipeline = client.pipeline(transaction=False)
        for command, args in step[2]:
            getattr(pipeline, command)(*args)
        return pipeline.execute()
    raise TypeError(f"a client cannot run the step {step[0]!r}")


def on_client(client: Any, steps: Steps[T]) -> T:
    """Run steps made of CMD and PIPE steps alone on a blocking client."""
    return drive(steps, lambda step: client_step(client, step))


async def aon_client(client: Any, steps: Steps[T]) -> T:
    """Run steps made of CMD and PIPE steps alone on an asyncio client."""
    return await adrive(steps, lambda step: aclient_step(client, step))
