"""Who may open which document: JWT verification (HS256 with a shared secret, or RS256, ES256,
EdDSA and kin against an identity provider's JWKS), its claims read as a ``Grant``, or open
local mode.

Knows nothing of sockets or frames; returns a ``Grant`` or raises ``AuthError`` with a reason
that is safe to show the client.

Token claims (the two claim names are settings, ``--jwt-docs-claim`` and ``--jwt-scope-claim``,
a dotted name reaching into an object): ``docs`` (path-aware glob patterns, a list or one
string, e.g. ``["team/*", "readme"]``: ``*`` stays within one ``/`` segment, ``**`` crosses
them, a lone ``*`` is every document; see ``doc_globs``), ``scope`` (``read-write`` or
``readonly``, alone or among other scopes as OAuth providers send them, space-separated or a
list; a token without one is readonly), ``exp`` (required, a number: seconds since the epoch),
``aud`` and ``iss`` (checked when ``--jwt-audience``/``--jwt-issuer`` are set; a token with an
audience is refused when none is set), ``sub`` and ``name`` (optional).

The token's header picks the key, never the other way round: ``HS256`` takes the secret and
only it; the JWKS algorithms take a key of their own type from the key set; ``none`` and any
other algorithm are refused, so a public key can never be used as an HMAC secret.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from tether.protocol.wire.messages import SCOPE_READ_WRITE, SCOPE_READONLY

from .globs import matches
from .jwks import ALGORITHMS as JWKS_ALGORITHMS
from .jwks import JwksKeys, KeyUnavailable

ALGORITHM = "HS256"
_SCOPES = (SCOPE_READ_WRITE, SCOPE_READONLY)
# A token longer than this is refused before it is decoded (identity providers' run to a few
# KiB, a large groups claim included).
MAX_TOKEN_CHARS = 64 * 1024


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


@dataclass(frozen=True, slots=True)
class JwtPolicy:
    """What a token must be beyond its signature, and where its claims are read."""

    secret: str = ""
    jwks_url: str = ""
    audience: tuple[str, ...] = ()
    issuer: tuple[str, ...] = ()
    leeway: float = 0.0
    docs_claim: str = "docs"
    scope_claim: str = "scope"
    jwks_timeout: float = 5.0
    jwks_min_refresh: float = 30.0

    @classmethod
    def from_settings(cls, settings: Any) -> JwtPolicy:
        return cls(
            secret=settings.jwt_secret,
            jwks_url=settings.jwt_jwks_url,
            audience=_words(settings.jwt_audience),
            issuer=_words(settings.jwt_issuer),
            leeway=settings.jwt_leeway,
            docs_claim=settings.jwt_docs_claim,
            scope_claim=settings.jwt_scope_claim,
            jwks_timeout=settings.jwt_jwks_timeout,
            jwks_min_refresh=settings.jwt_jwks_min_refresh,
        )


class Authenticator:
    """Verifies tokens; ``mode='none'`` grants everything (and says so loudly at startup).

    ``grant(token)`` is what the server awaits: it may fetch the JWKS (at most its timeout).
    ``claims(token)`` gives a verified token's claims to a host that maps them itself (in its
    ``authenticate`` callback). ``verify(token)`` checks with the keys at hand, never fetching.
    """

    def __init__(self, mode: str, secret: str = "", *, policy: JwtPolicy | None = None) -> None:
        self.mode = mode
        self.policy = policy if policy is not None else JwtPolicy(secret=secret)
        self._secret = self.policy.secret
        url = self.policy.jwks_url
        self.keys: JwksKeys | None = None
        if mode == "jwt" and url:
            self.keys = JwksKeys(
                url, timeout=self.policy.jwks_timeout, min_refresh=self.policy.jwks_min_refresh
            )

    @classmethod
    def from_settings(cls, settings: Any) -> Authenticator:
        return cls(settings.auth, policy=JwtPolicy.from_settings(settings))

    def start(self) -> None:
        """Fetch the key set in the background, so the first token finds it."""
        if self.keys is not None:
            self.keys.start()

    async def aclose(self) -> None:
        if self.keys is not None:
            await self.keys.aclose()

    async def grant(self, token: str) -> Grant:
        if self.mode == "none":
            return OPEN_GRANT
        return self.grant_from_claims(await self.claims(token))

    async def claims(self, token: str) -> dict[str, Any]:
        """The claims of a token whose signature, ``exp``, ``nbf``, ``aud`` and ``iss`` hold;
        raises AuthError."""
        _present(token)
        if self.keys is None:  # HS256 only: PyJWT refuses any other algorithm itself
            return self._decode(token, "HS256", self._symmetric_key("HS256"))
        alg, kid = _header(token)
        if alg == "HS256" or alg not in JWKS_ALGORITHMS:
            return self._decode(token, alg, self._symmetric_key(alg))
        try:
            key = await self.keys.key(kid, alg)
        except KeyUnavailable as exc:
            raise AuthError(str(exc)) from None
        return self._decode(token, alg, key.key)

    def verify(self, token: str) -> Grant:
        if self.mode == "none":
            return OPEN_GRANT
        _present(token)
        alg, kid = ("HS256", None) if self.keys is None else _header(token)
        if alg == "HS256" or self.keys is None or alg not in JWKS_ALGORITHMS:
            key: Any = self._symmetric_key(alg)
        else:
            try:
                key = self.keys.cached(kid, alg).key
            except KeyUnavailable as exc:
                raise AuthError(str(exc)) from None
        return self.grant_from_claims(self._decode(token, alg, key))

    def authorize(self, token: str, document: str) -> Grant:
        grant = self.verify(token)
        self.check(grant, document)
        return grant

    def check(self, grant: Grant, document: str) -> None:
        if grant.expired():
            raise AuthError("token expired")
        if not grant.allows(document):
            raise AuthError("document not allowed by token")

    def grant_from_claims(self, claims: dict[str, Any]) -> Grant:
        """The grant verified claims give, read where the policy says; raises AuthError."""
        policy = self.policy
        grant = _grant_from_claims(claims, policy.docs_claim, policy.scope_claim, policy.leeway)
        if grant.expired():
            raise AuthError("token expired")
        return grant

    def _symmetric_key(self, alg: str) -> str:
        if self.mode != "jwt":
            raise AuthError("no token check is configured (--auth none)")
        if alg != "HS256":
            raise AuthError(f"invalid token: algorithm {alg[:16]!r} is not accepted")
        if not self._secret:
            raise AuthError("invalid token: HS256 tokens are not accepted by this server")
        return self._secret

    def _decode(self, token: str, alg: str, key: Any) -> dict[str, Any]:
        policy = self.policy
        audience: str | list[str] | None = list(policy.audience) or None
        issuer: str | list[str] | None = list(policy.issuer) or None
        if alg == "HS256" and (audience or issuer):
            # The server's own tokens (tether token) name no audience or issuer: checked
            # only where they do.
            claims = _unverified(token)
            if "aud" not in claims and audience is not None:
                audience = None
            if "iss" not in claims:
                issuer = None
        try:
            # exp is checked by us (grant_from_claims): PyJWT accepts a string "1700000000"
            # (and then the grant would never expire on a long connection) and fails on
            # infinity.
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=audience,
                issuer=issuer,
                leeway=policy.leeway,
                options={"require": ["exp"], "verify_exp": False},
            )
        except jwt.InvalidAudienceError as exc:
            if audience is None:
                raise AuthError(
                    "token is for an audience ('aud') this server does not accept"
                ) from exc
            raise AuthError("token audience ('aud') not accepted") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("token issuer ('iss') not accepted") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"invalid token: no {exc.claim!r} claim") from exc
        except jwt.ImmatureSignatureError as exc:
            raise AuthError("token not valid yet ('nbf' or 'iat' in the future)") from exc
        except (jwt.InvalidTokenError, ValueError, OverflowError, TypeError) as exc:
            raise AuthError("invalid token") from exc
        if _expiry(claims.get("exp")) + policy.leeway <= time.time():
            raise AuthError("token expired")  # before a host's own mapping reads the claims
        return claims


def _present(token: str) -> None:
    if not token:
        raise AuthError("missing token")
    if len(token) > MAX_TOKEN_CHARS:
        raise AuthError("invalid token: too long")


def _header(token: str) -> tuple[str, str | None]:
    """The token's algorithm and key id, read before anything is verified."""
    try:
        header = jwt.get_unverified_header(token)
    except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
        raise AuthError("invalid token") from exc
    alg, kid = header.get("alg"), header.get("kid")
    if not isinstance(alg, str) or not (kid is None or isinstance(kid, str)):
        raise AuthError("invalid token")
    return alg, kid


def _unverified(token: str) -> dict[str, Any]:
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
        raise AuthError("invalid token") from exc
    return claims if isinstance(claims, dict) else {}


def _grant_from_claims(
    claims: dict[str, Any], docs_claim: str, scope_claim: str, leeway: float
) -> Grant:
    docs = _claim(claims, docs_claim)
    if isinstance(docs, str):
        docs = [docs]
    if not isinstance(docs, list) or not all(isinstance(p, str) for p in docs):
        raise AuthError(f"invalid token: {docs_claim!r} must be a list of patterns")
    scope = _scope(_claim(claims, scope_claim), scope_claim)
    expires_at = _expiry(claims.get("exp")) + leeway
    subject = str(claims.get("sub", "anonymous"))
    return Grant(
        subject=subject,
        display_name=str(claims.get("name", subject)),
        patterns=tuple(docs),
        scope=scope,
        expires_at=expires_at,
    )


def _claim(claims: dict[str, Any], name: str) -> Any:
    """``claims[name]``, else a dotted name's path into nested objects ("app_metadata.docs");
    a name that is itself a key wins (namespaced claims such as "https://example.com/docs")."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _scope(value: Any, name: str) -> str:
    # No scope claim: readonly. Least privilege; a token that means to write says so (tether
    # token always writes the claim).
    if value is None:
        return SCOPE_READONLY
    if isinstance(value, str):
        words: Sequence[object] = value.split()
    elif isinstance(value, list):
        words = value
    else:
        raise AuthError("invalid token: unknown scope")
    for scope in _SCOPES:  # read-write first: a token holding both may write
        if scope in words:
            return scope
    raise AuthError(f"invalid token: no tether scope ('read-write' or 'readonly') in {name!r}")


def _words(text: str) -> tuple[str, ...]:
    return tuple(word.strip() for word in text.split(",") if word.strip())


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
