"""The built distributions carry what a site that installs them needs.

The wheel is built from this checkout once per module (``python -m build
--no-isolation``: the ``build`` frontend and the ``hatchling`` backend come with the
``test`` extra, so nothing is downloaded) and its file list is checked against the
tree: every template, static file and Lua script, mapped to where Django and the
store look for them, and none of the development project's own files.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Files of this repository's development project, never shipped in the wheel.
DEV_PROJECT_FILES = (
    "mqadmin/settings.py",
    "mqadmin/site_urls.py",
    "mqadmin/wsgi.py",
    "mqadmin/asgi.py",
    "mqadmin/demo/__init__.py",
    "mqadmin/demo/apps.py",
    "mqadmin/demo/jobs.py",
)


def tree_files(folder: str) -> list[str]:
    """Files under ``folder`` of the checkout, as paths relative to the checkout."""
    base = ROOT / folder
    return sorted(
        str(path.relative_to(ROOT))
        for path in base.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    # sdist first, then the wheel built from the unpacked sdist (what `python -m build`
    # does by default): both artefacts, and the proof that the sdist is complete.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield out


@pytest.fixture(scope="module")
def wheel_names(dist_dir: Path) -> set[str]:
    (wheel,) = dist_dir.glob("mqadmin-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert len(names) == len(set(names)), "a path appears twice in the wheel"
    return set(names)


@pytest.fixture(scope="module")
def sdist_names(dist_dir: Path) -> set[str]:
    (sdist,) = dist_dir.glob("mqadmin-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = archive.getmembers()
    top = members[0].name.split("/")[0]
    return {member.name[len(top) + 1 :] for member in members if member.isfile()}


def test_wheel_carries_every_template_under_the_app_templates_dir(wheel_names: set[str]) -> None:
    templates = tree_files("templates/mqadmin")
    assert "templates/mqadmin/base.html" in templates
    for path in templates:
        assert f"mqadmin/{path}" in wheel_names, path


def test_wheel_carries_every_static_file_under_the_app_static_dir(wheel_names: set[str]) -> None:
    assets = tree_files("static/mqadmin")
    assert {"static/mqadmin/app.js", "static/mqadmin/htmx.min.js"} <= set(assets)
    for path in assets:
        assert f"mqadmin/{path}" in wheel_names, path


def test_wheel_carries_every_lua_script(wheel_names: set[str]) -> None:
    scripts = [path for path in tree_files("store/lua") if path.endswith(".lua")]
    assert len(scripts) > 10
    for path in scripts:
        assert path in wheel_names, path


def test_wheel_carries_the_app_code_migrations_and_commands(wheel_names: set[str]) -> None:
    for path in (
        "mqadmin/__init__.py",
        "mqadmin/apps.py",
        "mqadmin/urls.py",
        "mqadmin/checks.py",
        "mqadmin/migrations/0001_initial.py",
        "mqadmin/management/commands/runworker.py",
        "mqadmin/templatetags/mqadmin_tags.py",
        "store/__init__.py",
    ):
        assert path in wheel_names, path


def test_wheel_leaves_out_the_development_project(wheel_names: set[str]) -> None:
    for path in DEV_PROJECT_FILES:
        assert path not in wheel_names, path
    # The demo's job handlers run in the development project only.
    assert not [name for name in wheel_names if name.startswith("mqadmin/demo/")]
    # The login page of the development project must not shadow a host's
    # registration/login.html through APP_DIRS.
    assert not [name for name in wheel_names if "registration/" in name]
    # Nothing from outside the two packages (tests, bench, the top-level folders as such).
    tops = {name.split("/")[0] for name in wheel_names}
    assert tops == {"mqadmin", "store", "mqadmin-0.1.0.dist-info"}


def test_wheel_metadata_lists_the_runtime_dependencies(dist_dir: Path) -> None:
    (wheel,) = dist_dir.glob("mqadmin-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("mqadmin-0.1.0.dist-info/METADATA").decode().lower()
    for requirement in ("django", "redis", "django-htmx", "django-template-partials"):
        assert f"requires-dist: {requirement}" in metadata, requirement
    # Django 5.2 LTS to 6.1; template partials required only where Django 6 cannot run
    # (Python 3.11), and both 5.2 backports in the django52 extra.
    assert "requires-dist: django<6.2,>=5.2" in metadata
    assert "requires-dist: django-template-partials; python_version < '3.12'" in metadata
    assert "requires-dist: django-template-partials; extra == 'django52'" in metadata
    assert "requires-dist: django-tasks>=0.12; extra == 'django52'" in metadata


def test_sdist_holds_the_source_folders_once(sdist_names: set[str]) -> None:
    for path in tree_files("templates") + tree_files("static"):
        assert path in sdist_names, path
    # The in-tree symlinks are not duplicated as copies.
    assert not [
        name for name in sdist_names if name.startswith(("mqadmin/templates/", "mqadmin/static/"))
    ]
    assert {"pyproject.toml", "README.md", "manage.py", "mqadmin/settings.py"} <= sdist_names
    # The documentation and the deployment files its tests read (tests/commands/test_deploy_files.py,
    # .ci/wheel-project.sh) come with the tests.
    assert {
        "mkdocs.yml",
        "docs/django.md",
        "docs/django-tasks.md",
        "deploy/Procfile",
    } <= sdist_names


def test_the_in_tree_app_folders_are_links_to_the_top_level_folders() -> None:
    # An editable install finds templates and static files through the app's own
    # folders, exactly as an installed wheel does.
    for link, target in (
        ("mqadmin/templates/mqadmin", "templates/mqadmin"),
        ("mqadmin/static/mqadmin", "static/mqadmin"),
    ):
        path = ROOT / link
        assert path.is_symlink(), link
        assert path.resolve() == (ROOT / target).resolve()
