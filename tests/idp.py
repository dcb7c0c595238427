"""A local identity provider for tests: RSA, EC and Ed25519 keys made here (cryptography), their
public halves served as a JWKS on 127.0.0.1 from a thread, and tokens signed with them.

    with IdentityProvider() as idp:
        idp.add_key("rsa-1", "RS256")
        token = idp.token("rsa-1", docs=["notes"])
        ServerProcess(..., jwt_jwks_url=idp.url, jwt_audience=AUDIENCE, jwt_issuer=ISSUER)

``mode`` makes the JWKS misbehave: ``"down"`` answers 503, ``"hang"`` answers nothing until
the provider stops (or ``release()``); ``requests`` counts the fetches it saw.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://idp.test/"
AUDIENCE = "tether-api"


def private_key(alg: str) -> Any:
    if alg.startswith(("RS", "PS")):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(alg)


def public_jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, "use": "sig", "alg": alg}


class IdentityProvider:
    def __init__(self, cache_control: str = "max-age=300") -> None:
        self.keys: dict[str, tuple[str, Any]] = {}  # kid -> (alg, private key)
        self.listed: list[str] = []  # the kids the JWKS shows
        self.extra: list[dict[str, Any]] = []  # raw JWKs shown as they are
        self.cache_control = cache_control
        self.mode = "up"
        self.requests = 0
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/.well-known/jwks.json"

    def add_key(self, kid: str, alg: str, *, listed: bool = True) -> Any:
        key = private_key(alg)
        self.keys[kid] = (alg, key)
        if listed:
            with self._lock:
                self.listed.append(kid)
        return key

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            shown = [public_jwk(self.keys[kid][1], kid, self.keys[kid][0]) for kid in self.listed]
            return {"keys": shown + self.extra}

    def token(
        self,
        kid: str | None,
        *,
        docs: list[str] | str | None = None,
        scope: object = "read-write",
        ttl: float = 3600.0,
        signer: str | None = None,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token under ``kid`` (its header), signed with ``signer``'s key (default: the
        kid's own); aud, iss and exp are the good ones unless given."""
        alg, key = self.keys[signer or kid or ""]
        body: dict[str, Any] = {
            "sub": "user-1",
            "aud": AUDIENCE,
            "iss": ISSUER,
            "exp": int(time.time() + ttl),
            "docs": docs if docs is not None else ["*"],
            "scope": scope,
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        header = {"kid": kid} if kid is not None else {}
        return jwt.encode(body, key, algorithm=alg, headers={**header, **(headers or {})})

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> IdentityProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                provider.requests += 1
                if provider.mode == "hang":
                    provider._released.wait(60)
                    return
                if provider.mode == "down":
                    self.send_response(503)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = json.dumps(provider.jwks()).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("cache-control", provider.cache_control)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
