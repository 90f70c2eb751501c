"""The app's templates find ``{% partialdef %}`` on every supported Django.

Django 6 has template partials built in; on 5.2 the ``django-template-partials`` package
provides them (its app wraps the loaders so ``"page.html#name"`` finds a partial).  The
templates load the app's ``mqadmin_partials`` library, which picks the right one; a Django
6 project that still has the package (and its loader) must render them the same.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import django
import pytest
from django.template.backends.django import DjangoTemplates

from mqadmin.templatetags import mqadmin_partials

APP_LOADERS = ["django.template.loaders.app_directories.Loader"]
# What the template_partials app's ready() makes of APP_DIRS.
PACKAGE_LOADERS = [
    ("template_partials.loader.Loader", [("django.template.loaders.cached.Loader", APP_LOADERS)])
]
HAS_PACKAGE = importlib.util.find_spec("template_partials") is not None

CONTEXT = {"status": 404, "title": "No such store", "problems": ["nothing named x"]}


def engine(loaders: list[Any]) -> DjangoTemplates:
    return DjangoTemplates(
        {"NAME": "t", "DIRS": [], "APP_DIRS": False, "OPTIONS": {"loaders": loaders}}
    )


def test_the_library_lends_the_package_tags_only_before_django_6() -> None:
    if django.VERSION >= (6, 0):
        assert mqadmin_partials.BUILTIN_PARTIALS
        assert mqadmin_partials.register.tags == {}  # Django's own tags serve
    else:
        assert set(mqadmin_partials.register.tags) == {"partialdef", "partial"}


@pytest.mark.parametrize(
    "loaders",
    [
        pytest.param(
            APP_LOADERS,
            marks=pytest.mark.skipif(
                django.VERSION < (6, 0), reason="Django 5.2 finds '#name' through the package"
            ),
            id="django-6-built-in",
        ),
        pytest.param(
            PACKAGE_LOADERS,
            marks=pytest.mark.skipif(not HAS_PACKAGE, reason="django-template-partials absent"),
            id="package-loader",
        ),
    ],
)
def test_a_partial_and_its_page_render(loaders: list[Any]) -> None:
    templates = engine(loaders)
    fragment = templates.get_template("mqadmin/error.html#error").render(CONTEXT)
    assert 'id="error"' in fragment and "nothing named x" in fragment
    assert "<html" not in fragment
    # A page that renders its partial inline, whole.
    page = templates.get_template("mqadmin/error.html").template
    assert "error" in page.extra_data["partials"]
