"""Damaged-state tolerance and the consistency checker, re-run on ``redis+cluster://`` stores.

The modules are imported whole (see test_cluster_conformance.py): every script that heals a
dangling member and every mqcheck page (SCAN on the slot's node, ZSCAN/HSCAN by key, the
check_* scripts) runs on a real cluster master, which refuses any key outside the slot.
"""

from __future__ import annotations

from tests.store.test_consistency import *  # noqa: F403
from tests.store.test_damaged_state import *  # noqa: F403
