"""A host app that has modules of its own named ``protocol``, ``collab`` and ``ai`` (written
next to this script by tests/test_packaging.py) and uses tether all the same: it serves
tether under uvicorn, a Python client edits, and the host's modules stay the host's."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

import uvicorn

import ai  # the host's own
import collab  # the host's own
import protocol  # the host's own
import tether
from tether import Settings, TetherServer
from tether.client import TetherClient

parser = argparse.ArgumentParser()
parser.add_argument("--data-dir", required=True)
args = parser.parse_args()


async def main() -> None:
    server = TetherServer(Settings(auth="none", ai_provider="none", data_dir=args.data_dir))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    web = uvicorn.Server(uvicorn.Config(server, port=port, log_level="warning"))
    serving = asyncio.ensure_future(web.serve())
    while not web.started:
        await asyncio.sleep(0.01)
    async with TetherClient(f"ws://127.0.0.1:{port}/ws") as client:
        doc = await client.open("own-modules")
        doc.append("synced")
        await doc.wait_acked()
    async with server.open_document("own-modules") as document:
        print("text:", document.read())
    web.should_exit = True
    await serving
    print("host modules:", protocol.OWNER, collab.OWNER, ai.OWNER)
    print("tether from:", tether.__file__)
    print("tether protocol from:", sys.modules["tether.protocol"].__file__)


asyncio.run(main())
