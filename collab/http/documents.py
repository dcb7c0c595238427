"""The document endpoints of the REST API: read and export, import, patch, duplicate, delete, named
versions; shaped after Tiptap Cloud's document API where that makes sense (``?format=json`` is the
ProseMirror tree, ``PATCH`` with ``format=json|binary|base64``, a request rate per address).

``TetherServer.routes()`` mounts ``DocumentsApi.routes()`` (the listing too); each handler checks
the token and the name, then hands the work to the room manager, the store and ``document_edits``.
Readers use ``RoomManager.visit``, so REST never pins a document loaded (issue 10, item 9), and an
unknown name is never loaded at all. Names are checked by the rule /ws applies
(``valid_document_name``). Every request first passes the rate per client address
(``collab.http.rate_limit``): past it, 429 with ``Retry-After``.

"Unknown" (404): not in the store, and not loaded with content (an editor's first edit is in
memory before its append commits). A name an editor has open but never edited is unknown too:
there is nothing to read, export or delete yet.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..auth.tokens import Grant
from ..connection.server_context import MAX_DOCUMENT_NAME, ServerContext, valid_document_name
from ..rooms.document_edits import (
    ImportRefused,
    Placement,
    RestOrigin,
    TreeBody,
    content_of_state,
    import_update,
    set_text,
    set_tree,
)
from ..rooms.import_budget import ImportBusy
from ..rooms.manager import DocumentQuarantined
from ..rooms.renders import Rendered, Renders
from ..rooms.room import Room, RoomClosed
from ..runtime import pools
from ..runtime.pools import PoolFull
from ..storage.store import StorageError, VersionInfo
from .numbers import parse_counter, valid_id
from .rate_limit import RequestRate

log = logging.getLogger("tether.rest")

DELETED_REASON = "document deleted"
# "info" ({name, kind, text, peers}) is what a GET without ?format= answers, as before the
# tree came; "json" is the ProseMirror tree, as Tiptap Cloud answers it.
FORMATS = ("info", "json", "text", "markdown", "html", "yjs")
IMPORTS = (
    "application/octet-stream",
    "application/json",
    "text/html",
    "text/markdown",
    "text/plain",
)
PATCH_FORMATS = ("json", "binary", "base64")
MAX_LABEL_CHARS = 200
LIST_LIMIT = 1000
_EMPTY_STATE = b"\x00"  # the state vector of a document with nothing in it
_MAX_LOGGED = 1024

GrantOf = Callable[[Request, str | None], Awaitable[Grant | None]]


class DocumentsApi:
    """The handlers; ``context`` is read per request (a server may restart)."""

    def __init__(
        self,
        context: Callable[[], ServerContext],
        grant_of: GrantOf,
        renders: Renders | None = None,
    ) -> None:
        self._context = context
        self._grant_of = grant_of
        self._renders = renders  # shared with webhooks by TetherServer; else made on first use
        self._version_lock = asyncio.Lock()  # count check + add, one at a time (rare writes)
        self._duplicate_lock = asyncio.Lock()  # "does the copy's name exist" + the copy
        self._logged: set[tuple[str, str]] = set()  # (address, limit): each logged once
        self._rate: RequestRate | None = None

    def routes(self) -> list[Route]:
        limited = self._limited
        return [
            Route("/api/documents", limited(self.list_documents)),
            Route(
                "/api/versions/{name:path}",
                limited(self.versions),
                methods=["GET", "POST", "DELETE"],
            ),
            Route("/api/restore/{name:path}", limited(self.restore), methods=["POST"]),
            Route("/api/duplicate/{name:path}", limited(self.duplicate), methods=["POST"]),
            Route(
                "/api/documents/{name:path}",
                limited(self.document),
                methods=["GET", "PUT", "POST", "PATCH", "DELETE"],
            ),
        ]

    def _limited(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def limited(request: Request) -> Response:
            refusal = self._rate_refusal(request)
            return refusal if refusal is not None else await handler(request)

        return limited

    def _rate_refusal(self, request: Request) -> Response | None:
        """429 with Retry-After when the client's address has made its requests for now."""
        ctx = self._context()
        settings = ctx.settings
        rate = self._rate
        if rate is None or (rate.limit, rate.window) != (
            settings.rest_rate_limit,
            settings.rest_rate_window,
        ):
            rate = self._rate = RequestRate(
                settings.rest_rate_limit, settings.rest_rate_window, settings.rest_rate_burst
            )
        address = request.client.host if request.client else "unknown"
        wait = rate.wait(address, time.monotonic())
        if not wait:
            return None
        ctx.metrics.limit_refusals.labels("rest_rate_limit").inc()
        self._log_once(request, "rest_rate_limit", "refused REST requests past the rate")
        reply = _error(
            429,
            f"too many requests from your address: {rate.limit} per {rate.window:g} s"
            f" (rest_rate_limit); try again in {wait} s",
        )
        reply.headers["Retry-After"] = str(wait)
        return reply

    # ---- /api/documents ------------------------------------------------------------------------

    async def list_documents(self, request: Request) -> Response:
        """The stored documents this token may open, a page at a time: ``?limit=`` (at most
        and by default 1000) from ``?after=<name>``; ``next`` is the cursor of the next page
        (null on the last). Only names under the token's patterns' common literal prefix are
        read, and a page reads at most ``limit`` rows, however big the store."""
        grant = await self._grant_of(request, None)
        if grant is None:
            return _error(401, "missing, invalid or expired token")
        raw_limit = request.query_params.get("limit")
        limit = LIST_LIMIT if raw_limit is None else parse_counter(raw_limit)
        if limit is None or not 1 <= limit <= LIST_LIMIT:
            return _error(400, f"'limit' must be a number from 1 to {LIST_LIMIT}")
        after = request.query_params.get("after", "")
        if len(after) > MAX_DOCUMENT_NAME:
            return _error(400, "'after' must be a document name")
        ctx = self._context()
        prefix = _literal_prefix(grant.patterns)
        infos = await ctx.store.list_documents(prefix=prefix, after=after, limit=limit)
        listed = [
            {
                "name": info.name,
                "created_at": info.created_at,
                "updated_at": info.updated_at,
                "stored_bytes": info.stored_bytes,
                "loaded": info.name in ctx.rooms.rooms,
            }
            for info in infos
            if grant.allows(info.name)
        ]
        following = infos[-1].name if len(infos) == limit else None
        return JSONResponse({"documents": listed, "next": following})

    # ---- /api/documents/{name} -----------------------------------------------------------------

    async def document(self, request: Request) -> Response:
        if request.method == "GET":
            return await self.read(request)
        if request.method == "DELETE":
            return await self.delete(request)
        if request.method == "PATCH":
            return await self.patch(request)
        return await self.import_(request)

    async def read(self, request: Request) -> Response:
        name, refusal = await self._check(request, write=False)
        if refusal is not None:
            return refusal
        export = request.query_params.get("format", "info")
        if export not in FORMATS:
            return _error(400, f"unknown format {export[:32]!r}; one of {', '.join(FORMATS)}")
        ctx = self._context()
        if not await _known(ctx, name):
            return _error(404, "no such document")
        try:
            async with ctx.rooms.visit(name, refusable=True) as room:
                await ctx.hooks.before_read(room)  # several nodes: what others acked too
                peers = len(room.peers)
                if export == "yjs":
                    return _export(name, export, room.doc.get_update())
                # A snapshot now; read and rendered in the renders pool, once per state.
                rich_name = ctx.settings.rich_fragment
                rendered = await self._renders_of(ctx).of_room(room, rich_name, _render(export))
        except DocumentQuarantined as exc:
            return _error(409, str(exc))
        except PoolFull as exc:
            return _busy(exc)
        if export == "info":
            return _json_with_text({"name": name, "kind": rendered.kind, "peers": peers}, rendered)
        return _export(name, export, rendered.body)

    async def delete(self, request: Request) -> Response:
        name, refusal = await self._check(request, write=True)
        if refusal is not None:
            return refusal
        ctx = self._context()
        if not await _known(ctx, name) and not await _has_versions(ctx, name):
            return _error(404, "no such document")
        await ctx.rooms.delete(name, DELETED_REASON)  # on_deleted: e.g. cached suggestions go
        log.info("document %r deleted", name[:64])
        return JSONResponse({"name": name, "deleted": True})

    async def import_(self, request: Request) -> Response:
        name, refusal = await self._check(request, write=True)
        if refusal is not None:
            return refusal
        try:  # a place in the imports pool for the whole request, body included
            place = pools.current().imports.reserve()
        except PoolFull as exc:
            return _busy(exc)
        with place:
            return await self._import(request, name)

    async def _import(self, request: Request, name: str) -> Response:
        kind = _content_type(request)
        if kind not in IMPORTS:
            # Only with a bearer token in a header, so a cross-site <form> cannot send any.
            return _error(
                415,
                "Content-Type must be application/octet-stream (a Yjs update),"
                " application/json (a ProseMirror document, what Tiptap's editor.getJSON()"
                " gives), text/html or text/markdown (into the rich tree) or text/plain (into"
                " the plain text)",
            )
        ctx = self._context()
        body = await self._body(request, ctx)
        if isinstance(body, Response):
            return body
        if not body and kind in ("application/octet-stream", "application/json"):
            return _error(400, f"empty body: expected {_EXPECTED[kind]}")
        written_text = ""
        for limited_kind, limit in (
            ("text/markdown", "max_markdown_bytes"),
            ("text/html", "max_html_bytes"),
        ):
            cap = getattr(ctx.settings, limit)
            if kind == limited_kind and len(body) > cap:
                ctx.metrics.limit_refusals.labels(limit).inc()
                return _error(
                    413, f"a body over {cap} bytes ({limit}); import a Yjs update instead"
                )
        if kind in ("text/markdown", "text/plain"):
            try:
                written_text = body.decode("utf-8")
            except UnicodeDecodeError:
                return _error(400, "the body is not UTF-8 text")

        async def write(room: Room, origin: RestOrigin) -> object:
            if kind == "text/markdown":
                return await set_tree(room, written_text, origin)
            if kind == "text/plain":
                return await set_text(room, written_text, origin)
            if kind == "application/json":
                return await set_tree(room, TreeBody("json", body), origin)
            if kind == "text/html":
                return await set_tree(room, TreeBody("html", body), origin)
            return await import_update(room, body, origin)

        refusal = await self._write(request, ctx, name, "import", write)
        return refusal or JSONResponse({"name": name, "imported": True})

    async def patch(self, request: Request) -> Response:
        """Content applied while others type, as Tiptap Cloud's PATCH: ``format=json`` (a
        ProseMirror document whose differing top-level blocks replace the document's;
        ``mode=append``: nodes after the last block; ``nodeAttributeName`` and
        ``nodeAttributeValue``: the node they name replaced), ``binary`` or ``base64`` (a Yjs
        update, as PUT application/octet-stream). 204 when applied and durable; an unknown
        document is 404 (PUT creates one)."""
        name, refusal = await self._check(request, write=True)
        if refusal is not None:
            return refusal
        query = request.query_params
        given = query.get("format")
        wanted = given or _PATCH_BY_TYPE.get(_content_type(request), "")
        if wanted not in PATCH_FORMATS:
            shown = f"format {given[:32]!r}" if given else "no format"
            return _error(400, f"{shown}: PATCH takes ?format=json, binary or base64")
        mode = query.get("mode", "default")
        attribute, value = query.get("nodeAttributeName"), query.get("nodeAttributeValue")
        if mode not in ("default", "append"):
            return _error(400, f"unknown mode {mode[:32]!r}; default or append")
        if (attribute is None) != (value is None) or (attribute is not None and mode != "default"):
            return _error(
                400, "nodeAttributeName and nodeAttributeValue go together, without mode=append"
            )
        if (attribute is not None or mode != "default") and wanted != "json":
            return _error(400, "mode and nodeAttributeName apply to format=json")
        if attribute is not None and not (0 < len(attribute) <= 256 and len(value or "") <= 4096):
            return _error(400, "nodeAttributeName must be 1-256 characters, its value <= 4096")
        ctx = self._context()
        if not await _known(ctx, name):
            return _error(404, "no such document")
        try:
            place = pools.current().imports.reserve()
        except PoolFull as exc:
            return _busy(exc)
        with place:
            body = await self._body(request, ctx)
            if isinstance(body, Response):
                return body
            if wanted == "base64":
                try:
                    body = base64.b64decode(b"".join(body.split()), validate=True)
                except (binascii.Error, ValueError):
                    return _error(400, "the body is not Base64")
            if not body:
                return _error(400, "empty body: expected content to apply")
            if attribute is not None:
                placement = Placement("node", attribute, value or "")
            else:
                placement = Placement("append" if mode == "append" else "blocks")
            content = body

            async def write(room: Room, origin: RestOrigin) -> object:
                if wanted != "json":  # a Yjs update, as PUT application/octet-stream
                    return await import_update(room, content, origin)
                shape = "doc" if placement.mode == "blocks" else "nodes"
                return await set_tree(room, TreeBody("json", content, shape), origin, placement)

            refusal = await self._write(request, ctx, name, "patch", write)
        return refusal or Response(status_code=204)

    async def _write(
        self,
        request: Request,
        ctx: ServerContext,
        name: str,
        action: str,
        write: Callable[[Room, RestOrigin], Awaitable[object]],
    ) -> Response | None:
        """``write`` to the document as one change, or the refusal: 400 malformed, 422 what a
        limit or the update guard refused, 409 quarantined, 503 busy (Retry-After)."""
        grant = await self._grant_of(request, name)
        origin = RestOrigin(action, grant.subject if grant else "")
        try:
            async with ctx.rooms.visit(name, refusable=True) as room:
                await write(room, origin)
        except ImportRefused as exc:
            ctx.metrics.update_refusals.labels(exc.limit).inc()
            self._log_once(request, exc.limit, f"refused an imported update of {name[:64]!r}")
            status = 400 if exc.limit == "malformed" else 422
            return _error(status, str(exc))
        except DocumentQuarantined as exc:
            return _error(409, str(exc))
        except PoolFull as exc:
            return _busy(exc)
        except ImportBusy as exc:  # the imports in flight hold the memory budget
            ctx.metrics.limit_refusals.labels("import_memory_budget").inc()
            reply = _error(503, str(exc))
            reply.headers["Retry-After"] = str(exc.retry_after)
            return reply
        except (RoomClosed, StorageError):
            return _error(503, "the document is busy or could not be stored; try again")
        return None

    # ---- /api/duplicate/{name} -----------------------------------------------------------------

    async def duplicate(self, request: Request) -> Response:
        """A new document holding this one's state, named by the body's ``{"name": ...}``:
        201, or 409 if that name holds a document already. Needs this document readable and
        the new name writable by the token. Named versions are not copied."""
        name, refusal = await self._check(request, write=False)
        if refusal is not None:
            return refusal
        ctx = self._context()
        fields = await self._json(request, ctx)
        if isinstance(fields, Response):
            return fields
        target = fields.get("name")
        if not isinstance(target, str) or not valid_document_name(target):
            return _error(400, "'name' must be a valid document name")
        grant = await self._grant_of(request, target)
        if grant is None or not grant.allows(target) or not grant.writable:
            return _error(403, "the token may not write a document of that name")
        if not await _known(ctx, name):
            return _error(404, "no such document")
        try:
            place = pools.current().imports.reserve()  # the copy is one import
        except PoolFull as exc:
            return _busy(exc)
        with place:
            async with self._duplicate_lock:
                if target == name or await _known(ctx, target) or await _has_versions(ctx, target):
                    return _error(409, "a document of that name exists already")
                try:
                    async with ctx.rooms.visit(name, refusable=True) as room:
                        await ctx.hooks.before_read(room)  # several nodes: what others acked too
                        state = room.doc.get_update()
                except DocumentQuarantined as exc:
                    return _error(409, str(exc))
                except PoolFull as exc:
                    return _busy(exc)

                async def write(room: Room, origin: RestOrigin) -> object:
                    return await import_update(room, state, origin)

                refusal = await self._write(request, ctx, target, "duplicate", write)
        if refusal is not None:
            return refusal
        log.info("document %r duplicated as %r", name[:64], target[:64])
        return JSONResponse({"name": target, "source": name}, status_code=201)

    # ---- versions ------------------------------------------------------------------------------

    async def versions(self, request: Request) -> Response:
        write = request.method in ("POST", "DELETE")
        name, refusal = await self._check(request, write=write)
        if refusal is not None:
            return refusal
        ctx = self._context()
        try:
            if request.method == "DELETE":
                return await self._delete_version(request, ctx, name)
            if write:
                return await self._create_version(request, ctx, name)
            version = request.query_params.get("id")
            if version is not None:
                return await self._one_version(request, ctx, name, version)
            if not await _known(ctx, name) and not await _has_versions(ctx, name):
                return _error(404, "no such document")
            listed = await ctx.store.list_versions(name)
        except StorageError as exc:
            return _error(501, str(exc))  # a store that keeps no versions
        return JSONResponse({"name": name, "versions": [_version_json(v) for v in listed]})

    async def _delete_version(self, request: Request, ctx: ServerContext, name: str) -> Response:
        """``?id=N``: that version is forgotten (its bytes leave the quotas); 404 if the
        document has no such version."""
        number = parse_counter(request.query_params.get("id", ""))
        if number is None:
            return _error(400, "'id' must be a version number")
        async with self._version_lock:  # not while a version is being counted and added
            deleted = await ctx.store.delete_version(name, number)
        if not deleted:
            return _error(404, "no such version")
        log.info("version %d of %r deleted", number, name[:64])
        return JSONResponse({"name": name, "id": number, "deleted": True})

    async def _create_version(self, request: Request, ctx: ServerContext, name: str) -> Response:
        fields = await self._json(request, ctx)
        if isinstance(fields, Response):
            return fields
        label = fields.get("label")
        if not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL_CHARS:
            return _error(400, f"'label' must be a string of 1 to {MAX_LABEL_CHARS} characters")
        if not _is_unicode_text(label):
            return _error(400, "'label' must be Unicode text (it holds a lone surrogate)")
        if not await _known(ctx, name):
            return _error(404, "no such document")
        async with self._version_lock:
            try:
                async with ctx.rooms.visit(name, refusable=True) as room:
                    await ctx.hooks.before_read(room)  # several nodes: what others acked too
                    state = room.doc.get_update()
            except DocumentQuarantined as exc:
                return _error(409, str(exc))
            except PoolFull as exc:
                return _busy(exc)
            existing = await ctx.store.list_versions(name)
            if existing and await ctx.store.load_version(name, existing[-1].id) == state:
                # Nothing changed since the last version: it is the answer (200, not 201), and
                # no second copy of the same state is stored.
                return JSONResponse(_version_json(existing[-1]), status_code=200)
            subject = grant.subject if (grant := await self._grant_of(request, name)) else ""
            refusal = await self._version_refusal(request, ctx, name, existing, subject, len(state))
            if refusal is not None:
                return refusal
            info = await ctx.store.add_version(name, label, state, subject)
        return JSONResponse(_version_json(info), status_code=201)

    async def _version_refusal(
        self,
        request: Request,
        ctx: ServerContext,
        name: str,
        existing: list[VersionInfo],
        subject: str,
        size: int,
    ) -> Response | None:
        """409, naming the limit, when one more version of ``size`` bytes would pass one."""
        passed = await _version_bound_passed(ctx, existing, subject, size)
        if passed is None:
            return None
        limit, reason = passed
        ctx.metrics.limit_refusals.labels(limit).inc()
        self._log_once(request, limit, f"refused a version of {name[:64]!r}")
        return _error(409, f"{reason} ({limit})")

    async def _one_version(
        self, request: Request, ctx: ServerContext, name: str, version: str
    ) -> Response:
        number = parse_counter(version)
        if number is None:
            return _error(400, "'id' must be a version number")
        export = request.query_params.get("format", "info")
        if export not in FORMATS:
            return _error(400, f"unknown format {export[:32]!r}; one of {', '.join(FORMATS)}")
        state = await ctx.store.load_version(name, number)
        if state is None:
            return _error(404, "no such version")
        if export == "yjs":
            return _export(f"{name}@{version}", export, state)
        try:  # read and rendered in the renders pool, once per state
            rendered = await self._renders_of(ctx).of_state(
                state, ctx.settings.rich_fragment, _render(export)
            )
        except PoolFull as exc:
            return _busy(exc)
        if export != "info":
            return _export(f"{name}@{version}", export, rendered.body)
        info = next((v for v in await ctx.store.list_versions(name) if v.id == number), None)
        if info is None:
            return _error(404, "no such version")
        return _json_with_text({**_version_json(info), "kind": rendered.kind}, rendered)

    async def restore(self, request: Request) -> Response:
        name, refusal = await self._check(request, write=True)
        if refusal is not None:
            return refusal
        ctx = self._context()
        fields = await self._json(request, ctx)
        if isinstance(fields, Response):
            return fields
        version = fields.get("version")
        if not valid_id(version):
            return _error(400, "'version' must be a version number")
        try:
            state = await ctx.store.load_version(name, version)
        except StorageError as exc:
            return _error(501, str(exc))
        if state is None:
            return _error(404, "no such version")
        grant = await self._grant_of(request, name)
        origin = RestOrigin("restore", grant.subject if grant else "")
        rich_name = ctx.settings.rich_fragment
        try:
            with pools.current().imports.reserve():  # the whole restore is one import
                imports = pools.current().imports
                saved = await imports.run(content_of_state, state, rich_name, first=False)
                async with ctx.rooms.visit(name, refusable=True) as room:
                    if saved.kind == "rich":  # the tree as it was, as one new change
                        await set_tree(room, saved.blocks, origin)
                    else:
                        await set_text(room, saved.plain, origin)
                    renders = self._renders_of(ctx)
                    text = await renders.of_room(room, rich_name, "json", refusable=False)
        except ImportRefused as exc:
            return _error(422, str(exc))
        except DocumentQuarantined as exc:
            return _error(409, str(exc))
        except PoolFull as exc:
            return _busy(exc)
        except (RoomClosed, StorageError):
            return _error(503, "the document is busy or could not be stored; try again")
        return _json_with_text({"name": name, "restored": version}, text)

    # ---- shared checks -------------------------------------------------------------------------

    async def _check(self, request: Request, *, write: bool) -> tuple[str, Response | None]:
        """The document name, or a refusal: 401 no/invalid token, 400 a name /ws refuses,
        403 a token for other documents, or a readonly token where writing is asked."""
        name = request.path_params["name"]
        grant = await self._grant_of(request, name)
        if grant is None:
            return name, _error(401, "missing, invalid or expired token")
        if not valid_document_name(name):
            return name, _error(400, "invalid document name")
        if not grant.allows(name):
            return name, _error(403, "document not allowed by token")
        if write and not grant.writable:
            return name, _error(403, "this needs a read-write token")
        return name, None

    async def _body(self, request: Request, ctx: ServerContext) -> bytes | Response:
        """The body, up to the frame cap (the largest update /ws accepts): 413 past it."""
        limit = ctx.settings.max_frame_bytes
        declared = request.headers.get("content-length", "")
        size = parse_counter(declared)
        if size is not None and size > limit:
            return self._too_large(request, ctx)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return self._too_large(request, ctx)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, request: Request, ctx: ServerContext) -> Response:
        ctx.metrics.limit_refusals.labels("max_frame_bytes").inc()
        self._log_once(request, "max_frame_bytes", "refused a REST body over the frame cap")
        return _error(413, "body larger than the frame cap (max_frame_bytes)")

    async def _json(self, request: Request, ctx: ServerContext) -> dict[str, Any] | Response:
        if _content_type(request) != "application/json":
            return _error(415, "Content-Type must be application/json")
        body = await self._body(request, ctx)
        if isinstance(body, Response):
            return body
        try:
            fields = json.loads(body)
        except ValueError:
            return _error(400, "body is not JSON")
        if not isinstance(fields, dict):
            return _error(400, "body must be a JSON object")
        return fields

    def _renders_of(self, ctx: ServerContext) -> Renders:
        if self._renders is None:
            self._renders = Renders(ctx.settings.render_cache_bytes, ctx.metrics)
        return self._renders

    def _log_once(self, request: Request, limit: str, detail: str) -> None:
        address = request.client.host if request.client else "unknown"
        key = (address[:64], limit)
        if key in self._logged:
            return
        if len(self._logged) >= _MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        log.warning("%s from %s (%s); further ones not logged", detail, key[0], limit)


async def _known(ctx: ServerContext, name: str) -> bool:
    room = ctx.rooms.rooms.get(name)
    if room is not None and not room.deleted and room.doc.get_state() != _EMPTY_STATE:
        return True
    return await ctx.store.info(name) is not None


async def _has_versions(ctx: ServerContext, name: str) -> bool:
    try:
        return bool(await ctx.store.list_versions(name))
    except StorageError:
        return False


def _export(name: str, export: str, body: bytes) -> Response:
    """``body`` (the encoded state for "yjs", else the rendered text, Markdown or HTML) as the
    download of ``name``."""
    base = _filename(name)
    headers = {"X-Content-Type-Options": "nosniff"}
    if export == "yjs":
        headers["Content-Disposition"] = f'attachment; filename="{base}.yjs"'
        return Response(body, media_type="application/octet-stream", headers=headers)
    if export == "markdown":
        # A plain document's text is what users write Markdown in: served as it is; a rich
        # one's tree is written as Markdown (collab.content.markdown).
        headers["Content-Disposition"] = f'attachment; filename="{base}.md"'
        return Response(body, media_type="text/markdown; charset=utf-8", headers=headers)
    if export == "json":
        # The ProseMirror tree (collab.content.prosemirror_json), as Tiptap Cloud serves it.
        return Response(body, media_type="application/json", headers=headers)
    if export == "html":
        # A fragment, everything escaped; served as an attachment, never rendered in our origin.
        headers["Content-Disposition"] = f'attachment; filename="{base}.html"'
        return Response(body, media_type="text/html; charset=utf-8", headers=headers)
    headers["Content-Disposition"] = f'inline; filename="{base}.txt"'
    return Response(body, media_type="text/plain; charset=utf-8", headers=headers)


def _render(export: str) -> str:
    """The render (``collab.rooms.renders``) a REST format is made of: "info" carries the
    text, "json" is the ProseMirror tree."""
    return {"info": "json", "json": "prosemirror"}.get(export, export)


_EXPECTED = {
    "application/octet-stream": "a Yjs update",
    "application/json": "a ProseMirror document",
}
_PATCH_BY_TYPE = {"application/json": "json", "application/octet-stream": "binary"}


def _json_with_text(fields: dict[str, Any], rendered: Rendered) -> Response:
    """``fields`` and a ``"text"`` that is already a JSON string (``Renders``' "json"): the
    document's megabytes are not encoded again on the loop."""
    head = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()
    body = b"".join((head[:-1], b',"text":', rendered.body, b"}"))
    return Response(body, media_type="application/json")


def _busy(exc: PoolFull) -> Response:
    """503 with Retry-After: the pool this request needs has as much waiting as it may."""
    reply = _error(503, str(exc))
    reply.headers["Retry-After"] = str(exc.retry_after)
    return reply


_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]+")


def _filename(name: str) -> str:
    """The name's last path segment, cut to characters safe in any header and file system."""
    last = name.rstrip("/").rsplit("/", 1)[-1]
    return _UNSAFE.sub("_", last).strip("._")[:100] or "document"


def _version_json(info: VersionInfo) -> dict[str, Any]:
    return {"id": info.id, "label": info.label, "created_at": info.created_at, "size": info.size}


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def _version_bound_passed(
    ctx: ServerContext, existing: list[VersionInfo], subject: str, size: int
) -> tuple[str, str] | None:
    """The (limit, reason) one more version of ``size`` bytes would pass, if any: per document,
    per token subject, in all."""
    settings = ctx.settings
    if len(existing) >= settings.max_versions_per_document:
        return (
            "max_versions_per_document",
            f"this document has {len(existing)} versions, the most it may keep",
        )
    if sum(v.size for v in existing) + size > settings.max_version_bytes_per_document:
        return (
            "max_version_bytes_per_document",
            "this document's versions would pass their byte limit",
        )
    if await ctx.store.version_bytes(subject) + size > settings.max_version_bytes_per_subject:
        return "max_version_bytes_per_subject", "your versions would pass their byte limit"
    if await ctx.store.version_bytes() + size > settings.max_version_bytes_total:
        return "max_version_bytes_total", "the server's versions would pass their byte limit"
    return None


def _literal_prefix(patterns: tuple[str, ...]) -> str:
    """What every name a grant allows starts with: the patterns' text before their first
    wildcard, in common ("" for a token of everything)."""
    literals = [re.split(r"[*?\[]", pattern, maxsplit=1)[0] for pattern in patterns]
    if not literals:
        return ""
    first, last = min(literals), max(literals)  # the common prefix of all is theirs
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def _is_unicode_text(text: str) -> bool:
    try:
        text.encode("utf-8")  # JSON may carry a lone surrogate ("\\ud800"); stores cannot
    except UnicodeEncodeError:
        return False
    return True


def _error(status: int, reason: str) -> Response:
    return JSONResponse({"error": reason}, status_code=status)
