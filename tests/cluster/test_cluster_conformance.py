"""The store conformance tests, re-run on ``redis+cluster://`` stores.

Each module below is imported whole; its test functions and module fixtures land in
this module's namespace, where pytest collects them again.  Collected here, they see
the fixtures of ``tests/cluster/conftest.py`` (``redis_client`` is a RedisCluster,
``make_store``/``store`` build stores on it, ``prefix`` is cleaned up on the owning
node), so every operation below runs its Lua on a real Redis Cluster master, where a
key outside the store's slot is refused by the server itself.

Left out: ``test_bad_input`` (argument validation before any Redis call),
``test_roundtrip`` (codec round trips, already covered by every read here),
``test_flow_runtime`` / ``test_flow_crash`` (real workers and child processes: the
cross-store cluster case has its own test in ``test_cluster_flows.py``) and one
index test that opens a standalone byte client on ``redis_url``.
"""

from __future__ import annotations

from tests.flows.test_flow_store import *  # noqa: F403
from tests.flows.test_outbox import *  # noqa: F403
from tests.store.test_ack import *  # noqa: F403
from tests.store.test_admin import *  # noqa: F403
from tests.store.test_claim import *  # noqa: F403
from tests.store.test_counts import *  # noqa: F403
from tests.store.test_dedupe import *  # noqa: F403
from tests.store.test_enqueue import *  # noqa: F403
from tests.store.test_enqueue_many import *  # noqa: F403
from tests.store.test_indexes import *  # noqa: F403
from tests.store.test_keyspace import *  # noqa: F403
from tests.store.test_list import *  # noqa: F403
from tests.store.test_locks import *  # noqa: F403
from tests.store.test_queue_limits import *  # noqa: F403
from tests.store.test_retention import *  # noqa: F403

# Opens ``redis.Redis.from_url(redis_url)``: a standalone client, meaningless on a cluster URL.
del test_a_key_name_that_is_not_utf8_reaches_callers_as_job_store_error  # noqa: F821
# Subscribes with a raw client's pubsub (a cluster client's pubsub needs a node).
del test_an_ack_whose_slot_is_taken_again_in_the_same_call_wakes_nobody  # noqa: F821
