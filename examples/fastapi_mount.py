"""tether inside a FastAPI app: the editor, /ws, /yjs and REST under /collab, started and
stopped by the host's lifespan. Run: python examples/fastapi_mount.py --port 8000
then open http://127.0.0.1:8000/collab/d/notes (tests/test_embedding.py runs this file)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI

from tether import Settings, TetherServer


def build(data_dir: str) -> FastAPI:
    collab = TetherServer(Settings(auth="none", ai_provider="none", data_dir=data_dir))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with collab:  # a mounted app's own lifespan never runs: the host starts it
            yield

    app = FastAPI(lifespan=lifespan)
    app.mount("/collab", collab.asgi)

    @app.get("/hello")
    async def hello() -> dict[str, object]:
        return {"hello": "from the host", "documents_loaded": len(collab.ctx.rooms.rooms)}

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--data-dir", default="./data")
    args = parser.parse_args()
    uvicorn.run(build(args.data_dir), host="127.0.0.1", port=args.port)
