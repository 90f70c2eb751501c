"""The dashboard's queries: what each page shows, computed from store calls.

One module per page family, named like its view module, so a page is
``views/X.py`` ↔ ``queries/X.py`` ↔ its template(s) ↔ ``tests/mqadmin/test_views_X.py``:

* overview: ``home.html`` (every store × queue × state, the throughput chart);
* explorer: ``jobs.html`` (one store's jobs, filtered and cursor-paged);
* job: ``job_detail.html`` (one job, its attempts, lock and dedupe; the lookup box);
* flows: ``flow.html`` (a flow parent, a page of its children, why it waits);
* operations: ``outbox.html``, ``failures.html``, ``workers.html``, ``indexes.html``,
  ``schedules.html`` and ``audit.html`` (the audit log reads the database only);
* queue: ``queue.html`` (one queue's counts, limits and busiest job groups);
* bulk: ``bulk.html`` (a verb on ticked jobs or on a filter's matches);
* metrics: ``job_metrics.html`` (runs, failures and run times per job name).

Views turn a validated form into calls of these modules and hand the results to a
template.  The queries reach the store only through :mod:`mqadmin.services`:
``open_store`` by name, store calls inside ``reaching`` (a store that cannot be
reached becomes :class:`~mqadmin.services.StoreUnavailable`, naming it), and
``for_each_store`` for a page that shows every store.  A query the store cannot
serve is :class:`~mqadmin.queries.explorer.QueryRefused`, with a message an
operator can act on.

Every function makes a bounded number of Redis calls whatever the number of jobs:
one page of a list (limit + one look-ahead, within the scan budget), O(1) counters,
one page of flow rows or outbox entries, sets whose size is the number of queues,
names, schedules or workers.  ``tests/mqadmin/test_dashboard_bounded.py`` measures it.
"""
