"""PROTOCOL.md's byte examples are checked against the real encoders and decoders.

Every ``example:`` line inside a ```wire block is encoded from its arguments and compared with
its bytes, and its bytes are decoded and compared with its arguments, so the document cannot
drift from the code. The state table and the close codes are compared with their sources too.

AI examples (``ai.…``) are whole Stateless frames: the message is encoded with its
``protocol/wire/ai_messages.py`` class and wrapped in ``protocol.wire.messages.Stateless``;
decoding reads the frame and then the JSON with ``decode_client_message`` /
``decode_server_message``. The comment line right above each one shows its JSON payload, and is
checked to be exactly that payload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tether.protocol.wire import ai_messages as ai
from tether.protocol.wire import messages as m
from tether.protocol.wire import yws_frames as yws
from tether.protocol.wire.lib0 import (
    Decoder,
    write_var_int,
    write_var_string,
    write_var_uint,
    write_var_uint8_array,
)
from tether.protocol.wire.sync_payloads import (
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
    read_sync_message,
)

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_MD = ROOT / "protocol" / "PROTOCOL.md"
SESSION_PY = ROOT / "protocol" / "sessions" / "server_session.py"
CLOSE_CODES_PY = ROOT / "collab" / "connection" / "close_codes.py"
AI_ERRORS_PY = ROOT / "ai" / "errors.py"


# ---- the example format ----------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    line_no: int
    kind: str
    args: dict[str, Any]
    data: bytes
    # The comment line right above the example when it is a JSON object (``# {...}``).
    shown_json: str | None = None

    def __str__(self) -> str:
        return f"PROTOCOL.md:{self.line_no} {self.kind}"


_JSON = json.JSONDecoder()
_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)=")
_HEX_VALUE = re.compile(r"0x([0-9a-fA-F]*)")


def parse_args(text: str) -> dict[str, Any]:
    """``key=value ...`` where a value is JSON or ``0x``-prefixed hex (bytes)."""
    args: dict[str, Any] = {}
    pos = 0
    while text[pos:].strip():
        key = _KEY.match(text, pos)
        if key is None:
            raise ValueError(f"expected key= at {text[pos:]!r}")
        pos = key.end()
        hex_value = _HEX_VALUE.match(text, pos)
        if hex_value is not None:
            value: Any = bytes.fromhex(hex_value.group(1))
            pos = hex_value.end()
        else:
            value, pos = _JSON.raw_decode(text, pos)
        if key.group(1) in args:
            raise ValueError(f"duplicate key {key.group(1)}")
        args[key.group(1)] = value
    return args


def parse_examples(markdown: str) -> list[Example]:
    examples = []
    in_wire = False
    shown_json: str | None = None
    for line_no, line in enumerate(markdown.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_wire = not in_wire and stripped == "```wire"
            shown_json = None
            continue
        if not in_wire or not stripped:
            continue
        if stripped.startswith("#"):
            comment = stripped[1:].strip()
            shown_json = comment if comment.startswith("{") else None
            continue
        match = re.fullmatch(r"example:\s+(\S+)(.*?)\s+=>\s+([0-9a-f ]+)", stripped)
        if match is None:
            raise ValueError(f"PROTOCOL.md:{line_no}: not an example line: {stripped!r}")
        kind, args, hex_bytes = match.groups()
        data = bytes.fromhex(hex_bytes)
        examples.append(Example(line_no, kind, parse_args(args), data, shown_json))
        shown_json = None
    return examples


# ---- what each kind of example means -----------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    build: Callable[[dict[str, Any]], Any]
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def _read_whole(read: Callable[[Decoder], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        decoder = Decoder(data)
        value = read(decoder)
        assert decoder.at_end(), "bytes left over after the value"
        return value

    return decode


def _entries(args: dict[str, Any]) -> list[AwarenessEntry]:
    return [AwarenessEntry(*entry) for entry in args.pop("entries")]


def _awareness_payload(args: dict[str, Any]) -> bytes:
    return encode_awareness(_entries(args)) if "entries" in args else args.pop("update")


def _encode(value: Any) -> bytes:
    return value.encode()


def _mux(build: Callable[[dict[str, Any]], Any]) -> Kind:
    return Kind(build, _encode, m.decode_frame)


def _yws(build: Callable[[dict[str, Any]], Any]) -> Kind:
    return Kind(build, _encode, yws.decode_yws_frame)


def _sync(build: Callable[[dict[str, Any]], Any]) -> Kind:
    return Kind(build, _encode, _read_whole(read_sync_message))


@dataclass(frozen=True)
class AiFrame:
    """An AI message in a Stateless frame of ``channel``."""

    channel: str
    message: Any


def _stateless_payload(data: bytes) -> tuple[str, str]:
    frame = m.decode_frame(data)
    assert isinstance(frame, m.Stateless), frame
    return frame.channel, frame.payload


def _ai(build: Callable[[dict[str, Any]], Any], decode_json: Callable[[str], Any]) -> Kind:
    def build_frame(args: dict[str, Any]) -> AiFrame:
        return AiFrame(args.pop("channel"), build(args))

    def encode(frame: AiFrame) -> bytes:
        return m.Stateless(frame.channel, frame.message.encode()).encode()

    def decode(data: bytes) -> AiFrame:
        channel, payload = _stateless_payload(data)
        return AiFrame(channel, decode_json(payload))

    return Kind(build_frame, encode, decode)


def _ai_client(build: Callable[[dict[str, Any]], Any]) -> Kind:
    return _ai(build, ai.decode_client_message)


def _ai_server(build: Callable[[dict[str, Any]], Any]) -> Kind:
    return _ai(build, ai.decode_server_message)


def _suggest(a: dict[str, Any]) -> ai.Suggest:
    return ai.Suggest(
        id=a.pop("id"),
        kind=a.pop("kind"),
        pos=a.pop("pos", None),
        start=a.pop("from", None),
        end=a.pop("to", None),
        anchor=a.pop("anchor", None),
        max_tokens=a.pop("max_tokens", None),
        anchor_end=a.pop("anchor_end", None),
        path=tuple(a.pop("path")) if "path" in a else None,
    )


KINDS: dict[str, Kind] = {
    "varUint": Kind(lambda a: a.pop("value"), write_var_uint, _read_whole(Decoder.read_var_uint)),
    "varInt": Kind(lambda a: a.pop("value"), write_var_int, _read_whole(Decoder.read_var_int)),
    "varString": Kind(
        lambda a: a.pop("value"), write_var_string, _read_whole(Decoder.read_var_string)
    ),
    "varUint8Array": Kind(
        lambda a: a.pop("value"), write_var_uint8_array, _read_whole(Decoder.read_var_uint8_array)
    ),
    "syncStep1": _sync(lambda a: SyncStep1(a.pop("sv"))),
    "syncStep2": _sync(lambda a: SyncStep2(a.pop("update"))),
    "syncUpdate": _sync(lambda a: SyncUpdate(a.pop("update"))),
    "awarenessUpdate": Kind(_entries, encode_awareness, decode_awareness),
    "mux.syncStep1": _mux(lambda a: m.Sync(a.pop("channel"), SyncStep1(a.pop("sv")))),
    "mux.syncStep2": _mux(lambda a: m.Sync(a.pop("channel"), SyncStep2(a.pop("update")))),
    "mux.update": _mux(lambda a: m.Sync(a.pop("channel"), SyncUpdate(a.pop("update")))),
    "mux.awareness": _mux(lambda a: m.Awareness(a.pop("channel"), _awareness_payload(a))),
    "mux.token": _mux(
        lambda a: m.AuthToken(a.pop("channel"), a.pop("token", None), a.pop("version", None))
    ),
    "mux.permissionDenied": _mux(lambda a: m.PermissionDenied(a.pop("channel"), a.pop("reason"))),
    "mux.authenticated": _mux(lambda a: m.Authenticated(a.pop("channel"), a.pop("scope"))),
    "mux.queryAwareness": _mux(lambda a: m.QueryAwareness(a.pop("channel"))),
    "mux.stateless": _mux(lambda a: m.Stateless(a.pop("channel"), a.pop("payload"))),
    "mux.close": _mux(lambda a: m.Close(a.pop("channel"), a.pop("reason", None))),
    "mux.syncStatus": _mux(lambda a: m.SyncStatus(a.pop("channel"), a.pop("applied"))),
    "mux.ping": _mux(lambda a: m.Ping()),
    "mux.pong": _mux(lambda a: m.Pong()),
    "yws.syncStep1": _yws(lambda a: yws.YSync(SyncStep1(a.pop("sv")))),
    "yws.syncStep2": _yws(lambda a: yws.YSync(SyncStep2(a.pop("update")))),
    "yws.update": _yws(lambda a: yws.YSync(SyncUpdate(a.pop("update")))),
    "yws.awareness": _yws(lambda a: yws.YAwareness(_awareness_payload(a))),
    "yws.permissionDenied": _yws(lambda a: yws.YPermissionDenied(a.pop("reason"))),
    "yws.queryAwareness": _yws(lambda a: yws.YQueryAwareness()),
    "ai.suggest": _ai_client(_suggest),
    "ai.cancel": _ai_client(lambda a: ai.Cancel(a.pop("id"))),
    "ai.suggest.accept": _ai_client(
        lambda a: ai.Accept(a.pop("id"), a.pop("confirm_dropped", False))
    ),
    "ai.suggestion.start": _ai_server(lambda a: ai.SuggestionStart(a.pop("id"), a.pop("source"))),
    "ai.suggestion.delta": _ai_server(lambda a: ai.SuggestionDelta(a.pop("id"), a.pop("text"))),
    "ai.suggestion.end": _ai_server(
        lambda a: ai.SuggestionEnd(
            a.pop("id"),
            a.pop("reason"),
            a.pop("ttft_ms", None),
            a.pop("tokens"),
            tuple(ai.Dropped(**d) for d in a.pop("dropped")) if "dropped" in a else None,
        )
    ),
    "ai.suggestion.error": _ai_server(
        lambda a: ai.SuggestionError(a.pop("id"), a.pop("code"), a.pop("message"))
    ),
    "ai.suggestion.accepted": _ai_server(lambda a: ai.SuggestionAccepted(a.pop("id"))),
    "ai.status": _ai_client(lambda a: ai.WatchStatus(a.pop("id"))),
    "ai.ai.status": _ai_server(
        lambda a: ai.AiStatus(
            a.pop("id"), a.pop("state"), a.pop("reason"), a.pop("model"), a.pop("quant")
        )
    ),
}


def build(example: Example) -> Any:
    kind = KINDS.get(example.kind)
    assert kind is not None, f"{example}: unknown example kind"
    args = dict(example.args)
    value = kind.build(args)
    assert not args, f"{example}: unused arguments {sorted(args)}"
    return value


# ---- the tests -------------------------------------------------------------------------------

MARKDOWN = PROTOCOL_MD.read_text(encoding="utf-8")
EXAMPLES = parse_examples(MARKDOWN)


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_each_example_encodes_to_its_bytes(example):
    value = build(example)
    assert KINDS[example.kind].encode(value).hex(" ") == example.data.hex(" ")


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_each_example_decodes_back_to_its_value(example):
    assert KINDS[example.kind].decode(example.data) == build(example)


def test_every_kind_of_message_has_an_example():
    shown = {example.kind for example in EXAMPLES}
    assert set(KINDS) - shown == set()


def test_the_examples_show_the_variants_that_matter():
    def shown(kind: str, predicate: Callable[[dict[str, Any]], bool]) -> bool:
        return any(e.kind == kind and predicate(e.args) for e in EXAMPLES)

    assert shown("varUint", lambda a: a["value"] >= 128)  # multi-byte
    assert shown("varInt", lambda a: a["value"] < 0)
    assert shown("varString", lambda a: any(ord(c) > 0xFFFF for c in a["value"]))  # emoji
    assert shown("varString", lambda a: any(0x7F < ord(c) <= 0xFFFF for c in a["value"]))
    assert shown("mux.token", lambda a: "version" in a)
    assert shown("mux.token", lambda a: "token" in a and "version" not in a)
    assert shown("mux.token", lambda a: "token" not in a)  # the server's token request
    assert shown("mux.close", lambda a: "reason" in a)
    assert shown("mux.close", lambda a: "reason" not in a)
    assert shown("mux.syncStatus", lambda a: a["applied"] is True)
    assert shown("mux.syncStatus", lambda a: a["applied"] is False)
    assert shown("mux.syncStep1", lambda a: m.CHANNEL_SEPARATOR in a["channel"])
    assert shown("mux.update", lambda a: a["update"] == b"\x00\x00")  # the empty update
    assert shown("yws.awareness", lambda a: a.get("update") == b"\x00")  # the keepalive
    # AI messages: both kinds of suggest, the anchor, emoji (UTF-8 length != characters), a
    # payload long enough for a two-byte length, an error without an id, ends with and without
    # a time to first token.
    assert shown("ai.suggest", lambda a: a["kind"] == "complete" and "max_tokens" in a)
    assert shown("ai.suggest", lambda a: a["kind"] == "complete" and "anchor" in a)
    assert shown("ai.suggest", lambda a: a["kind"] == "rewrite")
    assert shown("ai.suggestion.delta", lambda a: any(ord(c) > 0xFFFF for c in a["text"]))
    assert any(e.kind.startswith("ai.") and e.data[4:6] == b"\x05\x83" for e in EXAMPLES)
    assert shown("ai.suggestion.error", lambda a: a["id"] is None)
    assert shown("ai.suggestion.end", lambda a: "ttft_ms" in a)
    assert shown("ai.suggestion.end", lambda a: "ttft_ms" not in a)
    assert shown("ai.suggestion.end", lambda a: "dropped" in a)  # a rewrite that lost content
    assert shown("ai.suggest.accept", lambda a: a.get("confirm_dropped") is True)


AI_EXAMPLES = [e for e in EXAMPLES if e.kind.startswith("ai.")]


@pytest.mark.parametrize("example", AI_EXAMPLES, ids=str)
def test_each_ai_example_shows_its_exact_json_above_it(example):
    assert example.shown_json is not None, f"{example}: no '# {{...}}' line right above it"
    _, payload = _stateless_payload(example.data)
    assert payload == example.shown_json


def test_the_example_parser_reads_json_and_hex_values():
    args = parse_args(' a=0x0aff b="x y\\u0000" c=[[1, 2, "{}"]] d=null e=0x')
    assert args == {"a": b"\n\xff", "b": "x y\0", "c": [[1, 2, "{}"]], "d": None, "e": b""}


def test_a_malformed_example_line_is_an_error_not_a_silent_skip():
    with pytest.raises(ValueError):
        parse_examples("```wire\nexample: varUint value=1 -> 01\n```\n")


def _table(text: str, first_row: str) -> list[str]:
    """The indented block that starts with ``first_row``, stripped of its indentation."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(first_row))
    indent = len(lines[start]) - len(lines[start].lstrip())
    rows = []
    for line in lines[start:]:
        if not line.strip() or len(line) - len(line.lstrip()) < indent:
            break
        rows.append(line[indent:].rstrip())
    return rows


def test_the_state_table_is_the_one_in_server_session_py():
    header = "state           input"
    source = _table(SESSION_PY.read_text(encoding="utf-8"), header)
    assert len(source) > 10
    assert _table(MARKDOWN, header) == source


@pytest.mark.skipif(not CLOSE_CODES_PY.exists(), reason="collab is not in this tree")
def test_every_close_code_the_server_uses_is_documented():
    source = CLOSE_CODES_PY.read_text(encoding="utf-8")
    codes = re.findall(r"^([A-Z_]+) = (\d{4})\b", source, flags=re.MULTILINE)
    assert codes
    documented = set(re.findall(r"^\| (\d{4}) \|", MARKDOWN, flags=re.MULTILINE))
    assert {code for _, code in codes} - documented == set()


# ---- the AI section: grammar, enumerations and the SSE example against the code --------------


def _section(title: str) -> str:
    start = MARKDOWN.index(f"## {title}")
    end = MARKDOWN.find("\n## ", start + 1)
    return MARKDOWN[start : end if end >= 0 else len(MARKDOWN)]


AI_SECTION = _section("AI messages (Stateless JSON)")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block."""
    blocks: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith("```"):
            if info is None:
                info, body = line[3:].strip(), []
            else:
                blocks.append((info, "\n".join(body) + "\n"))
                info = None
        elif info is not None:
            body.append(line)
    return blocks


def _ai_grammar() -> str:
    """The plain fenced block of the message grammar (the one that defines suggestion.start)."""
    (grammar,) = [
        body for info, body in _fenced_blocks(AI_SECTION) if "suggestion.start    :=" in body
    ]
    return grammar


def _alternatives(name: str) -> list[str]:
    """``name := a | b`` in the grammar block, continuation lines included."""
    grammar = _ai_grammar()
    match = re.search(rf"^{name}\s+:=(.*?)(?=^\S|\Z)", grammar, flags=re.MULTILINE | re.DOTALL)
    assert match is not None, name
    return re.findall(r'"([^"]+)"', match.group(1))


_WIRE_FIELDS: dict[str, set[str]] = {
    "suggest": {
        "type",
        "id",
        "kind",
        "pos",
        "from",
        "to",
        "anchor",
        "anchor_end",
        "path",
        "max_tokens",
    },
    "cancel": {"type", "id"},
    "accept": {"type", "id", "confirm_dropped"},
    "status": {"type", "id"},
    **{
        wire_type: {"type", *cls.__dataclass_fields__}
        for wire_type, cls in ai._SERVER_TYPES.items()
    },
}


def test_the_ai_grammar_names_every_message_and_exactly_its_fields():
    documented: dict[str, set[str]] = {}
    for wire_type, body in re.findall(
        r'\{"type": "([a-z.]+)",(.*?)\}', _ai_grammar(), flags=re.DOTALL
    ):
        documented.setdefault(wire_type, {"type"}).update(re.findall(r'"(\w+)":', body))
    assert documented == _WIRE_FIELDS
    # suggest's fields are the codec's (from/to are start/end in Python)
    renamed = {"start": "from", "end": "to"}
    suggest_fields = {renamed.get(f, f) for f in ai.Suggest.__dataclass_fields__}
    assert _WIRE_FIELDS["suggest"] == {"type", *suggest_fields}


def test_the_ai_grammar_enumerations_are_the_codes():
    assert _alternatives("source") == list(ai.SOURCES)
    assert _alternatives("reason") == list(ai.END_REASONS)
    assert _alternatives("lossKind") == list(ai.DROPPED_KINDS)
    kinds = re.findall(r'"kind": "(\w+)"', _ai_grammar())
    assert kinds == list(ai.KINDS)
    assert f"1..{ai.MAX_ID_LENGTH} code points" in _ai_grammar()
    assert f'"max_tokens": 1..{ai.MAX_TOKENS_LIMIT}' in _ai_grammar()


@pytest.mark.skipif(not AI_ERRORS_PY.exists(), reason="ai is not in this tree")
def test_every_ai_error_code_is_in_the_grammar_and_the_table():
    codes = re.findall(r'^\s+code = "(\w+)"$', AI_ERRORS_PY.read_text(encoding="utf-8"), re.M)
    assert len(codes) >= 7
    assert sorted(_alternatives("code")) == sorted(codes)
    tabled = re.findall(r"^\| `(\w+)` \|", _section("AI messages"), flags=re.MULTILINE)
    assert set(codes) <= set(tabled)


def test_the_sse_example_lines_are_server_messages_as_encoded():
    lines = [line for line in AI_SECTION.splitlines() if line.startswith("data: ")]
    assert len(lines) >= 3
    for line in lines:
        payload = line.removeprefix("data: ")
        assert ai.decode_server_message(payload).encode() == payload


def test_the_ai_placeholder_is_gone():
    assert "will be added here" not in AI_SECTION
