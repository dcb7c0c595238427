"""Who may open which document: JWT (HS256) verification and glob claims, or open local mode.

Knows nothing of sockets or frames; returns a ``Grant`` or raises ``AuthError`` with a reason
that is safe to show the client.

Token claims: ``docs`` (list of glob patterns, e.g. ``["team/*", "readme"]``), ``scope``
(``read-write`` or ``readonly``), ``exp`` (required), ``sub`` and ``name`` (optional).
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass

import jwt

from protocol.messages import SCOPE_READ_WRITE, SCOPE_READONLY

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
        return any(fnmatch.fnmatchcase(document, pattern) for pattern in self.patterns)

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
            claims = jwt.decode(
                token, self._secret, algorithms=[ALGORITHM], options={"require": ["exp"]}
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token expired") from exc
        except jwt.InvalidTokenError as exc:
            raise AuthError("invalid token") from exc
        return _grant_from_claims(claims)

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
    scope = claims.get("scope", SCOPE_READ_WRITE)
    if scope not in _SCOPES:
        raise AuthError("invalid token: unknown scope")
    exp = claims.get("exp")
    subject = str(claims.get("sub", "anonymous"))
    return Grant(
        subject=subject,
        display_name=str(claims.get("name", subject)),
        patterns=tuple(docs),
        scope=str(scope),
        expires_at=float(exp) if isinstance(exp, int | float) else None,
    )


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
