"""An identity provider's signing keys (its JWKS URL), fetched, kept and bounded: the public
keys that RS256, ES256 and EdDSA tokens are checked against.

Knows HTTP (httpx) and JWK, nothing of tokens' claims or sockets. The set is kept for the
response's ``Cache-Control: max-age`` (within bounds) and fetched again behind a check that
still has a key (a stale key serves until the new set arrives, and while the URL is down); a
``kid`` it does not hold fetches it at once, but never more than once per ``min_refresh``
seconds, so tokens with made-up ids cannot make the server hammer the provider. A check waits
for a fetch at most ``timeout`` seconds; one fetch serves every check waiting on it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWKError

log = logging.getLogger(__name__)

# What one response may cost: its bytes, the keys taken from it, an RSA modulus's bits (a
# verification costs the cube of it), and how long the set is kept (Cache-Control, bounded).
MAX_RESPONSE_BYTES = 256 * 1024
MAX_KEYS = 64
MAX_KID_CHARS = 256
RSA_BITS = (2048, 8192)
MAX_AGE_BOUNDS = (60.0, 24 * 3600.0)
DEFAULT_MAX_AGE = 600.0

# The algorithms a JWKS key may verify, and the key type (and curves) each needs. Never an
# HMAC one: a public key must not become a shared secret (algorithm confusion).
ALGORITHMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "RS256": ("RSA", ()),
    "RS384": ("RSA", ()),
    "RS512": ("RSA", ()),
    "PS256": ("RSA", ()),
    "PS384": ("RSA", ()),
    "PS512": ("RSA", ()),
    "ES256": ("EC", ("P-256",)),
    "ES384": ("EC", ("P-384",)),
    "ES512": ("EC", ("P-521",)),
    "EdDSA": ("OKP", ("Ed25519", "Ed448")),
}

_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d{1,10})", re.IGNORECASE)


class KeyUnavailable(Exception):
    """No key verifies this token; ``str(exc)`` is safe to show the client."""


@dataclass(frozen=True, slots=True)
class KeySet:
    """One fetched set: the usable keys by id, and until when it is fresh (monotonic)."""

    keys: dict[str, dict[str, Any]]
    fresh_until: float


class JwksKeys:
    """The keys at ``url``. ``key(kid, alg)`` is what a token check awaits; ``aclose()`` ends
    the fetch in flight and the HTTP client (a later ``key`` opens a new one)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        min_refresh: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.min_refresh = min_refresh
        self.fetches = 0  # attempts, for tests and the log
        self._clock = clock
        self._set: KeySet | None = None
        self._built: dict[tuple[str, str], PyJWK] = {}
        self._last_attempt: float | None = None
        self._last_error = ""
        self._fetch: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    async def key(self, kid: str | None, alg: str) -> PyJWK:
        """The key that verifies a token signed with ``alg`` under ``kid``; raises
        KeyUnavailable with the reason."""
        if alg not in ALGORITHMS:
            raise KeyUnavailable(f"algorithm {alg[:16]!r} is not accepted")
        jwk = self._lookup(kid)
        if jwk is not None:
            if self._stale() and self._may_fetch():
                self._start_fetch()  # behind this check: the stale key serves meanwhile
        elif self._fetch is not None or self._may_fetch():
            await self._wait_fetch(self._start_fetch())
            jwk = self._lookup(kid)
        if jwk is None:
            raise KeyUnavailable(self._why_missing(kid))
        return self._build(jwk, alg)

    def cached(self, kid: str | None, alg: str) -> PyJWK:
        """The key from the set at hand, never fetching; raises KeyUnavailable."""
        if alg not in ALGORITHMS:
            raise KeyUnavailable(f"algorithm {alg[:16]!r} is not accepted")
        jwk = self._lookup(kid)
        if jwk is None:
            raise KeyUnavailable(self._why_missing(kid))
        return self._build(jwk, alg)

    async def refresh(self) -> None:
        """Fetch now (at start: the first token then finds the keys)."""
        await self._wait_fetch(self._start_fetch())

    def start(self) -> None:
        """Fetch in the background (at server start); errors are logged, not raised."""
        self._start_fetch()

    async def aclose(self) -> None:
        fetch, self._fetch = self._fetch, None
        if fetch is not None:
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # ---- the set -------------------------------------------------------------------------

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if self._set is None:
            return None
        keys = self._set.keys
        if kid is None:
            # A provider with one key may leave the id out of its tokens.
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def _stale(self) -> bool:
        return self._set is not None and self._clock() >= self._set.fresh_until

    def _may_fetch(self) -> bool:
        last = self._last_attempt
        return last is None or self._clock() - last >= self.min_refresh

    def _why_missing(self, kid: str | None) -> str:
        if self._set is None:
            return "the identity provider's signing keys (JWKS) could not be fetched"
        if kid is None:
            return "token names no signing key ('kid') and the key set holds several"
        return "token signed with a key the identity provider does not list (unknown 'kid')"

    def _build(self, jwk: dict[str, Any], alg: str) -> PyJWK:
        """The key for ``alg``, made once per key and algorithm; the key's type and curve (and
        its own ``alg``, if it names one) must be the algorithm's."""
        kid = str(jwk.get("kid", ""))
        built = self._built.get((kid, alg))
        if built is not None:
            return built
        kty, curves = ALGORITHMS[alg]
        fits = jwk["kty"] == kty and (not curves or jwk.get("crv") in curves)
        if not fits or jwk.get("alg") not in (None, alg):
            raise KeyUnavailable(f"the signing key does not fit algorithm {alg}")
        try:
            built = PyJWK(jwk, algorithm=alg)
        except (PyJWKError, ValueError, TypeError) as exc:
            raise KeyUnavailable("the identity provider's signing key is not usable") from exc
        if len(self._built) >= 4 * MAX_KEYS:
            self._built.clear()
        self._built[(kid, alg)] = built
        return built

    # ---- fetching ------------------------------------------------------------------------

    def _start_fetch(self) -> asyncio.Task[None]:
        if self._fetch is None:
            self._last_attempt = self._clock()
            self.fetches += 1
            self._fetch = asyncio.get_running_loop().create_task(self._run_fetch())
        return self._fetch

    async def _wait_fetch(self, fetch: asyncio.Task[None]) -> None:
        # Shielded: a check that stops waiting leaves the fetch to the others (and the cache).
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(fetch), self.timeout)

    async def _run_fetch(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                body, max_age = await self._get()
            keys = parse_key_set(body)
        except asyncio.CancelledError:
            raise
        except (httpx.HTTPError, TimeoutError, ValueError, OSError) as exc:
            reason = _reason(exc)
            if reason != self._last_error:
                log.warning("cannot fetch the JWKS at %s: %s", self.url, reason)
            self._last_error = reason
        else:
            if self._last_error:
                log.info("fetched the JWKS at %s again (%d keys)", self.url, len(keys))
            self._last_error = ""
            self._set = KeySet(keys, self._clock() + max_age)
            self._built.clear()
        finally:
            self._fetch = None

    async def _get(self) -> tuple[bytes, float]:
        client = self._client
        if client is None:
            client = self._client = httpx.AsyncClient(
                timeout=self.timeout, follow_redirects=True, max_redirects=3
            )
        headers = {"accept": "application/json"}
        async with client.stream("GET", self.url, headers=headers) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
                raise ValueError(f"the answer is over {MAX_RESPONSE_BYTES} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise ValueError(f"the answer is over {MAX_RESPONSE_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks), max_age_of(response.headers.get("cache-control", ""))


def parse_key_set(body: bytes) -> dict[str, dict[str, Any]]:
    """The signing keys of a JWKS document by id: RSA (2048 to 8192 bits), EC and OKP keys
    meant for signatures, at most MAX_KEYS; others are left out. Raises ValueError when the
    document is not a key set or holds none of them."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError("the answer is not JSON") from exc
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise ValueError("the answer has no 'keys' list")
    keys: dict[str, dict[str, Any]] = {}
    for jwk in listed:
        if len(keys) >= MAX_KEYS:
            log.warning("the JWKS lists more than %d keys: the rest are ignored", MAX_KEYS)
            break
        if _usable(jwk):
            keys.setdefault(str(jwk.get("kid", "")), jwk)
    if not keys:
        raise ValueError("the key set holds no usable signing key (RSA, EC or OKP)")
    return keys


def _usable(jwk: object) -> bool:
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
        return False
    kid = jwk.get("kid", "")
    if not isinstance(kid, str) or len(kid) > MAX_KID_CHARS:
        return False
    kty = jwk.get("kty")
    if kty == "RSA":
        bits = _rsa_bits(jwk.get("n"))
        return RSA_BITS[0] <= bits <= RSA_BITS[1]
    return kty in ("EC", "OKP")


def _rsa_bits(n: object) -> int:
    if not isinstance(n, str) or len(n) > RSA_BITS[1] // 6 + 4:
        return 0
    try:
        raw = base64.urlsafe_b64decode(n + "=" * (-len(n) % 4))
    except ValueError:
        return 0
    return int.from_bytes(raw, "big").bit_length()


def max_age_of(cache_control: str) -> float:
    """How long a set is kept: the header's max-age within MAX_AGE_BOUNDS (no-store and
    no-cache: the lower bound; none given: DEFAULT_MAX_AGE)."""
    lowered = cache_control.lower()
    if "no-store" in lowered or "no-cache" in lowered:
        return MAX_AGE_BOUNDS[0]
    match = _MAX_AGE.search(cache_control)
    if match is None:
        return DEFAULT_MAX_AGE
    return min(max(float(match.group(1)), MAX_AGE_BOUNDS[0]), MAX_AGE_BOUNDS[1])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError | httpx.TimeoutException):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return text[:200]
