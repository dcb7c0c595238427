"""The HTML pages (the document list and the editor) and the committed web bundle they load,
each page with its Content-Security-Policy, and the service worker that keeps them for offline
use (``/sw.js``). Knows no documents beyond a name to show.
"""

from __future__ import annotations

import html
import json
import secrets
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config import Settings
from ..connection.server_context import valid_document_name
from .web_extras import FAVICON_PATH

WEB_DIST = Path(__file__).resolve().parents[2] / "web" / "dist"  # the committed bundle
SERVICE_WORKER = WEB_DIST / "sw.js"


class Pages:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._local = settings.web_local_copies == "on"
        # Read once: a few kB, and a build replaces it only with the server's code.
        self._worker = SERVICE_WORKER.read_bytes() if SERVICE_WORKER.is_file() else None

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.index),
            Route("/d/{name:path}", self.editor),
            Route("/sw.js", self.service_worker),
            _static_route(),
        ]

    async def index(self, request: Request) -> Response:
        base = _base(request)
        config = {"auth": self._settings.auth, "base": base, "local": self._local}
        return _page("tether", "index", config, base)

    async def service_worker(self, request: Request) -> Response:
        """The worker that keeps the page shell (web/src/sw.js), at the root of the pages so
        its scope covers /d/*. Not there with --web-local-copies off: a browser asking to
        update one it registered before gets 404, and drops it."""
        if self._worker is None or not self._local:
            return JSONResponse({"error": "no service worker here"}, status_code=404)
        return Response(
            self._worker,
            media_type="text/javascript; charset=utf-8",
            # Checked on every page load, so a new build's worker replaces the old at once.
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    async def editor(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not valid_document_name(name):
            return JSONResponse({"error": "invalid document name"}, status_code=400)
        settings = self._settings
        base = _base(request)
        config = {
            "auth": settings.auth,
            "document": name,
            "ai": settings.ai_provider != "none",
            "base": base,
            # The rich editor binds to the fragment the server reads (--rich-fragment).
            "fragment": settings.rich_fragment,
            # Keep the document in the browser (IndexedDB) and the shell offline (/sw.js).
            "local": self._local,
        }
        return _page(f"{name} · tether", "editor", config, base)


def _static_route() -> Route | Mount:
    if WEB_DIST.is_dir():
        return Mount("/static", StaticFiles(directory=WEB_DIST), name="static")

    async def missing(request: Request) -> Response:
        return JSONResponse({"error": "the web bundle is not built (web/dist)"}, status_code=404)

    return Route("/static/{path:path}", missing)


def _base(request: Request) -> str:
    """Where tether is mounted ("" at the root, "/collab" under a mount): every URL a page
    uses starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _page(title: str, bundle: str, config: dict[str, Any], base: str = "") -> Response:
    """An HTML page with its Content-Security-Policy: scripts only from this server (and the
    one inline config script, by a nonce fresh per response), images only from this server or
    data: (a CSS ``url()`` smuggled into a style cannot make the browser fetch elsewhere), no
    plugins, no framing, no <base>. Inline styles stay allowed: CodeMirror and y-codemirror set
    style attributes (remote carets' colours), which is why presence colours are checked on
    the server (protocol.wire.presence_safety) and in the editor. ``no-referrer``: a ``?token=`` in
    the page's URL is never sent to another site."""
    nonce = secrets.token_urlsafe(16)
    policy = "; ".join(
        (
            "default-src 'self'",
            f"script-src 'self' 'nonce-{nonce}'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "connect-src 'self'",  # CSP 3: 'self' covers ws:/wss: to this host as well
            "font-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )
    headers = {
        "Content-Security-Policy": policy,
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(_shell(title, bundle, config, nonce, base), headers=headers)


def _shell(title: str, bundle: str, config: dict[str, Any], nonce: str, base: str = "") -> str:
    """The HTML page the browser bundle mounts into; config is JSON that cannot end the script."""
    data = json.dumps(config).replace("<", "\\u003c")
    static = html.escape(base + "/static/" + bundle, quote=True)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f'<link rel=icon type="image/svg+xml" href="{html.escape(base + FAVICON_PATH)}">'
        f'<link rel=stylesheet href="{static}.css"></head>'
        f'<body><div id="app"></div><script nonce="{nonce}">window.TETHER = {data};</script>'
        f'<script type=module src="{static}.js"></script></body></html>'
    )
