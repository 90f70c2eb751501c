"""Dump the Lua that Redis runs, and compare two dumps up to comments and order.

``store/scripts.py`` joins the helper library (``store/lua/lib/``) in front of every
operation: ``script_text(name)`` is what EVAL runs, ``library()`` the Redis Function
library FUNCTION LOAD gets.  A refactoring of the helpers should leave that text the
same apart from comments, blank lines and the order of definitions where order does
not matter.  This tool shows it::

    python .ci/lua_diff.py dump DIR            # DIR/library.lua, DIR/scripts/<name>.lua
    python .ci/lua_diff.py diff BEFORE AFTER   # normalised unified diff on stdout

``diff`` normalises each file before comparing: comments and blank lines are dropped,
trailing spaces stripped, the library's content-hash name (``mq_<16 hex>``) replaced by
``mq_LIB``, and the top-level statements are put in a canonical order: every top-level
block (a ``local function`` with its body, a ``local`` declaration, an assignment...)
is one unit, and the units are sorted by text (functions by name).  What is left in the
diff is therefore a change of what the code does, or of which definitions exist.
The exit status is 0 when the normalised texts are the same, 1 otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dump(target: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from store import scripts

    (target / "scripts").mkdir(parents=True, exist_ok=True)
    _, code = scripts.library()
    (target / "library.lua").write_text(code, encoding="utf-8")
    for name in scripts.script_names():
        (target / "scripts" / f"{name}.lua").write_text(scripts.script_text(name), encoding="utf-8")


_LONG_BRACKET = re.compile(r"\[(=*)\[")


def strip_comments(text: str) -> str:
    """The text without Lua comments (strings, long strings included, kept as they are)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif c == "[" and (m := _LONG_BRACKET.match(text, i)):
            close = "]" + m.group(1) + "]"
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            out.append(text[i:j])
            i = j
        elif text.startswith("--", i):
            m = _LONG_BRACKET.match(text, i + 2)
            if m:
                j = text.find("]" + m.group(1) + "]", m.end())
                i = n if j < 0 else j + len(m.group(1)) + 2
            else:
                j = text.find("\n", i)
                i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def normalise(text: str) -> list[str]:
    """Comment-free, blank-free lines, top-level blocks in a canonical order."""
    text = re.sub(r"mq_[0-9a-f]{16}", "mq_LIB", text)
    lines = [line.rstrip() for line in strip_comments(text).split("\n")]
    lines = [line for line in lines if line.strip()]
    # A block starts at a line without indentation; the indented lines and the
    # unindented closing ``end``/``}``... that follow belong to it.
    blocks: list[list[str]] = []
    for line in lines:
        closes = re.match(r"(end|until|else|elseif|\}|\))\b", line) is not None
        if blocks and (line[0] in " \t" or closes):
            blocks[-1].append(line)
        else:
            blocks.append([line])

    def key(block: list[str]) -> tuple[int, str]:
        m = re.match(r"(?:local\s+)?function\s+([\w.:]+)", block[0])
        return (0, m.group(1)) if m else (1, "\n".join(block))

    blocks.sort(key=key)
    return [line + "\n" for block in blocks for line in block]


def diff(before: Path, after: Path) -> int:
    files = sorted(
        {p.relative_to(before) for p in before.rglob("*.lua")}
        | {p.relative_to(after) for p in after.rglob("*.lua")}
    )
    changed = 0
    for rel in files:
        a = (before / rel).read_text(encoding="utf-8") if (before / rel).exists() else ""
        b = (after / rel).read_text(encoding="utf-8") if (after / rel).exists() else ""
        lines = list(
            difflib.unified_diff(normalise(a), normalise(b), f"before/{rel}", f"after/{rel}", n=2)
        )
        if lines:
            changed += 1
            sys.stdout.writelines(lines)
    print(f"# {len(files)} files compared, {changed} differ after normalisation")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="write the joined library and every script text to DIR")
    d.add_argument("dir", type=Path)
    c = sub.add_parser("diff", help="compare two dumps up to comments and order")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "dump":
        dump(args.dir)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
