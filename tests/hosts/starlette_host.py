"""A Starlette host app mounting tether under ``--prefix``; ``--no-start`` leaves tether
unstarted (the mistake the 503 must explain). Run by tests/test_embedding.py."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from tether import Settings, TetherServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--prefix", default="/apps/tether")
parser.add_argument("--no-start", action="store_true")
args = parser.parse_args()

collab = TetherServer(Settings(auth="none", ai_provider="none", data_dir=args.data_dir))


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    if args.no_start:
        yield
        return
    await collab.start()
    try:
        yield
    finally:
        await collab.stop()


async def home(request: object) -> PlainTextResponse:
    return PlainTextResponse("the host's own page")


app = Starlette(routes=[Route("/", home), Mount(args.prefix, app=collab)], lifespan=lifespan)
uvicorn.run(app, host="127.0.0.1", port=args.port)
