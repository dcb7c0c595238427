"""``POST /api/suggest``: one suggestion over HTTP, streamed back as server-sent events (the
same JSON messages as on the socket). The fallback for clients without WebSockets, and with
``text`` in the body the request-per-suggestion baseline of ``tether bench ai``. The AI side of
it is ``ai.suggest.http_path``; this module only reads the request and checks its token.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pycrdt import Text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tether.protocol.wire.ai_messages import InvalidAiMessage, Suggest, decode_client_message

from ..auth.tokens import Authenticator, AuthError, Grant
from ..config import Settings
from ..connection.server_context import ServerContext, valid_document_name
from ..rooms.direct import TEXT_NAME

GrantOf = Callable[[Request, str | None], Awaitable[Grant | None]]


class SuggestEndpoint:
    """``context`` and ``engine`` are read per request (a server may restart)."""

    def __init__(
        self,
        settings: Settings,
        authenticator: Authenticator,
        grant_of: GrantOf,
        context: Callable[[], ServerContext],
        engine: Callable[[], Any],
    ) -> None:
        self._settings = settings
        self._authenticator = authenticator
        self._grant_of = grant_of
        self._context = context
        self._engine = engine

    def routes(self) -> list[Route]:
        return [Route("/api/suggest", self.suggest, methods=["POST"])]

    async def suggest(self, request: Request) -> Response:
        settings, authenticator = self._settings, self._authenticator
        grant = await self._grant_of(request, None)
        if grant is None:
            return JSONResponse({"error": "missing, invalid or expired token"}, status_code=401)
        rooms = self._context().rooms
        engine = self._engine()
        if engine is None:
            return JSONResponse({"error": "AI suggestions are off on this server"}, status_code=503)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            # A cross-site <form> can POST text/plain without asking; JSON needs a preflight.
            return JSONResponse({"error": "Content-Type must be application/json"}, 415)
        try:
            body = json.loads(await _read_body(request, settings.max_frame_bytes))
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            document = body.get("doc")
            if not isinstance(document, str) or not valid_document_name(document):
                raise ValueError("'doc' must name a document")
            uploaded = body.get("text")
            if uploaded is not None and not isinstance(uploaded, str):
                raise ValueError("'text' must be a string")
            fields = {k: v for k, v in body.items() if k not in ("doc", "text", "baseline")}
            fields.setdefault("id", "http-" + secrets.token_hex(6))
            suggestion = decode_client_message(json.dumps({**fields, "type": "suggest"}))
        except (ValueError, InvalidAiMessage) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if not isinstance(suggestion, Suggest):
            return JSONResponse({"error": "only 'suggest' requests go here"}, status_code=400)
        try:
            authenticator.check(grant, document)
        except AuthError as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        if not grant.writable:  # as on the socket: a reader could never apply a suggestion
            return JSONResponse({"error": "suggestions need read-write scope"}, status_code=403)
        # Whose share of the model this takes: the client's address stands for a connection
        # (each HTTP request is one), the token's subject for the caller behind it.
        owner = ("http", request.client.host if request.client else "")
        subject = None if settings.auth == "none" else "sub:" + grant.subject
        if uploaded is None:
            async with rooms.visit(document) as room:
                text = str(room.doc.get(TEXT_NAME, type=Text))
            session = f"{document}\0http:{grant.subject}"
            cold = bool(body.get("baseline"))
        else:
            text, session, cold = uploaded, "http-baseline", True
        return StreamingResponse(
            _sse(engine, suggestion, text, session, cold, owner, subject),
            media_type="text/event-stream",
        )


async def _read_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ValueError("request body too large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _sse(
    engine: Any,
    suggestion: Suggest,
    text: str,
    session: str,
    cold: bool,
    owner: object,
    subject: str | None,
) -> AsyncIterator[str]:
    """The suggestion's messages as SSE ``data:`` lines; a client that leaves cancels it."""
    from tether.ai.suggest.http_path import stream_http_suggestion

    messages: asyncio.Queue[str | None] = asyncio.Queue()
    task = asyncio.ensure_future(
        stream_http_suggestion(
            engine,
            suggestion,
            text=text,
            session=session,
            cold=cold,
            send=messages.put_nowait,
            owner=owner,
            subject=subject,
        )
    )
    task.add_done_callback(lambda _t: messages.put_nowait(None))
    try:
        while (message := await messages.get()) is not None:
            yield f"data: {message}\n\n"
    finally:
        task.cancel()
