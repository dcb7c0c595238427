"""A host app whose extensions record every tether hook, under ``/t``; one extension fails in
every hook it has (containment). ``GET /events?until=S`` answers once an event containing S is
recorded (a wait on an event, not a poll); ``/direct/{name}`` edits through a server-side
direct connection. Run by tests/test_hooks.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from pycrdt import Doc, Text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from tether import AuthError, AuthRequest, ConnectionInfo, Grant, Settings, TetherServer
from tether.protocol.wire.sync_payloads import AwarenessEntry

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--secret", required=True)
# tether serve's own websockets protocol (collab.transport.ws_protocol), which drops the scope's
# headers after the accept: hooks must still see them.
parser.add_argument("--slim-ws", action="store_true")
args = parser.parse_args()

TEMPLATE = "# Template\n"


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.changed = asyncio.Event()

    def record(self, event: str) -> None:
        self.events.append(event)
        self.changed.set()

    async def until(self, needle: str, timeout: float) -> bool:
        async with asyncio.timeout(timeout):
            while not any(needle in event for event in self.events):
                self.changed.clear()
                await self.changed.wait()
        return True

    async def on_connect(self, connection: ConnectionInfo) -> None:
        connection.context["user"] = connection.headers.get("x-user", "-")
        self.record(f"connect {connection.endpoint} user={connection.context['user']}")
        if connection.headers.get("x-banned"):
            raise AuthError("banned by the host")

    async def on_disconnect(self, connection: ConnectionInfo) -> None:
        self.record(f"disconnect {connection.endpoint} user={connection.context.get('user')}")


class HostDatabase:
    """The host's own users: 'db:<name>' tokens, checked asynchronously as a database would."""

    async def on_authenticate(self, request: AuthRequest) -> Grant | None:
        await asyncio.sleep(0)  # stands for the host's database round trip
        user = request.connection.context.get("user") if request.connection else None
        endpoint = request.connection.endpoint if request.connection else "-"
        header = request.connection.headers.get("x-user") if request.connection else None
        recorder.record(f"authenticate {request.document} {endpoint} user={user} header={header}")
        if not request.token.startswith("db:"):
            return None  # not ours: tether's own JWT check decides
        name = request.token[3:]
        if name == "boom":
            raise RuntimeError("the host's database is down")
        if name == "nobody":
            raise AuthError("no such user in the host's database")
        scope = "readonly" if name == "reader" else "read-write"
        return Grant(name, name.title(), ("hooks/**",), scope, None)


class Events:
    async def on_load(self, room: Any) -> None:
        recorder.record(f"load {room.name}")
        text = room.doc.get("content", type=Text)
        if room.name.startswith("hooks/template") and not str(text):
            await room.edit(lambda doc: doc.get("content", type=Text).insert(0, TEMPLATE), "tpl")

    def on_change(self, room: Any, update: bytes, origin: object) -> None:
        kind = "editor" if hasattr(origin, "peer_id") else str(origin)
        recorder.record(f"change {room.name} origin={kind}")

    def on_store(self, room: Any, update: bytes) -> None:
        recorder.record(f"store {room.name}")

    async def after_store(self, room: Any, update: bytes) -> None:
        recorder.record(f"after_store {room.name}")

    async def on_stateless(self, room: Any, peer: Any, payload: str) -> None:
        recorder.record(f"stateless {room.name} {payload}")

    async def on_unload(self, room: Any) -> None:
        recorder.record(f"unload {room.name} text={str(room.doc.get('content', type=Text))!r}")

    def on_presence(self, room: Any, body: bytes) -> None:
        recorder.record(f"presence {room.name}")

    def remote_presence(self, room: Any) -> list[AwarenessEntry]:
        return [AwarenessEntry(900, 1, '{"name":"elsewhere"}')]  # e.g. another node's editor

    async def before_read(self, room: Any) -> None:
        recorder.record(f"before_read {room.name}")

    def on_deleted(self, name: str) -> None:
        recorder.record(f"deleted {name}")


class Broken:
    """Fails in every hook: tether must log it and go on (later extensions still run)."""

    async def on_load(self, room: Any) -> None:
        raise RuntimeError("broken on_load")

    def on_change(self, room: Any, update: bytes, origin: object) -> None:
        raise RuntimeError("broken on_change")

    def on_store(self, room: Any, update: bytes) -> None:
        raise RuntimeError("broken on_store")

    async def after_store(self, room: Any, update: bytes) -> None:
        raise RuntimeError("broken after_store")

    async def on_stateless(self, room: Any, peer: Any, payload: str) -> None:
        raise RuntimeError("broken on_stateless")

    def on_detach(self, room: Any, peer: Any) -> None:
        raise RuntimeError("broken on_detach")

    async def on_disconnect(self, connection: ConnectionInfo) -> None:
        raise RuntimeError("broken on_disconnect")

    async def on_unload(self, room: Any) -> None:
        raise RuntimeError("broken on_unload")

    def on_presence(self, room: Any, body: bytes) -> None:
        raise RuntimeError("broken on_presence")

    def remote_presence(self, room: Any) -> list[AwarenessEntry]:
        raise RuntimeError("broken remote_presence")

    async def before_read(self, room: Any) -> None:
        raise RuntimeError("broken before_read")

    def on_deleted(self, name: str) -> None:
        raise RuntimeError("broken on_deleted")


recorder = Recorder()
settings = Settings(
    auth="jwt", jwt_secret=args.secret, ai_provider="none", data_dir=args.data_dir,
    unload_grace=0.2,
)  # fmt: skip
collab = TetherServer(
    settings,
    extensions=[Broken(), recorder, Events()],
    authenticate=HostDatabase().on_authenticate,
)


async def events(request: Request) -> JSONResponse:
    needle = request.query_params.get("until", "")
    try:
        await recorder.until(needle, float(request.query_params.get("timeout", "10")))
    except TimeoutError:
        return JSONResponse({"events": recorder.events}, status_code=408)
    return JSONResponse({"events": recorder.events})


async def direct(request: Request) -> JSONResponse:
    name = request.path_params["name"]
    async with collab.open_document(name, origin="host-app") as document:
        if request.method == "POST":
            body = await request.json()
            await document.append(body["append"])  # returns once durable
            if "fail_after" in body:

                def half_done(doc: Doc) -> None:
                    doc.get("content", type=Text).insert(0, body["fail_after"])
                    raise ValueError("the host's change failed halfway")

                with contextlib.suppress(ValueError):
                    await document.edit(half_done)
        return JSONResponse({"text": document.read(), "origin": str(document.origin)})


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with collab:
        yield


app = Starlette(
    routes=[
        Route("/events", events),
        Route("/direct/{name:path}", direct, methods=["GET", "POST"]),
        Mount("/t", app=collab),
    ],
    lifespan=lifespan,
)
if args.slim_ws:
    from tether.collab.transport.ws_protocol import SlimWebSocketsProtocol

    uvicorn.run(app, host="127.0.0.1", port=args.port, ws=SlimWebSocketsProtocol)
else:
    uvicorn.run(app, host="127.0.0.1", port=args.port)
