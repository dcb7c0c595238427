"""JSON text read into Python values with its nesting bounded and the GIL let go as it goes,
for request bodies read in a worker thread (a ProseMirror document PUT or PATCHed over REST).

Why not ``json.loads``: its C scanner holds the GIL from the first byte to the last, so the
event loop waits for the whole parse (100-340 ms for 3-6 MB bodies on this project's 2-core
machines), and it recurses per level of nesting (a RecursionError, or a deep C stack, rather
than a refusal that names the limit). Here containers are kept on an explicit stack, a value
at a time in Python bytecode (the interpreter switches threads every few milliseconds between
them), and only strings are scanned by the C ``scanstring`` (at hundreds of MB/s). About
3-10 MB/s here: run it in a worker thread. Strict JSON: no NaN or Infinity, no trailing commas.
"""

from __future__ import annotations

import re
from json.decoder import scanstring
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class JsonRefused(Exception):
    """The text is not JSON (``limit`` "malformed") or nests deeper than allowed ("depth")."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit


def load_json(text: str, max_depth: int) -> Any:
    """The value ``text`` holds; objects and arrays nested more than ``max_depth`` deep are
    refused (``JsonRefused``), as is anything that is not one JSON value."""
    stack: list[tuple[dict[str, Any] | list[Any], str | None]] = []
    at = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    end = len(text)
    while True:
        # A value starts at ``at``: a container is opened (its first value is read next) or
        # a scalar is read and then placed into the containers it completes.
        char = text[at : at + 1]
        value: Any
        if char in ("{", "["):
            if len(stack) >= max_depth:
                raise JsonRefused("depth", f"JSON nested deeper than {max_depth} levels")
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            closing = "}" if char == "{" else "]"
            if text[at : at + 1] != closing:
                if char == "{":
                    key, at = _key(text, at)
                    stack.append(({}, key))
                else:
                    stack.append(([], None))
                continue
            value = {} if char == "{" else []
            at += 1
        else:
            value, at = _scalar(text, at)
        while True:
            if not stack:
                at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
                if at != end:
                    raise JsonRefused("malformed", f"extra data after the JSON value at {at}")
                return value
            container, key = stack[-1]
            if key is None:
                container.append(value)  # type: ignore[union-attr]
            else:
                container[key] = value  # type: ignore[index]
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            char = text[at : at + 1]
            if char == ",":
                at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
                if key is not None:
                    key, at = _key(text, at)
                    stack[-1] = (container, key)
                break  # the next value of this container
            if char != ("}" if key is not None else "]"):
                raise JsonRefused("malformed", f"expected ',' or the container's end at {at}")
            at += 1
            value = stack.pop()[0]


def _key(text: str, at: int) -> tuple[str, int]:
    """An object's key and its colon; returns where its value starts."""
    if text[at : at + 1] != '"':
        raise JsonRefused("malformed", f"expected a key in double quotes at {at}")
    key, at = _string(text, at)
    at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
    if text[at : at + 1] != ":":
        raise JsonRefused("malformed", f"expected ':' at {at}")
    return key, _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]


def _scalar(text: str, at: int) -> tuple[Any, int]:
    char = text[at : at + 1]
    if char == '"':
        return _string(text, at)
    number = _NUMBER.match(text, at)
    if number is not None:
        raw = number.group()
        try:
            value: Any = float(raw) if number.group(1) or number.group(2) else int(raw)
        except ValueError as exc:  # an integer of more digits than Python converts
            raise JsonRefused("malformed", f"a number too long at {at}") from exc
        return value, number.end()
    for word, value in _LITERALS.items():
        if text.startswith(word, at):
            return value, at + len(word)
    raise JsonRefused("malformed", f"expected a JSON value at {at}")


def _string(text: str, at: int) -> tuple[str, int]:
    try:
        return scanstring(text, at + 1, True)
    except ValueError as exc:
        raise JsonRefused("malformed", f"a bad string at {at}: {exc}") from None
