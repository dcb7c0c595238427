"""Small fixed answers for browsers and API tools: the favicon and ``/openapi.json``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .openapi import description

FAVICON_PATH = "/favicon.svg"

# A rounded square with a knot of two strands: tether's mark, 0.3 kB, no request elsewhere.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect width="32" height="32" rx="7" fill="#2f5bd3"/>'
    '<path d="M9 11c4 0 6 10 14 10M9 21c4 0 6-10 14-10" fill="none" stroke="#fff"'
    ' stroke-width="3" stroke-linecap="round"/></svg>'
)


async def favicon(request: Request) -> Response:
    """The icon pages link (``/favicon.svg``), also at ``/favicon.ico`` for whatever asks."""
    return Response(
        FAVICON_SVG,
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


async def openapi(request: Request) -> Response:
    base = str(request.scope.get("root_path", "")).rstrip("/")
    return JSONResponse(description(base))
