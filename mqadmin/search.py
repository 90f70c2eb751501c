"""The search box: one line of text turned into the explorer's filters.

Terms (see docs/dashboard.md, "Search"):

- a bare word, or ``id:<text>``: a job id (an exact id opens the job) or an id prefix;
- ``error:<text>``: failures whose error type or message contains the text (case
  insensitive), found in the error groups the fail path keeps (no job is scanned); an
  unquoted ``error:`` takes the words after it up to the next qualifier;
- ``args.<path>:<value>``: the payload holds ``value`` at the dotted ``path`` (object keys
  and 0-based array indexes; an array matches when one of its items does);
- ``meta.<key>:<value>``: the metadata key has that value.

A value with spaces goes in double quotes (``args.customer.name:"Ann Lee"``).  Payload
and metadata terms are residual filters: checked row by row inside the store's budgeted
list script on the structure the other filters choose, so a search is bounded at any
size and offers "continue" where the budget runs out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

#: Longest search text accepted.
MAX_SEARCH = 1000

_TERM = re.compile(
    r'(?P<key>error|id|args\.[^\s:"]+|meta\.[^\s:"]+):(?:"(?P<qv>[^"]*)"|(?P<v>\S*))'
    r'|"(?P<quoted>[^"]*)"'
    r"|(?P<word>\S+)"
)

PAYLOAD_SEARCH_DENIED = (
    "Searching payload or metadata values needs the “view_payload” permission (which jobs "
    "match would tell whether a guessed value is right)."
)


@dataclass(frozen=True)
class Search:
    """A parsed search line."""

    text: str = ""
    #: A job id, or the start of ids (bare words and ``id:``).
    id_text: str = ""
    #: Text to find in error types and messages (``error:``).
    error_text: str = ""
    payload: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.id_text or self.error_text or self.payload or self.metadata)

    def render(self, *, error: bool = True) -> str:
        """The search as text again (``error=False``: without its error term)."""

        def quote(value: str) -> str:
            return f'"{value}"' if not value or any(c.isspace() for c in value) else value

        parts = [quote(self.id_text)] if self.id_text else []
        if error and self.error_text:
            parts.append(f"error:{quote(self.error_text)}")
        parts += [f"args.{path}:{quote(value)}" for path, value in self.payload.items()]
        parts += [f"meta.{key}:{quote(value)}" for key, value in self.metadata.items()]
        return " ".join(parts)

    @property
    def only_id(self) -> bool:
        """Just an id: an exact match opens the job."""
        return bool(self.id_text) and not (self.error_text or self.payload or self.metadata)


def parse_search(text: str) -> Search:
    """Parse ``text``; raises ``ValidationError`` with an operator's message."""
    text = (text or "").strip()
    if not text:
        return Search()
    if len(text) > MAX_SEARCH:
        raise ValidationError(f"The search is longer than {MAX_SEARCH} characters.")
    ids: list[str] = []
    error_words: list[str] = []
    payload: dict[str, str] = {}
    metadata: dict[str, str] = {}
    in_error = False  # words after an unquoted error: belong to it
    for match in _TERM.finditer(text):
        key = match.group("key")
        if key is None:
            word = (
                match.group("quoted") if match.group("quoted") is not None else match.group("word")
            )
            if in_error:
                error_words.append(word)
            else:
                ids.append(word)
            continue
        quoted = match.group("qv") is not None
        value = match.group("qv") if quoted else match.group("v")
        in_error = False
        if key == "error":
            error_words.append(value)
            in_error = not quoted
        elif key == "id":
            ids.append(value)
        elif key.startswith("args."):
            path = key[5:]
            if any(not seg for seg in path.split(".")):
                raise ValidationError(f"“{key}” is not a payload path (no empty segments).")
            payload[path] = value
        else:
            metadata[key[5:]] = value
    error_text = " ".join(w for w in error_words if w).strip()
    if error_words and not error_text:
        raise ValidationError("“error:” needs some text to look for (error:timeout).")
    ids = [i for i in ids if i]
    if len(ids) > 1:
        raise ValidationError(
            "Search for one job id or id prefix at a time (use quotes for an id with spaces), "
            "or qualify the words: error:…, args.<path>:…, meta.<key>:…"
        )
    return Search(
        text=text,
        id_text=ids[0] if ids else "",
        error_text=error_text,
        payload=payload,
        metadata=metadata,
    )


def payload_paths(payloads: list[Any], limit: int = 60, depth: int = 4) -> list[str]:
    """Dotted paths of the scalar values in ``payloads`` (a sample of recent jobs), for
    the search box's suggestions: first arrays' items only, at most ``limit`` paths."""
    seen: dict[str, None] = {}

    def walk(value: Any, path: str, level: int) -> None:
        if len(seen) >= limit:
            return
        if isinstance(value, dict) and level < depth:
            for key, item in value.items():
                key = str(key)
                if "." in key or ":" in key or '"' in key or not key.strip() or key != key.strip():
                    continue  # not reachable by a dotted path term
                walk(item, f"{path}.{key}" if path else key, level + 1)
        elif isinstance(value, list) and level < depth:
            if value and isinstance(value[0], dict | list):
                walk(value[0], f"{path}.0" if path else "0", level + 1)
            elif value and path:
                seen.setdefault(path, None)  # an array of values matches by any item
        elif path and not isinstance(value, dict | list):
            seen.setdefault(path, None)

    for payload in payloads:
        walk(payload, "", 0)
    return list(seen)
