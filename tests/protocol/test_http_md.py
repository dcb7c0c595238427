"""PROTOCOL.md's HTTP fallback section is checked against the code and a live server.

``http-wire`` blocks: each ``batch:``, ``event:``, ``close:`` and ``heartbeat:`` line is encoded
with ``protocol/wire/http_wire.py`` and compared with its documented bytes or text, and decoded
back. The ``http-exchange`` block is a whole session, replayed request by request against a real
server (``--auth none``: the documented token is not a JWT), comparing statuses, the headers
shown and the bodies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.serverproc import ServerProcess
from tether.protocol.wire.http_wire import (
    HEARTBEAT,
    CloseEvent,
    EventParser,
    FrameEvent,
    decode_batch,
    encode_batch,
    encode_close,
    encode_event,
)

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "protocol" / "PROTOCOL.md"


def blocks(kind: str) -> list[list[tuple[int, str]]]:
    """The lines (numbered) of every fenced block of ``kind``."""
    found: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None
    for line_no, line in enumerate(PROTOCOL_MD.read_text().splitlines(), start=1):
        if line.strip().startswith("```"):
            if current is None and line.strip() == "```" + kind:
                current = []
            elif current is not None:
                found.append(current)
                current = None
            continue
        if current is not None:
            current.append((line_no, line))
    return found


def hex_bytes(text: str) -> bytes:
    """Hex with spaces, where ``xx*n`` is the byte xx n times."""
    out = b""
    for piece in text.split():
        byte, _, times = piece.partition("*")
        out += bytes.fromhex(byte) * (int(times) if times else 1)
    return out


def unescape(text: str) -> bytes:
    return text.replace("\\n", "\n").encode("utf-8")


def wire_lines() -> list[tuple[int, str]]:
    lines = [(n, line.strip()) for block in blocks("http-wire") for n, line in block]
    return [(n, line) for n, line in lines if line and not line.startswith("#")]


def test_the_section_has_examples() -> None:
    kinds = {line.split(":", 1)[0] for _, line in wire_lines()}
    assert kinds == {"batch", "event", "close", "heartbeat"}
    assert len(blocks("http-exchange")) == 1


@pytest.mark.parametrize(("line_no", "line"), wire_lines(), ids=lambda v: str(v)[:12])
def test_a_framing_example(line_no: int, line: str) -> None:
    kind, _, rest = line.partition(":")
    shown, _, wire = rest.partition("=>")
    shown, wire = shown.strip(), wire.strip()
    where = f"PROTOCOL.md:{line_no}"
    if kind == "batch":
        frames = [hex_bytes(f) for f in shown.split("|")] if shown else []
        assert encode_batch(frames) == hex_bytes(wire), where
        assert decode_batch(hex_bytes(wire)) == frames, where
    elif kind == "event":
        args = dict(re.findall(r"(\w+)=(\S+)", shown))
        seq, frame = int(args["seq"]), bytes.fromhex(args["frame"])
        assert encode_event(seq, frame) == unescape(wire), where
        assert EventParser().feed(unescape(wire)) == [FrameEvent(seq, frame)], where
    elif kind == "close":
        match = re.fullmatch(r'code=(\d+) reason=(".*")', shown)
        assert match is not None, where
        code, reason = int(match.group(1)), json.loads(match.group(2))
        assert encode_close(code, reason) == unescape(wire), where
        assert EventParser().feed(unescape(wire)) == [CloseEvent(code, reason)], where
    else:
        assert HEARTBEAT == unescape(wire), where
        assert EventParser().feed(HEARTBEAT) == [], where


# ---- the exchange ----------------------------------------------------------------------------


@dataclass
class Step:
    line_no: int
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    status: int = 0
    answer_headers: dict[str, str] = field(default_factory=dict)
    answer_lines: list[str] = field(default_factory=list)

    @property
    def answer_text(self) -> str:
        return "\n".join(self.answer_lines) + "\n" if self.answer_lines else ""


def exchange() -> list[Step]:
    steps: list[Step] = []
    step: Step | None = None
    in_body = False
    for line_no, raw in blocks("http-exchange")[0]:
        if not raw.strip() or raw.startswith("#"):
            continue
        side, text = raw[0], raw[2:] if len(raw) > 1 else ""
        if side == ">" and (step is None or step.status):
            method, path = text.split(" ", 1)
            step = Step(line_no, method, path)
            steps.append(step)
            in_body = False
        elif step is None:
            raise ValueError(f"PROTOCOL.md:{line_no}: an answer before any request")
        elif side == ">":
            if not text:
                in_body = True
            elif in_body:
                step.body = bytes.fromhex(text.removeprefix("0x"))
            else:
                name, value = text.split(": ", 1)
                step.headers[name] = value
        elif side == "<" and not step.status:
            step.status = int(text)
            in_body = False
        elif side == "<":
            if not text and not in_body:
                in_body = True
            elif in_body:
                step.answer_lines.append(text)
            else:
                name, value = text.split(": ", 1)
                step.answer_headers[name] = value
        else:
            raise ValueError(f"PROTOCOL.md:{line_no}: not an exchange line: {raw!r}")
    return steps


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("http-md"), auth="none") as proc:
        yield proc


def test_the_documented_session_happens_as_documented(open_server: ServerProcess) -> None:
    steps = exchange()
    assert [s.method for s in steps] == ["POST", "POST", "GET", "POST", "GET"]
    values = {"<token>": "t0k3n"}
    with httpx.Client(base_url=open_server.http_url, timeout=10) as http:
        for step in steps:
            where = f"PROTOCOL.md:{step.line_no}"
            headers = {k: _fill(v, values) for k, v in step.headers.items()}
            text = _replay(http, step, headers)
            assert text.status_code == step.status, (where, text.status_code, text.text)
            for name, value in step.answer_headers.items():
                assert text.headers.get(name) == value, (where, name, text.headers)
            if step.path == "/http/session" and step.method == "POST":
                values["<session>"] = text.json()["session"]
            if not step.answer_lines:
                assert text.content == b"", where
            elif text.headers.get("content-type", "").startswith("application/json"):
                assert text.json() == json.loads(_fill(step.answer_text, values)), where
            else:
                assert text.text == step.answer_text, where


def _replay(http: httpx.Client, step: Step, headers: dict[str, str]) -> httpx.Response:
    """One request; a documented poll is repeated (advancing Last-Event-ID) until it has as
    many events as shown: the server may hand them over in more than one poll."""
    reply = http.request(step.method, step.path, headers=headers, content=step.body or None)
    wanted = step.answer_text.count("id: ")
    if "mode=poll" not in step.path or not wanted:
        return reply
    body = reply.text
    while body.count("id: ") < wanted and reply.status_code == 200:
        last = re.findall(r"^id: (\d+)$", body, re.M)[-1]
        reply = http.request(step.method, step.path, headers={**headers, "Last-Event-ID": last})
        body += reply.text
    return httpx.Response(reply.status_code, headers=reply.headers, content=body.encode())


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(key, value)
    return text
