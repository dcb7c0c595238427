"""CSS injection through presence (issue 10, item 12), against the real server: a readonly
peer's hostile ``user.color`` never reaches another editor, on /ws or /yjs; the HTML pages
carry a Content-Security-Policy.
"""

from __future__ import annotations

import json
import uuid

import anyio
import httpx
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer, YwsPeer
from tests.serverproc import ServerProcess
from tether.protocol.wire.messages import Awareness
from tether.protocol.wire.sync_payloads import AwarenessEntry, encode_awareness

pytestmark = pytest.mark.anyio

HOSTILE = "red;background:url(http://attacker.invalid/x.png)"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_a_readonly_peers_css_colour_never_reaches_other_editors(
    server: ServerProcess,
) -> None:
    name = unique("css")
    before = metric_value(
        await metrics_text(server), "tether_limit_refusals_total", limit="presence_user_fields"
    )
    with anyio.fail_after(15):
        async with (
            await MuxPeer.connect(server.ws_url) as attacker,
            await MuxPeer.connect(server.ws_url) as victim,
            await YwsPeer.connect(server.yjs_url, name, server.token([name])) as plain,
        ):
            a = await attacker.open(name, server.token([name], scope="readonly"))
            v = await victim.open(name, server.token([name]))
            await a.set_awareness(
                {
                    "user": {"name": "x" * 10_000, "color": HOSTILE, "colorLight": HOSTILE},
                    "cursor": None,
                }
            )
            await v.wait(lambda: a.doc.client_id in v.awareness, what="the attacker's presence")
            await plain.single.wait(lambda: a.doc.client_id in plain.single.awareness)
            # A second client id in the same frame whose state is no JSON object: dropped.
            junk = AwarenessEntry(a.doc.client_id + 1, 1, '"not an object"')
            good = AwarenessEntry(a.doc.client_id + 2, 1, '{"user":{"color":"#30bced"}}')
            await attacker.send(Awareness(name, encode_awareness([junk, good])).encode())
            await v.wait(lambda: good.client_id in v.awareness, what="the good entry")
            received = json.loads(v.awareness[a.doc.client_id])
            relayed = json.loads(plain.single.awareness[a.doc.client_id])
            # A newcomer's snapshot is the stored, cleaned state too.
            async with await MuxPeer.connect(server.ws_url) as late:
                n = await late.open(name, server.token([name]))
                await n.wait(lambda: a.doc.client_id in n.awareness, what="snapshot")
                snapshot = json.loads(n.awareness[a.doc.client_id])
    for state in (received, relayed, snapshot):
        assert state == {"user": {"name": "x" * 64}, "cursor": None}, state
    assert junk.client_id not in v.awareness
    assert json.loads(v.awareness[good.client_id]) == {"user": {"color": "#30bced"}}
    after = metric_value(
        await metrics_text(server), "tether_limit_refusals_total", limit="presence_user_fields"
    )
    assert after - before == 2  # the cleaned entry and the dropped one


async def test_html_pages_carry_a_content_security_policy(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        for path in ("/", "/d/some-doc"):
            page = await http.get(path)
            assert page.status_code == 200
            policy = page.headers["content-security-policy"]
            directives = dict((d.split()[0], d.split()[1:]) for d in policy.split(";") if d.strip())
            assert directives["default-src"] == ["'self'"]
            assert directives["img-src"] == ["'self'", "data:"]  # no url() to elsewhere
            assert directives["object-src"] == ["'none'"]
            assert directives["frame-ancestors"] == ["'none'"]
            nonce = next(s for s in directives["script-src"] if s.startswith("'nonce-"))
            assert f'<script nonce="{nonce[7:-1]}">' in page.text  # the inline config runs
            assert page.headers["referrer-policy"] == "no-referrer"  # ?token= stays put
            assert page.headers["x-content-type-options"] == "nosniff"
