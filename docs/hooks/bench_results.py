"""MkDocs hook: the dated benchmark runs of bench/results/ as pages of the site.

Each ``bench/results/<date>-<bench>.md`` becomes the page ``results/<date>-<bench>.md`` (read
from where it lies: nothing is copied into docs/), listed newest first under "Benchmarks" in
the navigation; docs/benchmarks.md links them.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _runs() -> list[Path]:
    return sorted(RESULTS.glob("*.md"), reverse=True)


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def on_config(config):
    runs = [{_title(path): f"results/{path.name}"} for path in _runs()]
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Benchmarks" in entry:
            entry["Benchmarks"] = list(entry["Benchmarks"]) + [{"Dated runs": runs}]
            return config
    raise ValueError('mkdocs.yml: the navigation has no "Benchmarks" section for bench/results/')


def on_files(files, config):
    for path in _runs():
        files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    return files
