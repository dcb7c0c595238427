"""Who gets which grant: the host's ``on_authenticate`` hooks first, then the built-in
authenticator (``--auth jwt|none``). Knows nothing of sockets or Starlette."""

from __future__ import annotations

from ..auth.tokens import Grant
from ..hooks import AuthRequest, ConnectionInfo
from .server_context import ServerContext


async def authenticate(
    ctx: ServerContext,
    token: str,
    document: str | None,
    connection: ConnectionInfo | None,
    *,
    check: bool = True,
) -> Grant:
    """The grant for ``token``, checked to allow ``document`` when one is named (unless
    ``check`` is False: REST answers 403 rather than 401 for that); raises AuthError."""
    grant = None
    if ctx.hooks.has("on_authenticate"):
        grant = await ctx.hooks.on_authenticate(AuthRequest(token, document, connection))
    if grant is None:
        grant = await ctx.authenticator.grant(token)
    if document is not None and check:
        ctx.authenticator.check(grant, document)
    return grant
