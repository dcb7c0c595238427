"""AI suggestion messages: JSON objects carried in Stateless frames of the document they concern.

Pure codecs; knows nothing of models, documents or sockets. Positions are UTF-16 code units (what
JS counts) or a base64 Yjs relative position (``anchor``); converting them is the server's job.

    client → server: suggest, cancel, accept, status
    server → client: suggestion.start, suggestion.delta, suggestion.end, suggestion.error,
                     suggestion.accepted, ai.status

``status`` subscribes the editor to the AI's state on this document's socket: one ``ai.status``
answers at once (with the request's id), and another comes on every change while the editor
stays on the document. Editors that never ask hear nothing unsolicited.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass
from typing import Any

from ..protocol_errors import ProtocolError

KINDS = ("complete", "rewrite")
# suggestion.end's reason "junk:<kind>": the server's junk filter dropped the suggestion (no
# junk text was sent), and the kind says why (ai/text/junk.py has the rules).
JUNK_PREFIX = "junk:"
JUNK_KINDS = ("empty", "echo", "loop", "language", "chat")
END_REASONS = ("done", "cancelled", "superseded", *(JUNK_PREFIX + k for k in JUNK_KINDS))
SOURCES = ("model", "exact", "typeahead", "semantic", "prefetch")  # suggestion.start
# What a rewrite's suggestion.end says it lost of the selected passage (``dropped``); clients
# must accept kinds not listed here.
DROPPED_KINDS = ("number", "date", "weekday", "name", "negation", "clause")
MAX_ID_LENGTH = 128
MAX_TOKENS_LIMIT = 1024
MAX_PATH_DEPTH = 256  # the nesting a rich document may have is far less (the guard allows 128)
MAX_POSITION = (1 << 31) - 1
# ai.status states: loading the model (or restarting it after a crash), serving, given up
# (a crash loop, a failed self-test: the reason says which), and switched off by configuration.
AI_STATES = ("starting", "ready", "degraded", "off")


class InvalidAiMessage(ProtocolError):
    """A malformed AI request; answered with suggestion.error, never with a close."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Suggest:
    id: str
    kind: str
    pos: int | None = None
    start: int | None = None  # "from" on the wire (a Python keyword)
    end: int | None = None  # "to" on the wire
    anchor: str | None = None  # the cursor, or a rewrite's selection start
    max_tokens: int | None = None
    anchor_end: str | None = None  # a rewrite's selection end, with ``anchor``
    # On a rich document, the text ``pos``/``from``/``to`` count in: child indexes from the
    # fragment to a Y.XmlText (or an empty paragraph).
    path: tuple[int, ...] | None = None

    def encode(self) -> str:
        body: dict[str, Any] = {"type": "suggest", "id": self.id, "kind": self.kind}
        optional = {
            "pos": self.pos,
            "from": self.start,
            "to": self.end,
            "anchor": self.anchor,
            "anchor_end": self.anchor_end,
            "path": list(self.path) if self.path is not None else None,
            "max_tokens": self.max_tokens,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Cancel:
    id: str

    def encode(self) -> str:
        return json.dumps({"type": "cancel", "id": self.id}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Accept:
    id: str
    # A rewrite whose suggestion.end carried ``dropped`` is applied only with this: the editor
    # has shown what it loses.
    confirm_dropped: bool = False

    def encode(self) -> str:
        body: dict[str, Any] = {"type": "accept", "id": self.id}
        if self.confirm_dropped:
            body["confirm_dropped"] = True
        return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class WatchStatus:
    id: str

    def encode(self) -> str:
        return json.dumps({"type": "status", "id": self.id}, separators=(",", ":"))


ClientAiMessage = Suggest | Cancel | Accept | WatchStatus


def _server_encode(kind: str, fields: dict[str, Any]) -> str:
    body = {"type": kind}
    # Optional numbers are left out when unknown; "id" is always there (null if unknown).
    body.update({k: v for k, v in fields.items() if v is not None or k == "id"})
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (an id sent as "\ud800", say) has no UTF-8 form, so the frame could
        # not be written: escape everything instead, as JSON.stringify does for such strings.
        text = json.dumps(body, separators=(",", ":"))
    return text


@dataclass(frozen=True, slots=True)
class SuggestionStart:
    id: str
    source: str  # one of SOURCES

    def encode(self) -> str:
        return _server_encode("suggestion.start", asdict(self))


@dataclass(frozen=True, slots=True)
class SuggestionDelta:
    id: str
    text: str

    def encode(self) -> str:
        return _server_encode("suggestion.delta", asdict(self))


@dataclass(frozen=True, slots=True)
class Dropped:
    """Something a rewrite lost of its passage: a ``kind`` (``DROPPED_KINDS``) and the text the
    passage had ("3 March", "not ship")."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class SuggestionEnd:
    id: str
    reason: str
    ttft_ms: float | None = None
    tokens: int = 0
    # A rewrite's losses (None, never empty: nothing lost, or a completion).
    dropped: tuple[Dropped, ...] | None = None

    def encode(self) -> str:
        fields = asdict(self)
        if not self.dropped:
            fields["dropped"] = None
        return _server_encode("suggestion.end", fields)

    @property
    def junk(self) -> str | None:
        """The junk kind when the server's junk filter ended the suggestion ("junk:echo" gives
        "echo"): nothing junk was sent, and ghost text should show nothing more. Else None."""
        if self.reason.startswith(JUNK_PREFIX):
            return self.reason[len(JUNK_PREFIX) :]
        return None


@dataclass(frozen=True, slots=True)
class SuggestionError:
    id: str | None  # null when the request's id could not be read
    code: str
    message: str

    def encode(self) -> str:
        return _server_encode("suggestion.error", asdict(self))


@dataclass(frozen=True, slots=True)
class SuggestionAccepted:
    """The accepted suggestion's edit is applied, durably stored and broadcast."""

    id: str

    def encode(self) -> str:
        return _server_encode("suggestion.accepted", asdict(self))


@dataclass(frozen=True, slots=True)
class AiStatus:
    """The AI's state for the editor that sent ``status`` (and again on every change)."""

    id: str
    state: str  # one of AI_STATES
    reason: str = ""  # why it is not ready, for people ("the model worker keeps crashing")
    model: str | None = None
    quant: str | None = None

    def encode(self) -> str:
        return _server_encode("ai.status", asdict(self))


ServerAiMessage = (
    SuggestionStart
    | SuggestionDelta
    | SuggestionEnd
    | SuggestionError
    | SuggestionAccepted
    | AiStatus
)


def decode_client_message(payload: str) -> ClientAiMessage:
    """Parse a client's AI request; every failure is InvalidAiMessage (with the id if known)."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise InvalidAiMessage("payload is not JSON") from exc
    if not isinstance(body, dict):
        raise InvalidAiMessage("payload must be a JSON object")
    request_id = body.get("id")
    if not isinstance(request_id, str) or not 0 < len(request_id) <= MAX_ID_LENGTH:
        raise InvalidAiMessage(f"'id' must be a string of 1..{MAX_ID_LENGTH} characters")
    kind = body.get("type")
    if kind == "cancel":
        return Cancel(request_id)
    if kind == "accept":
        confirm = body.get("confirm_dropped")
        if confirm is not None and not isinstance(confirm, bool):
            raise InvalidAiMessage("'confirm_dropped' must be true or false", request_id)
        return Accept(request_id, bool(confirm))
    if kind == "status":
        return WatchStatus(request_id)
    if kind != "suggest":
        shown = repr(kind[:40]) if isinstance(kind, str) else type(kind).__name__
        raise InvalidAiMessage(f"unknown type {shown}", request_id)
    return _decode_suggest(body, request_id)


def _decode_suggest(body: dict[str, Any], request_id: str) -> Suggest:
    kind = body.get("kind", "complete")
    if kind not in KINDS:
        raise InvalidAiMessage(f"'kind' must be one of {', '.join(KINDS)}", request_id)
    pos = _optional_position(body, "pos", request_id)
    start = _optional_position(body, "from", request_id)
    end = _optional_position(body, "to", request_id)
    anchor = body.get("anchor")
    if anchor is not None and not _is_base64(anchor):
        raise InvalidAiMessage("'anchor' must be a non-empty base64 string", request_id)
    anchor_end = body.get("anchor_end")
    if anchor_end is not None and not _is_base64(anchor_end):
        raise InvalidAiMessage("'anchor_end' must be a non-empty base64 string", request_id)
    path = body.get("path")
    if path is not None:
        if (
            not isinstance(path, list)
            or not 0 < len(path) <= MAX_PATH_DEPTH
            or not all(_is_int(step) and 0 <= step <= MAX_POSITION for step in path)
        ):
            raise InvalidAiMessage(
                f"'path' must be a list of 1 to {MAX_PATH_DEPTH} child indexes", request_id
            )
        if anchor is not None:
            raise InvalidAiMessage(
                "send 'path' with 'pos' (or 'from'/'to'), not 'anchor'", request_id
            )
        path = tuple(path)
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (
        not _is_int(max_tokens) or not 0 < max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise InvalidAiMessage(
            f"'max_tokens' must be an integer in 1..{MAX_TOKENS_LIMIT}", request_id
        )
    if kind == "complete" and pos is None and anchor is None:
        raise InvalidAiMessage("'complete' needs 'pos' or 'anchor'", request_id)
    if kind == "rewrite":
        if anchor is not None or anchor_end is not None:
            # The selection as two relative positions (rich documents need them).
            if anchor is None or anchor_end is None:
                raise InvalidAiMessage("'rewrite' needs both 'anchor' and 'anchor_end'", request_id)
        elif start is None or end is None or end < start:
            raise InvalidAiMessage(
                "'rewrite' needs 'from' <= 'to', or 'anchor' and 'anchor_end'", request_id
            )
    elif anchor_end is not None:
        raise InvalidAiMessage("'anchor_end' is for 'rewrite'", request_id)
    return Suggest(request_id, kind, pos, start, end, anchor, max_tokens, anchor_end, path)


def _optional_position(body: dict[str, Any], key: str, request_id: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < 0:
        raise InvalidAiMessage(f"'{key}' must be a non-negative integer", request_id)
    return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_base64(value: object) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):  # bad alphabet or padding; non-ASCII text
        return False
    return True


def decode_server_message(payload: str) -> ServerAiMessage:
    """For clients and tests: parse what the server streams (extra fields are ignored)."""
    try:
        body = json.loads(payload)
        cls = _SERVER_TYPES[body["type"]]
        known = {f: body[f] for f in cls.__dataclass_fields__ if f in body}
        if cls is SuggestionError:
            known.setdefault("id", None)
        if known.get("dropped") is not None:
            known["dropped"] = _dropped_of(known["dropped"])
        message = cls(**known)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InvalidAiMessage("malformed server message") from exc
    if not isinstance(message.id, str) and not (message.id is None and cls is SuggestionError):
        raise InvalidAiMessage("malformed server message: bad 'id'")
    for name, accepts in _SERVER_FIELDS.items():
        value = getattr(message, name, _ABSENT)
        if value is not _ABSENT and not accepts(value):
            raise InvalidAiMessage(f"malformed server message: bad {name!r}")
    return message


def _dropped_of(value: object) -> tuple[Dropped, ...]:
    if not isinstance(value, list) or not all(
        isinstance(item, dict)
        and isinstance(item.get("kind"), str)
        and isinstance(item.get("text"), str)
        for item in value
    ):
        raise InvalidAiMessage("malformed server message: bad 'dropped'")
    return tuple(Dropped(item["kind"], item["text"]) for item in value)


_SERVER_TYPES: dict[str, type[Any]] = {
    "suggestion.start": SuggestionStart,
    "suggestion.delta": SuggestionDelta,
    "suggestion.end": SuggestionEnd,
    "suggestion.error": SuggestionError,
    "suggestion.accepted": SuggestionAccepted,
    "ai.status": AiStatus,
}
_ABSENT = object()
# The types of the server messages' fields other than id (a string; suggestion.error's
# may be null).
_SERVER_FIELDS: dict[str, Any] = {
    "source": lambda v: isinstance(v, str),
    "text": lambda v: isinstance(v, str),
    "reason": lambda v: isinstance(v, str),
    "ttft_ms": lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool)),
    "tokens": lambda v: _is_int(v) and v >= 0,
    "code": lambda v: isinstance(v, str),
    "message": lambda v: isinstance(v, str),
    "state": lambda v: v in AI_STATES,
    "model": lambda v: v is None or isinstance(v, str),
    "quant": lambda v: v is None or isinstance(v, str),
    "dropped": lambda v: v is None or isinstance(v, tuple),
}
