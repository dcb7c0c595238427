"""The embedding API in one file: typed settings, a store, an extension, the host's own auth
callback, and a server-side direct connection, with a Python client editing alongside.
Run: python examples/embedding_api.py (tests/test_embedding.py runs it and checks its output).
"""

from __future__ import annotations

import asyncio
import socket
import tempfile

import uvicorn

from tether import AuthRequest, Grant, Settings, TetherServer
from tether.client import TetherClient
from tether.stores import MemoryStore


async def authenticate(request: AuthRequest) -> Grant | None:
    """The host's own users (a database or session lookup would go here)."""
    if request.token == "demo-token":
        return Grant("demo", "Demo User", ("notes/**",), "read-write", None)
    return None  # tether's built-in check (JWT) decides the rest


class Audit:
    """An extension: sees every change and where it came from."""

    def on_change(self, room: object, update: bytes, origin: object) -> None:
        who = "an editor" if hasattr(origin, "peer_id") else repr(origin)
        print(f"change to {room.name} by {who}")  # type: ignore[attr-defined]


async def main() -> None:
    settings = Settings(
        data_dir=tempfile.mkdtemp(),  # a str is fine
        jwt_secret="a-secret-of-at-least-32-characters!",
        ai_provider="none",
    )
    server = TetherServer(
        settings, store=MemoryStore(), extensions=[Audit()], authenticate=authenticate
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server, port=port, log_level="warning"))
    serving = asyncio.ensure_future(web.serve())  # its lifespan starts and stops tether
    while not web.started:
        await asyncio.sleep(0.01)

    async with TetherClient(f"ws://127.0.0.1:{port}/ws", token="demo-token") as client:
        editor = await client.open("notes/today")
        editor.append("Typed in an editor. ")
        await editor.wait_acked()
        async with server.open_document("notes/today", origin="host-app") as document:
            await document.append("Added by the host.")  # durable when it returns
            print("host reads:", await document.export("text"))  # rendered off the loop
        print("editor sees:", await editor.wait_text(lambda t: t.endswith("host.")))

    web.should_exit = True
    await serving


if __name__ == "__main__":
    asyncio.run(main())
