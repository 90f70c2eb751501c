"""``{% partialdef %}`` and ``{% partial %}`` for the app's templates on every supported Django.

Django 6.0 ships template partials: the two tags are built in (no ``{% load %}``) and
``get_template("page.html#name")`` finds a partial by itself.  On Django 5.2 they come
from the ``django-template-partials`` package (``pip install "mqadmin[django52]"``;
its app, ``template_partials`` in INSTALLED_APPS, adds the ``#name`` loader).  The app's
templates load this library instead of the package's ``partials`` library, so the same
templates work on both: on Django 6 it adds nothing (the built-in tags serve, whether or
not the package is installed too), on 5.2 it lends the package's two tags.  When the
package is missing on 5.2 the library stays empty rather than breaking every template
engine of the site: ``manage.py check`` reports it (mqadmin.E004).
"""

from __future__ import annotations

import django
from django import template

register = template.Library()

#: True when Django itself provides ``{% partialdef %}`` and ``{% partial %}``.
BUILTIN_PARTIALS = django.VERSION >= (6, 0)

if not BUILTIN_PARTIALS:  # pragma: no cover - depends on the installed Django
    try:
        from template_partials.templatetags.partials import register as _package
    except ImportError:
        pass
    else:
        for _name in ("partialdef", "partial"):
            register.tags[_name] = _package.tags[_name]
