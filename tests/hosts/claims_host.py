"""A host app that maps its identity provider's claims itself (docs/embedding.md, "Tokens from
your identity provider"): the token's signature, aud and iss are checked by tether against the
JWKS at ``--jwks-url``, and a team claim and a permissions list become the grant. Run by
tests/test_jwks.py."""

from __future__ import annotations

import argparse

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from tether import AuthRequest, Grant, Settings, TetherServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--jwks-url", required=True)
args = parser.parse_args()

collab = TetherServer(
    Settings(
        ai_provider="none",
        data_dir=args.data_dir,
        jwt_jwks_url=args.jwks_url,
        jwt_audience="tether-api",
        jwt_issuer="https://idp.test/",
    ),
    authenticate=lambda request: grant_for(request),
)


async def grant_for(request: AuthRequest) -> Grant:
    claims = await collab.authenticator.claims(request.token)  # verified, or AuthError
    team = claims["https://example.com/team"]
    scope = "read-write" if "editor" in claims.get("permissions", []) else "readonly"
    return Grant(
        claims["sub"], claims.get("name", claims["sub"]), (f"{team}/**",), scope, claims["exp"]
    )


async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
    async with collab:
        yield


app = Starlette(routes=[Mount("/collab", app=collab)], lifespan=lifespan)
uvicorn.run(app, host="127.0.0.1", port=args.port)
