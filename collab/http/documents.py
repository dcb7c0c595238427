"""The document endpoints of the REST API: read and export, import, delete, named versions.

``TetherServer.routes()`` mounts ``DocumentsApi.routes()`` (the listing too); each handler checks
the token and the name, then hands the work to the room manager, the store and ``document_edits``.
Readers use ``RoomManager.visit``, so REST never pins a document loaded (issue 10, item 9), and an
unknown name is never loaded at all. Names are checked by the rule /ws applies
(``valid_document_name``).

"Unknown" (404): not in the store, and not loaded with content (an editor's first edit is in
memory before its append commits). A name an editor has open but never edited is unknown too:
there is nothing to read, export or delete yet.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..auth.tokens import Grant
from ..connection.context import MAX_DOCUMENT_NAME, ServerContext, valid_document_name
from ..rooms.document_edits import (
    ImportRefused,
    RestOrigin,
    content_of_state,
    import_update,
    set_text,
    set_tree,
)
from ..rooms.import_budget import ImportBusy
from ..rooms.manager import DocumentQuarantined
from ..rooms.renders import Rendered, Renders
from ..rooms.room import RoomClosed
from ..runtime import pools
from ..runtime.pools import PoolFull
from ..storage.store import StorageError, VersionInfo
from .numbers import parse_counter, valid_id

log = logging.getLogger("tether.rest")

DELETED_REASON = "document deleted"
FORMATS = ("json", "text", "markdown", "html", "yjs")
IMPORTS = ("application/octet-stream", "text/markdown", "text/plain")
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
        self._logged: set[tuple[str, str]] = set()  # (address, limit): each logged once

    def routes(self) -> list[Route]:
        return [
            Route("/api/documents", self.list_documents),
            Route("/api/versions/{name:path}", self.versions, methods=["GET", "POST"]),
            Route("/api/restore/{name:path}", self.restore, methods=["POST"]),
            Route(
                "/api/documents/{name:path}",
                self.document,
                methods=["GET", "PUT", "POST", "DELETE"],
            ),
        ]

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
        return await self.import_(request)

    async def read(self, request: Request) -> Response:
        name, refusal = await self._check(request, write=False)
        if refusal is not None:
            return refusal
        export = request.query_params.get("format", "json")
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
                rendered = await self._renders_of(ctx).of_room(room, rich_name, export)
        except DocumentQuarantined as exc:
            return _error(409, str(exc))
        except PoolFull as exc:
            return _busy(exc)
        if export == "json":
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
                "Content-Type must be application/octet-stream (a Yjs update), text/markdown"
                " (into the rich tree) or text/plain (into the plain text)",
            )
        ctx = self._context()
        body = await self._body(request, ctx)
        if isinstance(body, Response):
            return body
        if not body and kind == "application/octet-stream":
            return _error(400, "empty body: expected a Yjs update")
        written_text = ""
        if kind == "text/markdown" and len(body) > ctx.settings.max_markdown_bytes:
            ctx.metrics.limit_refusals.labels("max_markdown_bytes").inc()
            return _error(
                413,
                f"Markdown over {ctx.settings.max_markdown_bytes} bytes (max_markdown_bytes);"
                " import a Yjs update instead",
            )
        if kind != "application/octet-stream":
            try:
                written_text = body.decode("utf-8")
            except UnicodeDecodeError:
                return _error(400, "the body is not UTF-8 text")
        grant = await self._grant_of(request, name)
        origin = RestOrigin("import", grant.subject if grant else "")
        try:
            async with ctx.rooms.visit(name, refusable=True) as room:
                if kind == "text/markdown":
                    await set_tree(room, written_text, origin)
                elif kind == "text/plain":
                    await set_text(room, written_text, origin)
                else:
                    await import_update(room, body, origin)
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
        return JSONResponse({"name": name, "imported": True})

    # ---- versions ------------------------------------------------------------------------------

    async def versions(self, request: Request) -> Response:
        write = request.method == "POST"
        name, refusal = await self._check(request, write=write)
        if refusal is not None:
            return refusal
        ctx = self._context()
        try:
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
        export = request.query_params.get("format", "json")
        if export not in FORMATS:
            return _error(400, f"unknown format {export[:32]!r}; one of {', '.join(FORMATS)}")
        state = await ctx.store.load_version(name, number)
        if state is None:
            return _error(404, "no such version")
        if export == "yjs":
            return _export(f"{name}@{version}", export, state)
        try:  # read and rendered in the renders pool, once per state
            rendered = await self._renders_of(ctx).of_state(
                state, ctx.settings.rich_fragment, export
            )
        except PoolFull as exc:
            return _busy(exc)
        if export != "json":
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
    if export == "html":
        # A fragment, everything escaped; served as an attachment, never rendered in our origin.
        headers["Content-Disposition"] = f'attachment; filename="{base}.html"'
        return Response(body, media_type="text/html; charset=utf-8", headers=headers)
    headers["Content-Disposition"] = f'inline; filename="{base}.txt"'
    return Response(body, media_type="text/plain; charset=utf-8", headers=headers)


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
