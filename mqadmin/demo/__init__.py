"""The demo's job handlers: part of this repository's development project, not of the app.

Installed by ``mqadmin/settings.py`` (``MQ_DEMO``) so that ``make run`` followed by
``manage.py seed_demo`` shows a system that moves; left out of the wheel
(``pyproject.toml``), so a project that installs ``mqadmin`` never runs them.
"""
