"""Tokens as identity providers issue them (issue 39, item 3): RS256, ES256 and EdDSA checked
against a JWKS served on 127.0.0.1 by the test (keys made here), with aud, iss, leeway and the
claims mapping; the key set kept, refreshed on an unknown kid at most once per interval, and
bounded; a JWKS that is down or hangs costs the tokens that need it, never the server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from websockets.exceptions import InvalidStatus

from tests.hostproc import REPO, HostProcess
from tests.idp import AUDIENCE, ISSUER, IdentityProvider, public_jwk
from tests.rawpeer import MuxPeer, YwsPeer
from tests.serverproc import SECRET, ServerProcess
from tether.collab.auth.jwks import MAX_AGE_BOUNDS, MAX_KEYS, JwksKeys, KeyUnavailable
from tether.collab.auth.tokens import Authenticator, AuthError, JwtPolicy, make_token

pytestmark = pytest.mark.anyio

ALGORITHMS = {"rsa-1": "RS256", "ec-1": "ES256", "ed-1": "EdDSA"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, object], claims: dict[str, object], key: bytes) -> str:
    """A token PyJWT would refuse to make: HS256 signed with whatever bytes are given."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def good_claims(**overrides: object) -> dict[str, object]:
    claims: dict[str, object] = {
        "sub": "user-1",
        "aud": AUDIENCE,
        "iss": ISSUER,
        "exp": int(time.time() + 3600),
        "docs": ["*"],
        "scope": "read-write",
    }
    claims.update(overrides)
    return claims


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        for kid, alg in ALGORITHMS.items():
            provider.add_key(kid, alg)
        provider.add_key("stranger", "RS256", listed=False)  # a key the provider never lists
        yield provider


def authenticator(idp: IdentityProvider, **policy: object) -> Authenticator:
    settings: dict[str, object] = {
        "secret": SECRET,
        "jwks_url": idp.url,
        "audience": (AUDIENCE,),
        "issuer": (ISSUER,),
        "jwks_timeout": 2.0,
        "jwks_min_refresh": 0.0,
    }
    settings.update(policy)
    return Authenticator("jwt", policy=JwtPolicy(**settings))  # type: ignore[arg-type]


async def refusal(auth: Authenticator, token: str) -> str:
    with pytest.raises(AuthError) as refused:
        await auth.grant(token)
    return str(refused.value)


# ---- the checks, in process against the JWKS on 127.0.0.1 -----------------------------------


async def test_rs256_es256_and_eddsa_tokens_are_accepted_through_the_jwks(
    idp: IdentityProvider,
) -> None:
    auth = authenticator(idp)
    try:
        for kid, alg in ALGORITHMS.items():
            grant = await auth.grant(idp.token(kid, docs=["team/*"], sub=f"user-{alg}"))
            assert grant.subject == f"user-{alg}" and grant.writable
            assert grant.allows("team/notes") and not grant.allows("other")
        # HS256 with the shared secret stays as it was, beside them.
        assert (await auth.grant(make_token(SECRET, ["*"]))).writable
    finally:
        await auth.aclose()


async def test_wrong_audience_issuer_expiry_kid_or_key_is_refused_with_its_reason(
    idp: IdentityProvider,
) -> None:
    auth = authenticator(idp)
    try:
        cases = {
            "audience ('aud') not accepted": idp.token("rsa-1", aud="another-api"),
            "issuer ('iss') not accepted": idp.token("ec-1", iss="https://evil.test/"),
            "token expired": idp.token("ed-1", ttl=-60),
            "unknown 'kid'": idp.token("made-up", signer="rsa-1"),
            "invalid token": idp.token("rsa-1", signer="stranger"),  # listed kid, wrong key
            "no 'aud' claim": idp.token("rsa-1", aud=None),
            "does not fit algorithm": idp.token("ec-1", signer="rsa-1"),  # RS256 under an EC kid
        }
        for reason, token in cases.items():
            assert reason in await refusal(auth, token), reason
    finally:
        await auth.aclose()


async def test_alg_none_and_an_hs256_token_signed_with_the_public_key_are_refused(
    idp: IdentityProvider,
) -> None:
    _, rsa_key = idp.keys["rsa-1"]
    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    confused = handmade({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, good_claims(), pem)
    unsigned = f"{b64(json.dumps({'alg': 'none', 'kid': 'rsa-1'}).encode())}."
    unsigned += b64(json.dumps(good_claims()).encode()) + "."
    with_secret, keys_only = authenticator(idp), authenticator(idp, secret="")
    try:
        assert "invalid token" in await refusal(with_secret, confused)
        assert "HS256 tokens are not accepted" in await refusal(keys_only, confused)
        for auth in (with_secret, keys_only):
            assert "'none' is not accepted" in await refusal(auth, unsigned)
    finally:
        await with_secret.aclose()
        await keys_only.aclose()


async def test_a_symmetric_key_in_the_jwks_is_never_used() -> None:
    secret = b"s" * 48
    with IdentityProvider() as idp:
        idp.extra.append({"kty": "oct", "kid": "shared", "k": b64(secret), "alg": "HS256"})
        idp.add_key("rsa-1", "RS256")
        auth = authenticator(idp, secret="")
        try:
            token = handmade({"alg": "HS256", "kid": "shared"}, good_claims(), secret)
            assert "HS256 tokens are not accepted" in await refusal(auth, token)
            forged = jwt.encode(good_claims(), secret, algorithm="HS384", headers={"kid": "shared"})
            assert "'HS384' is not accepted" in await refusal(auth, forged)
        finally:
            await auth.aclose()


async def test_audience_issuer_leeway_and_claims_are_read_as_configured(
    idp: IdentityProvider,
) -> None:
    unchecked = authenticator(idp, audience=(), issuer=())
    mapped = authenticator(
        idp,
        leeway=30.0,
        docs_claim="https://example.com/docs",
        scope_claim="scp",
        audience=("other-api", AUDIENCE),
    )
    nested = authenticator(idp, docs_claim="app_metadata.docs")
    try:
        # No audience configured: a token naming one is refused (it may be for another API).
        assert "audience" in await refusal(unchecked, idp.token("rsa-1"))
        assert (await unchecked.grant(idp.token("rsa-1", aud=None, iss="anyone"))).writable

        namespaced = idp.token(
            "ec-1",
            ttl=-5,  # expired 5 s ago: inside the leeway
            docs=None,
            scope=None,
            scp=["openid", "profile", "read-write"],
            **{"https://example.com/docs": ["team/**"]},
        )
        grant = await mapped.grant(namespaced)
        assert grant.writable and grant.allows("team/a/b") and not grant.allows("else")
        late = idp.token("ec-1", ttl=-120, **{"https://example.com/docs": ["team/**"]})
        assert "token expired" in await refusal(mapped, late)

        oauth = idp.token(
            "ed-1", docs=None, scope="openid readonly email", app_metadata={"docs": "notes"}
        )
        grant = await nested.grant(oauth)
        assert grant.scope == "readonly" and grant.patterns == ("notes",)
        no_scope = idp.token("ed-1", scope="openid email", app_metadata={"docs": ["x"]})
        assert "no tether scope" in await refusal(nested, no_scope)
    finally:
        for auth in (unchecked, mapped, nested):
            await auth.aclose()


async def test_a_host_maps_verified_claims_itself(idp: IdentityProvider) -> None:
    auth = authenticator(idp)
    try:
        claims = await auth.claims(idp.token("rsa-1", docs=None, role="editor"))
        assert claims["role"] == "editor" and claims["sub"] == "user-1"
        with pytest.raises(AuthError, match="invalid token"):
            await auth.claims(idp.token("rsa-1", signer="stranger", role="editor"))
        with pytest.raises(AuthError, match="token expired"):
            await auth.claims(idp.token("rsa-1", ttl=-60, role="editor"))
    finally:
        await auth.aclose()


# ---- the key set: kept, refreshed, bounded -------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_made_up_kids_fetch_the_jwks_at_most_once_per_interval() -> None:
    with IdentityProvider() as idp:
        idp.add_key("rsa-1", "RS256")
        clock = Clock()
        keys = JwksKeys(idp.url, timeout=2.0, min_refresh=30.0, clock=clock)
        try:
            await keys.key("rsa-1", "RS256")
            assert idp.requests == 1
            for n in range(200):
                with pytest.raises(KeyUnavailable, match="unknown 'kid'"):
                    await keys.key(f"made-up-{n}", "RS256")
            assert idp.requests == 1  # the set was fetched less than 30 s ago
            clock.now += 31
            idp.add_key("rsa-2", "RS256")  # rotation: a new kid appears
            assert (await keys.key("rsa-2", "RS256")).algorithm_name == "RS256"
            assert idp.requests == 2
            for n in range(200):
                with pytest.raises(KeyUnavailable, match="unknown 'kid'"):
                    await keys.key(f"again-{n}", "RS256")
            clock.now += 31
            with pytest.raises(KeyUnavailable, match="unknown 'kid'"):
                await keys.key("later", "RS256")
            assert idp.requests == 3  # one fetch per 30 s, however many kids were made up
        finally:
            await keys.aclose()


async def test_the_set_is_kept_for_its_max_age_within_bounds() -> None:
    for header, kept in [
        ("public, max-age=120", 120.0),
        ("max-age=1", MAX_AGE_BOUNDS[0]),
        ("max-age=999999999", MAX_AGE_BOUNDS[1]),
        ("no-store", MAX_AGE_BOUNDS[0]),
    ]:
        with IdentityProvider(cache_control=header) as idp:
            idp.add_key("rsa-1", "RS256")
            clock = Clock()
            keys = JwksKeys(idp.url, timeout=2.0, min_refresh=0.0, clock=clock)
            try:
                await keys.key("rsa-1", "RS256")
                clock.now += kept - 1
                await keys.key("rsa-1", "RS256")
                assert idp.requests == 1, header  # still fresh
                clock.now += 2
                await keys.key("rsa-1", "RS256")  # stale: served at once, fetched behind
                assert keys.fetches == 2, header
                await keys.refresh()  # joins that fetch
                assert idp.requests == 2, header
            finally:
                await keys.aclose()


async def test_an_outage_keeps_the_keys_it_had_and_a_hang_costs_at_most_the_timeout() -> None:
    with IdentityProvider(cache_control="max-age=60") as idp:
        idp.add_key("rsa-1", "RS256")
        clock = Clock()
        keys = JwksKeys(idp.url, timeout=0.5, min_refresh=0.0, clock=clock)
        try:
            await keys.key("rsa-1", "RS256")
            idp.mode = "down"
            clock.now += 61
            await keys.key("rsa-1", "RS256")  # stale and the refresh fails: still served
            await keys.refresh()
            assert (await keys.key("rsa-1", "RS256")).algorithm_name == "RS256"
            idp.mode = "hang"
            with anyio.fail_after(5):  # the check gives up after the 0.5 s timeout
                with pytest.raises(KeyUnavailable, match="unknown 'kid'"):
                    await keys.key("rotated", "RS256")
        finally:
            idp.release()
            await keys.aclose()


async def test_a_huge_answer_or_too_many_keys_are_bounded() -> None:
    with IdentityProvider() as idp:
        idp.add_key("rsa-1", "RS256")
        ec = idp.add_key("ec-1", "ES256", listed=False)
        template = public_jwk(ec, "x", "ES256")
        idp.extra = [{**template, "kid": f"k{n}"} for n in range(MAX_KEYS + 50)]
        keys = JwksKeys(idp.url, timeout=2.0, min_refresh=0.0)
        try:
            await keys.refresh()
            assert keys.cached("rsa-1", "RS256") is not None
            assert keys.cached(f"k{MAX_KEYS - 2}", "ES256") is not None
            with pytest.raises(KeyUnavailable):
                keys.cached(f"k{MAX_KEYS + 10}", "ES256")  # past the bound: never read
            idp.extra = [{**template, "kid": f"k{n}", "pad": "x" * 1000} for n in range(300)]
            clock_fresh = JwksKeys(idp.url, timeout=2.0, min_refresh=0.0)
            with pytest.raises(KeyUnavailable, match="could not be fetched"):
                await clock_fresh.key("rsa-1", "RS256")  # a 300 KB answer is refused
            await clock_fresh.aclose()
        finally:
            await keys.aclose()


# ---- the real server: /ws, /yjs and REST ---------------------------------------------------


@pytest.fixture(scope="module")
def jwks_server(
    idp: IdentityProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("jwks"),
        jwt_jwks_url=idp.url,
        jwt_audience=AUDIENCE,
        jwt_issuer=ISSUER,
        jwt_jwks_min_refresh=0,
        jwt_jwks_timeout=2,
    ) as server:
        yield server


async def test_rs256_es256_and_eddsa_open_documents_on_ws_yjs_and_rest(
    idp: IdentityProvider, jwks_server: ServerProcess
) -> None:
    for kid, alg in ALGORITHMS.items():
        name = unique(alg.lower())
        token = idp.token(kid, docs=[name])
        with anyio.fail_after(20):
            async with await MuxPeer.connect(jwks_server.ws_url) as peer:
                doc = await peer.open(name, token)
                assert doc.scope == "read-write"
                await doc.append(f"signed with {alg}")
                await doc.wait_acked()
            async with await YwsPeer.connect(jwks_server.yjs_url, name, token) as yws:
                await yws.single.wait_text(f"signed with {alg}")
        async with httpx.AsyncClient(base_url=jwks_server.http_url) as http:
            reply = await http.get(
                f"/api/documents/{name}", headers={"Authorization": f"Bearer {token}"}
            )
        assert reply.status_code == 200, reply.text
        assert reply.json()["text"] == f"signed with {alg}"


async def test_the_server_refuses_bad_tokens_everywhere_and_accepts_a_rotated_key(
    idp: IdentityProvider, jwks_server: ServerProcess
) -> None:
    name = unique("refused")
    bad = {
        "audience": idp.token("rsa-1", aud="another-api"),
        "issuer": idp.token("ec-1", iss="https://evil.test/"),
        "expired": idp.token("ed-1", ttl=-60),
        "unknown 'kid'": idp.token("made-up", signer="rsa-1"),
        "invalid token": idp.token("rsa-1", signer="stranger"),
    }
    with anyio.fail_after(30):
        async with await MuxPeer.connect(jwks_server.ws_url) as peer:
            for n, (reason, token) in enumerate(bad.items()):
                doc = await peer.attach(f"{name}-{n}", token)
                await doc.wait(lambda doc=doc: doc.denied is not None, what=reason)
                assert doc.denied is not None and reason in doc.denied, doc.denied
            idp.add_key(f"rotated-{name}", "ES256")  # the provider rotates its keys
            rotated = await peer.open(f"{name}-rotated", idp.token(f"rotated-{name}"))
            assert rotated.scope == "read-write"
        async with httpx.AsyncClient(base_url=jwks_server.http_url) as http:
            for token in bad.values():
                with pytest.raises(InvalidStatus) as upgrade:
                    async with await YwsPeer.connect(jwks_server.yjs_url, name, token):
                        pass
                assert upgrade.value.response.status_code == 403
                reply = await http.get(
                    f"/api/documents/{name}", headers={"Authorization": f"Bearer {token}"}
                )
                assert reply.status_code == 401


@pytest.mark.parametrize("outage", ["down", "hang"])
async def test_a_jwks_outage_refuses_its_tokens_clearly_and_the_server_goes_on(
    outage: str, tmp_path: Path
) -> None:
    with IdentityProvider() as idp:
        idp.add_key("rsa-1", "RS256")
        idp.mode = outage
        with ServerProcess(
            tmp_path, jwt_jwks_url=idp.url, jwt_audience=AUDIENCE, jwt_jwks_timeout=1
        ) as server:
            name = unique("outage")
            with anyio.fail_after(20):
                async with (
                    await MuxPeer.connect(server.ws_url) as waiting,
                    await MuxPeer.connect(server.ws_url) as editor,
                ):
                    stuck = await waiting.attach(name, idp.token("rsa-1", docs=[name]))
                    # Meanwhile an HS256 editor on another socket works as ever.
                    doc = await editor.open(name, server.token([name]))
                    await doc.append("still serving")
                    await doc.wait_acked()
                    await stuck.wait(lambda: stuck.denied is not None, what="the refusal")
                    # A flood of made-up key ids fetches nothing more within the 30 s.
                    flood = [
                        await waiting.attach(f"{name}-{n}", idp.token(f"x{n}", signer="rsa-1"))
                        for n in range(20)
                    ]
                    for doc in flood:
                        await doc.wait(lambda doc=doc: doc.denied is not None, what="refusal")
            assert stuck.denied == (
                "the identity provider's signing keys (JWKS) could not be fetched"
            )
            assert idp.requests == 1  # the fetch at start, and no other
            assert server.health()["status"] == "ok"
            assert server.proc is not None and server.proc.poll() is None
            idp.release()


async def test_a_host_app_maps_its_providers_claims_in_its_authenticate_callback(
    idp: IdentityProvider, tmp_path: Path
) -> None:
    host_app = REPO / "tests" / "hosts" / "claims_host.py"
    with HostProcess(
        host_app, tmp_path, "--jwks-url", idp.url, ready_path="/collab/health"
    ) as host:
        claims = {"docs": None, "scope": None, "https://example.com/team": "blue"}
        editor = idp.token("ec-1", permissions=["editor"], **claims)
        viewer = idp.token("ed-1", permissions=[], **claims)
        forged = idp.token("rsa-1", signer="stranger", permissions=["editor"], **claims)
        with anyio.fail_after(20):
            async with await MuxPeer.connect(host.ws("/collab/ws")) as peer:
                doc = await peer.open("blue/plan", editor)
                assert doc.scope == "read-write"
                assert (await peer.open("blue/notes", viewer)).scope == "readonly"
                other = await peer.attach("red/plan", editor)
                await other.wait(lambda: other.denied is not None, what="the refusal")
                bad = await peer.attach("blue/x", forged)
                await bad.wait(lambda: bad.denied is not None, what="the refusal")
        assert other.denied == "document not allowed by token"
        assert bad.denied is not None and "invalid token" in bad.denied
