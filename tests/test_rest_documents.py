"""Documents over REST (issue 12): read/export, delete, import, named versions, /openapi.json;
all through the real server over real HTTP and sockets, every response checked against the
OpenAPI description the server serves."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from pycrdt import Doc, Text

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import TEXT, MuxPeer, YwsPeer
from tests.serverproc import ServerProcess
from tests.test_update_guard import nested_arrays

pytestmark = pytest.mark.anyio

OCTETS = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("rest")
    with ServerProcess(
        data,
        unload_grace=0.2,
        max_frame_bytes=256 * 1024,
        max_markdown_bytes=128 * 1024,
        max_versions_per_document=3,
        max_version_bytes_per_document=64 * 1024,
    ) as running:
        yield running


class Checked:
    """An httpx client whose every JSON answer is validated against /openapi.json."""

    def __init__(self, http: httpx.AsyncClient, spec: dict[str, Any]) -> None:
        self.http = http
        self.spec = spec
        self.checked: set[tuple[str, str, int]] = set()

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = await self.http.request(method, url, **kwargs)
        self.validate(method, url, response)
        return response

    def validate(self, method: str, url: str, response: httpx.Response) -> None:
        template = _template(url.split("?")[0])
        operation = self.spec["paths"][template][method.lower()]
        documented = operation["responses"]
        assert str(response.status_code) in documented, (method, url, response.status_code)
        content = documented[str(response.status_code)]["content"]
        media = response.headers["content-type"].split(";")[0]
        assert media in content, (method, url, media)
        if media == "application/json":
            schema = {**content[media]["schema"], "components": self.spec["components"]}
            jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)
        self.checked.add((method.upper(), template, response.status_code))


def _template(path: str) -> str:
    for prefix in ("/api/documents/", "/api/versions/", "/api/restore/"):
        if path.startswith(prefix):
            return prefix + "{name}"
    return path


@pytest.fixture
async def api(server: ServerProcess) -> AsyncIterator[Checked]:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        spec = (await http.get("/openapi.json")).json()
        http.headers["Authorization"] = f"Bearer {server.token()}"
        yield Checked(http, spec)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def update_with_text(text: str, client_id: int | None = None) -> bytes:
    doc = Doc() if client_id is None else Doc(client_id=client_id)
    doc.get(TEXT, type=Text).insert(0, text)
    return doc.get_update()


async def loaded(api: Checked) -> int:
    return int((await api.request("GET", "/health")).json()["documents_loaded"])


# ---- read and export -----------------------------------------------------------------------


async def test_an_unknown_document_is_404_and_is_not_loaded(api: Checked) -> None:
    before = await loaded(api)
    for export in ("json", "text", "yjs"):
        reply = await api.request("GET", f"/api/documents/never-made?format={export}")
        assert reply.status_code == 404
        assert reply.json()["error"] == "no such document"
    assert await loaded(api) == before


async def test_a_document_an_editor_opened_but_never_edited_is_unknown(
    server: ServerProcess, api: Checked
) -> None:
    async with await MuxPeer.connect(server.ws_url) as peer:
        await peer.open("opened-only", server.token())
        assert (await api.request("GET", "/api/documents/opened-only")).status_code == 404
        await peer.doc("opened-only").append("now it exists")
        await peer.doc("opened-only").wait_acked()
        reply = await api.request("GET", "/api/documents/opened-only")
        assert reply.json() == {
            "name": "opened-only",
            "kind": "plain",
            "text": "now it exists",
            "peers": 1,
        }


async def test_exports_as_text_markdown_and_a_yjs_update_that_rebuilds_the_document(
    api: Checked,
) -> None:
    text = "# Plan\n\n- ship 🚀\n"
    reply = await api.request(
        "PUT", "/api/documents/team/plan", content=update_with_text(text), headers=OCTETS
    )
    assert reply.status_code == 200, reply.text
    plain = await api.request("GET", "/api/documents/team/plan?format=text")
    assert plain.headers["content-type"] == "text/plain; charset=utf-8"
    assert plain.text == text
    assert plain.headers["x-content-type-options"] == "nosniff"
    markdown = await api.request("GET", "/api/documents/team/plan?format=markdown")
    assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"
    assert markdown.headers["content-disposition"] == 'attachment; filename="plan.md"'
    assert markdown.text == text
    backup = await api.request("GET", "/api/documents/team/plan?format=yjs")
    assert backup.headers["content-type"] == "application/octet-stream"
    assert backup.headers["content-disposition"] == 'attachment; filename="plan.yjs"'
    rebuilt = Doc()
    rebuilt.apply_update(backup.content)
    assert str(rebuilt.get(TEXT, type=Text)) == text


@pytest.mark.parametrize("export", ["pdf", "", "TEXT", "x" * 300])
async def test_an_unknown_format_is_400(api: Checked, export: str) -> None:
    await api.request("PUT", "/api/documents/fmt", content=update_with_text("x"), headers=OCTETS)
    reply = await api.request("GET", f"/api/documents/fmt?format={quote(export)}")
    assert reply.status_code == 400
    assert "unknown format" in reply.json()["error"]


# ---- delete ----------------------------------------------------------------------------------


async def test_delete_tells_connected_editors_and_a_later_open_is_fresh(
    server: ServerProcess, api: Checked
) -> None:
    token = server.token()
    async with (
        await MuxPeer.connect(server.ws_url) as mux,
        await YwsPeer.connect(server.yjs_url, "doomed", token) as yws,
    ):
        doc = await mux.open("doomed", token)
        await doc.append("secret plans")
        await doc.wait_acked()
        await yws.single.wait_text("secret plans")
        created = await api.request("POST", "/api/versions/doomed", json={"label": "before"})
        assert created.status_code == 201
        reply = await api.request("DELETE", "/api/documents/doomed")
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"name": "doomed", "deleted": True}
        await doc.wait(lambda: doc.denied is not None, 10, "PermissionDenied")
        assert doc.denied == "document deleted"
        assert await yws.wait_closed() == 4410
        # The mux socket stays usable; the deleted channel is gone, a fresh open is empty.
        assert await mux.alive()
    assert (await api.request("GET", "/api/documents/doomed")).status_code == 404
    assert (await api.request("GET", "/api/versions/doomed")).status_code == 404
    listed = (await api.request("GET", "/api/documents")).json()["documents"]
    assert "doomed" not in [d["name"] for d in listed]
    async with await MuxPeer.connect(server.ws_url) as again:
        fresh = await again.open("doomed", token)
        assert str(fresh) == ""
        await fresh.append("new life")
        await fresh.wait_acked()
    assert (await api.request("GET", "/api/documents/doomed?format=text")).text == "new life"


async def test_delete_needs_a_read_write_token_for_that_document(
    server: ServerProcess, api: Checked
) -> None:
    await api.request("PUT", "/api/documents/kept", content=update_with_text("k"), headers=OCTETS)
    readonly = auth(server.token(["kept"], scope="readonly"))
    other = auth(server.token(["elsewhere/*"]))
    assert (await api.request("DELETE", "/api/documents/kept", headers=readonly)).status_code == 403
    assert (await api.request("DELETE", "/api/documents/kept", headers=other)).status_code == 403
    assert (
        await api.request("DELETE", "/api/documents/kept", headers={"Authorization": "Bearer x"})
    ).status_code == 401
    assert (await api.request("DELETE", "/api/documents/nothing-here")).status_code == 404
    assert (await api.request("GET", "/api/documents/kept?format=text")).text == "k"


async def test_a_bare_token_is_taken_as_tiptap_cloud_scripts_send_it_and_other_schemes_are_not(
    server: ServerProcess, api: Checked
) -> None:
    await api.request("PUT", "/api/documents/bare", content=update_with_text("b"), headers=OCTETS)
    token = server.token(["bare"], scope="readonly")
    bare = await api.request(
        "GET", "/api/documents/bare?format=text", headers={"Authorization": token}
    )
    assert bare.status_code == 200 and bare.text == "b"
    wrote = await api.request(
        "PUT",
        "/api/documents/bare",
        content=b"x",
        headers={"Authorization": token, "Content-Type": "text/plain"},
    )
    assert wrote.status_code == 403  # the bare token is the same readonly grant
    basic = {"Authorization": f"Basic {token}"}
    assert (await api.request("GET", "/api/documents/bare", headers=basic)).status_code == 401
    assert (await api.request("GET", "/api/documents/bare?format=text")).text == "b"


# ---- import ----------------------------------------------------------------------------------


async def test_an_imported_update_is_a_crdt_change_connected_editors_follow(
    server: ServerProcess, api: Checked
) -> None:
    async with await MuxPeer.connect(server.ws_url) as mux:
        doc = await mux.open("imported", server.token())
        await doc.append("mine. ")
        await doc.wait_acked()
        reply = await api.request(
            "POST", "/api/documents/imported", content=update_with_text("theirs."), headers=OCTETS
        )
        assert reply.status_code == 200, reply.text
        await doc.wait_text(lambda t: "mine. " in t and "theirs." in t)
        merged = str(doc)
    assert (await api.request("GET", "/api/documents/imported?format=text")).text == merged


async def test_bad_imports_are_refused_with_the_reason_and_change_nothing(
    server: ServerProcess, api: Checked
) -> None:
    name = "/api/documents/guarded"
    await api.request("PUT", name, content=update_with_text("safe"), headers=OCTETS)
    before = await metrics_text(server)
    garbage = await api.request("PUT", name, content=b"\xff" * 64, headers=OCTETS)
    assert garbage.status_code == 400 and "malformed" in garbage.json()["error"]
    deep = await api.request("PUT", name, content=nested_arrays(200), headers=OCTETS)
    assert deep.status_code == 422 and "nest" in deep.json()["error"]
    # An update that depends on one the server never saw: missing dependencies.
    source = Doc(client_id=777)
    text = source.get(TEXT, type=Text)
    text.insert(0, "first")
    seen = source.get_state()
    text.insert(5, " second")
    orphan = source.get_update(seen)
    missing = await api.request("PUT", name, content=orphan, headers=OCTETS)
    assert missing.status_code == 422, missing.text
    huge = await api.request("PUT", name, content=b"\x00" * (300 * 1024), headers=OCTETS)
    assert huge.status_code == 413
    empty = await api.request("PUT", name, content=b"", headers=OCTETS)
    assert empty.status_code == 400
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    as_form = await api.request("PUT", name, content=b"x=1", headers=form)
    assert as_form.status_code == 415
    readonly = auth(server.token(["guarded"], scope="readonly"))
    ro = await api.request(
        "PUT", name, content=update_with_text("ro"), headers={**OCTETS, **readonly}
    )
    assert ro.status_code == 403
    assert (await api.request("GET", name + "?format=text")).text == "safe"
    after = await metrics_text(server)
    for limit, more in (("malformed", 1), ("nesting-depth", 1)):
        grew = metric_value(after, "tether_update_refusals_total", limit=limit) - metric_value(
            before, "tether_update_refusals_total", limit=limit
        )
        assert grew == more, limit
    grew = metric_value(
        after, "tether_limit_refusals_total", limit="max_frame_bytes"
    ) - metric_value(before, "tether_limit_refusals_total", limit="max_frame_bytes")
    assert grew == 1


# ---- versions --------------------------------------------------------------------------------


async def test_a_restore_is_a_new_change_editors_follow_and_versions_are_bounded(
    server: ServerProcess, api: Checked
) -> None:
    token = server.token()
    async with await MuxPeer.connect(server.ws_url) as mux:
        doc = await mux.open("draft", token)
        await doc.append("version one")
        await doc.wait_acked()
        first = await api.request("POST", "/api/versions/draft", json={"label": "v1"})
        assert first.status_code == 201, first.text
        v1 = first.json()["id"]
        await doc.append(" and more 🙂")
        await doc.wait_acked()
        got = await api.request("GET", f"/api/versions/draft?id={v1}")
        assert got.json()["text"] == "version one" and got.json()["label"] == "v1"
        as_text = await api.request("GET", f"/api/versions/draft?id={v1}&format=text")
        assert as_text.text == "version one"
        restored = await api.request("POST", "/api/restore/draft", json={"version": v1})
        assert restored.status_code == 200, restored.text
        assert restored.json()["text"] == "version one"
        await doc.wait_text("version one")
        # The editor keeps editing on top: the restore was an ordinary change, not a rewind.
        await doc.append("!")
        await doc.wait_acked()
    assert (await api.request("GET", "/api/documents/draft?format=text")).text == "version one!"
    listed = (await api.request("GET", "/api/versions/draft")).json()["versions"]
    assert [v["label"] for v in listed] == ["v1"]
    before = await metrics_text(server)
    for label in ("v2", "v3", "v4"):  # each after a change: an unchanged state is not copied
        change = update_with_text(label)
        await api.request("PUT", "/api/documents/draft", content=change, headers=OCTETS)
        if label == "v4":
            break
        made = await api.request("POST", "/api/versions/draft", json={"label": label})
        assert made.status_code == 201
    over = await api.request("POST", "/api/versions/draft", json={"label": "v4"})
    assert over.status_code == 409 and "max_versions_per_document" in over.json()["error"]
    after = await metrics_text(server)
    limit = {"limit": "max_versions_per_document"}
    assert (
        metric_value(after, "tether_limit_refusals_total", **limit)
        - metric_value(before, "tether_limit_refusals_total", **limit)
        == 1
    )
    assert len((await api.request("GET", "/api/versions/draft")).json()["versions"]) == 3


async def test_version_bytes_are_bounded(api: Checked) -> None:
    big = update_with_text("z" * (40 * 1024))
    await api.request("PUT", "/api/documents/bulky", content=big, headers=OCTETS)
    assert (
        await api.request("POST", "/api/versions/bulky", json={"label": "a"})
    ).status_code == 201
    # A change, so the second would be a new state (an unchanged one is answered with the first)
    await api.request("PUT", "/api/documents/bulky", content=update_with_text("!"), headers=OCTETS)
    over = await api.request("POST", "/api/versions/bulky", json={"label": "b"})
    assert over.status_code == 409 and "max_version_bytes_per_document" in over.json()["error"]


async def test_versions_refuse_bad_input_and_readonly_writers(
    server: ServerProcess, api: Checked
) -> None:
    await api.request("PUT", "/api/documents/vers", content=update_with_text("v"), headers=OCTETS)
    made = await api.request("POST", "/api/versions/vers", json={"label": "ok"})
    version = made.json()["id"]
    for body in ({}, {"label": ""}, {"label": "x" * 201}, {"label": 5}):
        assert (await api.request("POST", "/api/versions/vers", json=body)).status_code == 400
    bad_json = await api.request(
        "POST", "/api/versions/vers", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert bad_json.status_code == 400
    for ref in ("abc", "-1", "9" * 30):
        assert (await api.request("GET", f"/api/versions/vers?id={ref}")).status_code == 400
    assert (await api.request("GET", "/api/versions/vers?id=999999")).status_code == 404
    for body in ({"version": "1"}, {"version": True}, {}):
        assert (await api.request("POST", "/api/restore/vers", json=body)).status_code == 400
    assert (
        await api.request("POST", "/api/restore/vers", json={"version": 999999})
    ).status_code == 404
    readonly = auth(server.token(["vers"], scope="readonly"))
    for method, url, body in (
        ("POST", "/api/versions/vers", {"label": "ro"}),
        ("POST", "/api/restore/vers", {"version": version}),
    ):
        assert (await api.request(method, url, json=body, headers=readonly)).status_code == 403
    # A reader may list and read them; a token for other documents may not.
    assert (await api.request("GET", "/api/versions/vers", headers=readonly)).status_code == 200
    other = auth(server.token(["elsewhere"]))
    assert (await api.request("GET", "/api/versions/vers", headers=other)).status_code == 403
    assert (await api.request("GET", "/api/documents/vers", headers=other)).status_code == 403


async def test_the_listing_is_paged_and_reads_only_under_the_tokens_patterns(
    server: ServerProcess, api: Checked
) -> None:
    """Issue 26, item 9: any token's listing scanned every document of the store."""
    for name in ("paged/1", "paged/2", "paged/3", "paged/sub/4", "pagedx", "zz-other"):
        await api.request(
            "PUT", f"/api/documents/{name}", content=update_with_text("p"), headers=OCTETS
        )
    scoped = auth(server.token(["paged/**"]))
    names: list[str] = []
    after = ""
    for _ in range(10):
        page = await api.request(
            "GET", f"/api/documents?limit=2&after={quote(after)}", headers=scoped
        )
        body = page.json()
        assert len(body["documents"]) <= 2
        names += [d["name"] for d in body["documents"]]
        if body["next"] is None:
            break
        after = body["next"]
    assert names == ["paged/1", "paged/2", "paged/3", "paged/sub/4"]
    for bad in ("0", "1001", "x", "²"):
        assert (await api.request("GET", f"/api/documents?limit={bad}")).status_code == 400


# ---- the description and the small things -------------------------------------------------


async def test_openapi_describes_every_operation_the_tests_exercised(api: Checked) -> None:
    spec = api.spec
    assert spec["openapi"].startswith("3.1")
    jsonschema.Draft202012Validator.check_schema({"$defs": spec["components"]["schemas"]})
    await api.request("GET", "/api/documents")
    await api.request("PUT", "/api/documents/o", content=update_with_text("o"), headers=OCTETS)
    await api.request("GET", "/api/documents/o")
    await api.request("GET", "/api/documents/o?format=markdown")
    await api.request("POST", "/api/versions/o", json={"label": "l"})
    await api.request("GET", "/api/versions/o")
    await api.request("DELETE", "/api/documents/o")
    await api.request("GET", "/api/documents/o")
    assert {m for m, _, _ in api.checked} >= {"GET", "PUT", "POST", "DELETE"}


async def test_pages_link_a_favicon_that_is_served(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        page = (await http.get("/")).text
        link = re.search(r'<link rel=icon type="image/svg\+xml" href="([^"]+)">', page)
        assert link is not None
        icon = await http.get(link.group(1))
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.text.startswith("<svg")
        assert (await http.get("/favicon.ico")).status_code == 200


async def test_documents_survive_a_restart_with_their_versions(tmp_path: Path) -> None:
    with ServerProcess(tmp_path) as server:
        headers = auth(server.token())
        async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
            await http.put("/api/documents/durable", content=update_with_text("d"), headers=OCTETS)
            assert (
                await http.post("/api/versions/durable", json={"label": "x"})
            ).status_code == 201
        server.restart()
        async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
            assert (await http.get("/api/documents/durable?format=text")).text == "d"
            versions = (await http.get("/api/versions/durable")).json()["versions"]
            assert [v["label"] for v in versions] == ["x"]


async def test_edits_racing_a_delete_never_bring_the_document_back(tmp_path: Path) -> None:
    """Updates still on their way to the store, a compaction due, and the shutdown's flush: none
    may write the deleted document again (its appends precede the delete in the store's queue,
    and the room is marked deleted before anything else can persist it)."""
    with ServerProcess(tmp_path, compact_threshold=5) as server:
        token = server.token()
        async with await MuxPeer.connect(server.ws_url) as mux:
            doc = await mux.open("racing", token)
            await doc.append("seed")
            await doc.wait_acked()
            async with httpx.AsyncClient(base_url=server.http_url, headers=auth(token)) as http:
                for i in range(50):  # not awaited one by one: many appends are in flight
                    await doc.append(f" {i}")
                deleted = await http.delete("/api/documents/racing")
                assert deleted.status_code == 200
                await doc.wait(lambda: doc.denied is not None, 10, "PermissionDenied")
                assert (await http.get("/api/documents/racing")).status_code == 404
        server.restart()
        async with httpx.AsyncClient(base_url=server.http_url, headers=auth(token)) as http:
            assert (await http.get("/api/documents/racing")).status_code == 404
            listed = (await http.get("/api/documents")).json()["documents"]
            assert "racing" not in [d["name"] for d in listed]


# ---- rich documents (issue 27) ---------------------------------------------------------------


async def test_a_tiptap_document_reads_over_rest_as_markdown_text_and_html(
    api: Checked,
) -> None:
    """What a Tiptap editor wrote (StarterKit through y-prosemirror, the real libraries): REST
    gives its text, Markdown and HTML, and so does a version of it."""
    from tests.collab.test_content import EXPECTED_MARKDOWN, SAMPLE
    from tests.jsclient import tiptap_document

    put = await api.request(
        "PUT", "/api/documents/rich-notes", content=tiptap_document(SAMPLE), headers=OCTETS
    )
    assert put.status_code == 200, put.text
    read = (await api.request("GET", "/api/documents/rich-notes")).json()
    assert read["kind"] == "rich" and read["text"].startswith("Title\n\nSome bold and a link\n")
    markdown = await api.request("GET", "/api/documents/rich-notes?format=markdown")
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert markdown.text == EXPECTED_MARKDOWN
    html = await api.request("GET", "/api/documents/rich-notes?format=html")
    assert html.headers["content-disposition"].startswith("attachment")
    assert html.text.startswith("<h1>Title</h1><p>Some <strong>bold</strong>")
    text = await api.request("GET", "/api/documents/rich-notes?format=text")
    assert text.text == read["text"]
    made = await api.request("POST", "/api/versions/rich-notes", json={"label": "tiptap"})
    assert made.status_code == 201, made.text
    version = made.json()["id"]
    got = (await api.request("GET", f"/api/versions/rich-notes?id={version}")).json()
    assert (got["kind"], got["text"]) == ("rich", read["text"])
    as_markdown = await api.request("GET", f"/api/versions/rich-notes?id={version}&format=markdown")
    assert as_markdown.text == EXPECTED_MARKDOWN
    plain = (await api.request("GET", "/api/documents/draft")).json()
    assert plain["kind"] == "plain"


async def test_markdown_and_plain_text_are_imported_as_one_change_editors_follow(
    server: ServerProcess, api: Checked
) -> None:
    """PUT text/markdown makes the rich tree the Markdown (a Tiptap editor reads it as valid
    StarterKit content); PUT text/plain makes the plain text the body; a version of the rich
    document restores its tree."""
    from tests.collab.test_content import EXPECTED_MARKDOWN
    from tests.jsclient import tiptap_reads

    markdown = {"Content-Type": "text/markdown; charset=utf-8"}
    put = await api.request(
        "PUT", "/api/documents/md-notes", content=EXPECTED_MARKDOWN.encode(), headers=markdown
    )
    assert put.status_code == 200, put.text
    got = await api.request("GET", "/api/documents/md-notes?format=markdown")
    assert got.text == EXPECTED_MARKDOWN
    backup = await api.request("GET", "/api/documents/md-notes?format=yjs")
    assert tiptap_reads(backup.content)["content"][0]["type"] == "heading"
    made = await api.request("POST", "/api/versions/md-notes", json={"label": "first"})
    assert made.status_code == 201, made.text
    again = await api.request(
        "PUT", "/api/documents/md-notes", content=b"# Rewritten\n", headers=markdown
    )
    assert again.status_code == 200, again.text
    assert (await api.request("GET", "/api/documents/md-notes")).json()["text"] == "Rewritten"
    restored = await api.request(
        "POST", "/api/restore/md-notes", json={"version": made.json()["id"]}
    )
    assert restored.status_code == 200, restored.text
    assert restored.json()["text"].startswith("Title\n\nSome bold")
    got = await api.request("GET", "/api/documents/md-notes?format=markdown")
    assert got.text == EXPECTED_MARKDOWN
    token = server.token()
    async with await MuxPeer.connect(server.ws_url) as mux:
        doc = await mux.open("plain-import", token)
        plain = {"Content-Type": "text/plain; charset=utf-8"}
        put = await api.request(
            "PUT", "/api/documents/plain-import", content="from REST 🙂".encode(), headers=plain
        )
        assert put.status_code == 200, put.text
        await doc.wait_text("from REST 🙂")  # the connected editor follows
    bad = await api.request(
        "PUT", "/api/documents/plain-import", content=b"\xff\xfe", headers=plain
    )
    assert bad.status_code == 400 and "UTF-8" in bad.json()["error"]
    # Markdown is parsed and written in a thread at ~300 bytes of memory per byte: bounded.
    long = b"- item\n" * (200 * 1024 // 7 + 1)
    big = await api.request("PUT", "/api/documents/md-big", content=long, headers=markdown)
    assert big.status_code == 413 and "max_markdown_bytes" in big.json()["error"]
