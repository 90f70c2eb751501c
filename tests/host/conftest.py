"""The tests of mqadmin inside a host project (``tests/hostproject``).

pytest-django configures one settings module per process, so these tests run in a
pass of their own::

    pytest tests/host --ds=tests.hostproject.settings

(.ci/test-all.sh runs that pass).  In any other run (the main pass uses the
development project's settings) this folder collects nothing.
"""

from __future__ import annotations

import os

HOST_SETTINGS = "tests.hostproject.settings"

if os.environ.get("DJANGO_SETTINGS_MODULE") != HOST_SETTINGS:
    collect_ignore_glob = ["test_*.py"]
