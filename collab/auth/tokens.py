"""Who may open which document: JWT (HS256) verification and glob claims, or open local mode.

Knows nothing of sockets or frames; returns a ``Grant`` or raises ``AuthError`` with a reason
that is safe to show the client.

Token claims: ``docs`` (list of path-aware glob patterns, e.g. ``["team/*", "readme"]``: ``*``
stays within one ``/`` segment, ``**`` crosses them, a lone ``*`` is every document; see
``doc_globs``), ``scope`` (``read-write`` or ``readonly``; a token without one is readonly),
``exp`` (required, a number: seconds since the epoch), ``sub`` and ``name`` (optional).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import jwt

from tether.protocol.messages import SCOPE_READ_WRITE, SCOPE_READONLY

from .globs import matches

ALGORITHM = "HS256"
_SCOPES = (SCOPE_READ_WRITE, SCOPE_READONLY)


class AuthError(Exception):
    """The credentials do not allow this; ``str(exc)`` is safe to send to the client."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A verified identity: what it may open, and how."""

    subject: str
    display_name: str
    patterns: tuple[str, ...]
    scope: str
    expires_at: float | None

    def allows(self, document: str) -> bool:
        return any(matches(document, pattern) for pattern in self.patterns)

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (now or time.time()) >= self.expires_at

    @property
    def writable(self) -> bool:
        return self.scope == SCOPE_READ_WRITE


OPEN_GRANT = Grant("anonymous", "anonymous", ("*",), SCOPE_READ_WRITE, None)


class Authenticator:
    """Verifies tokens; ``mode='none'`` grants everything (and says so loudly at startup)."""

    def __init__(self, mode: str, secret: str = "") -> None:
        self.mode = mode
        self._secret = secret

    def verify(self, token: str) -> Grant:
        if self.mode == "none":
            return OPEN_GRANT
        if not token:
            raise AuthError("missing token")
        try:
            # exp is checked below, by us: PyJWT accepts a string "1700000000" (and then the
            # grant would never expire on a long connection) and fails on infinity.
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                options={"require": ["exp"], "verify_exp": False},
            )
        except (jwt.InvalidTokenError, ValueError, OverflowError, TypeError) as exc:
            raise AuthError("invalid token") from exc
        grant = _grant_from_claims(claims)
        if grant.expired():
            raise AuthError("token expired")
        return grant

    def authorize(self, token: str, document: str) -> Grant:
        grant = self.verify(token)
        self.check(grant, document)
        return grant

    def check(self, grant: Grant, document: str) -> None:
        if grant.expired():
            raise AuthError("token expired")
        if not grant.allows(document):
            raise AuthError("document not allowed by token")


def _grant_from_claims(claims: dict[str, object]) -> Grant:
    docs = claims.get("docs")
    if not isinstance(docs, list) or not all(isinstance(p, str) for p in docs):
        raise AuthError("invalid token: 'docs' must be a list of patterns")
    # No scope claim: readonly. Least privilege; a token that means to write says so (tether
    # token always writes the claim).
    scope = claims.get("scope", SCOPE_READONLY)
    if scope not in _SCOPES:
        raise AuthError("invalid token: unknown scope")
    expires_at = _expiry(claims.get("exp"))
    subject = str(claims.get("sub", "anonymous"))
    return Grant(
        subject=subject,
        display_name=str(claims.get("name", subject)),
        patterns=tuple(docs),
        scope=str(scope),
        expires_at=expires_at,
    )


def _expiry(exp: object) -> float:
    """``exp`` as a finite number of seconds; a string, bool or huge value is refused."""
    if not isinstance(exp, bool) and isinstance(exp, int | float):
        try:
            value = float(exp)
        except OverflowError:
            value = math.inf
        if math.isfinite(value):
            return value
    raise AuthError("invalid token: 'exp' must be a number (seconds since the epoch)")


def make_token(
    secret: str,
    docs: list[str],
    *,
    scope: str = SCOPE_READ_WRITE,
    ttl: float = 3600.0,
    subject: str = "user",
    name: str | None = None,
) -> str:
    """Mint a token (for the CLI, tests and benchmarks)."""
    claims: dict[str, object] = {
        "sub": subject,
        "docs": docs,
        "scope": scope,
        "exp": int(time.time() + ttl),
    }
    if name:
        claims["name"] = name
    return jwt.encode(claims, secret, algorithm=ALGORITHM)
