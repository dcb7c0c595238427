"""Tiptap-style REST for rich documents (issue 39, item 2), through the real server: the
ProseMirror tree out (``?format=json``) checked by Tiptap's own schema (@tiptap/core with
StarterKit, in Node), a JSON PUT of what a headless Tiptap editor's ``getJSON()`` gives read back
equal, a PATCH while a Python client types merging both, hostile HTML keeping only safe content,
duplicate and the deletion of one version, and every refusal with its status. Every answer is
checked against /openapi.json."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from pycrdt import Doc, Text, XmlFragment, XmlText

from tests.jsclient import run_node_script, tiptap_document, tiptap_reads
from tests.serverproc import ServerProcess
from tests.test_rest_documents import Checked
from tether.client import TetherClient
from tether.collab.content.reading import read_content

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}
HTML = {"Content-Type": "text/html"}
OCTETS = {"Content-Type": "application/octet-stream"}
MAX_HTML = 64 * 1024

# Every node and mark of StarterKit, as a Tiptap editor would hold them.
STARTER_KIT = [
    {"type": "heading", "attrs": {"level": 1}, "content": [{"type": "text", "text": "Notes"}]},
    {
        "type": "paragraph",
        "content": [
            {"type": "text", "text": "Plain, "},
            {"type": "text", "text": "bold", "marks": [{"type": "bold"}]},
            {"type": "text", "text": ", "},
            {"type": "text", "text": "both", "marks": [{"type": "bold"}, {"type": "italic"}]},
            {"type": "text", "text": ", "},
            {"type": "text", "text": "code", "marks": [{"type": "code"}]},
            {"type": "text", "text": ", "},
            {"type": "text", "text": "struck", "marks": [{"type": "strike"}]},
            {"type": "text", "text": ", "},
            {"type": "text", "text": "under", "marks": [{"type": "underline"}]},
            {"type": "hardBreak"},
            {
                "type": "text",
                "text": "a link 😀",
                "marks": [{"type": "link", "attrs": {"href": "https://tiptap.dev/docs"}}],
            },
        ],
    },
    {
        "type": "bulletList",
        "content": [
            {
                "type": "listItem",
                "content": [
                    {"type": "paragraph", "content": [{"type": "text", "text": "outer"}]},
                    {
                        "type": "orderedList",
                        "attrs": {"start": 5},
                        "content": [
                            {
                                "type": "listItem",
                                "content": [
                                    {
                                        "type": "paragraph",
                                        "content": [{"type": "text", "text": "inner five"}],
                                    }
                                ],
                            }
                        ],
                    },
                ],
            }
        ],
    },
    {
        "type": "blockquote",
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": "quoted"}]}],
    },
    {
        "type": "codeBlock",
        "attrs": {"language": "python"},
        "content": [{"type": "text", "text": "def f():\n    return 1"}],
    },
    {"type": "horizontalRule"},
    {"type": "paragraph"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("rest-json"), unload_grace=0.2, max_html_bytes=MAX_HTML
    ) as running:
        yield running


class Api(Checked):
    """``Checked`` (tests/test_rest_documents.py) knowing the duplicate path and answers
    without a body (204) too."""

    def validate(self, method: str, url: str, response: httpx.Response) -> None:
        path = url.split("?")[0]
        if path.startswith("/api/duplicate/") or response.status_code == 204:
            template = (
                "/api/duplicate/{name}"
                if path.startswith("/api/duplicate/")
                else "/api/documents/{name}"
            )
            documented = self.spec["paths"][template][method.lower()]["responses"]
            answer = documented.get(str(response.status_code))
            assert answer is not None, (method, url, response.status_code)
            if response.status_code == 204:
                assert "content" not in answer and not response.content
            else:
                schema = answer["content"]["application/json"]["schema"]
                schema = {**schema, "components": self.spec["components"]}
                jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)
            self.checked.add((method.upper(), template, response.status_code))
            return
        super().validate(method, url, response)


@pytest.fixture
async def api(server: ServerProcess) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        spec = (await http.get("/openapi.json")).json()
        http.headers["Authorization"] = f"Bearer {server.token()}"
        yield Api(http, spec)


def doc(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "doc", "content": list(blocks)}


def paragraph(text: str, **attrs: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "paragraph", "content": [{"type": "text", "text": text}]}
    if attrs:
        node["attrs"] = attrs
    return node


def tiptap_checks(value: dict[str, Any]) -> dict[str, Any]:
    """``Node.fromJSON(getSchema(StarterKit), value).check()`` in Node; the node's JSON."""
    return dict(json.loads(run_node_script(["js/tiptap_json.mjs", "--check"], json.dumps(value))))


async def tree(api: Api, name: str) -> dict[str, Any]:
    reply = await api.request("GET", f"/api/documents/{name}?format=json")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    return dict(reply.json())


# ---- the tree out ------------------------------------------------------------------------------


async def test_tiptap_loads_the_json_tether_returns_for_a_document_a_tiptap_editor_wrote(
    api: Api,
) -> None:
    update = tiptap_document(STARTER_KIT)  # y-prosemirror through StarterKit's schema
    stored = await api.request("PUT", "/api/documents/written", content=update, headers=OCTETS)
    assert stored.status_code == 200, stored.text
    got = await tree(api, "written")
    # Tiptap's schema accepts it, and it is the document Tiptap itself reads from the same
    # Yjs state (y-prosemirror's view of the fragment, with the schema's defaults).
    assert tiptap_checks(got) == tiptap_reads(update) == tiptap_checks(doc(*STARTER_KIT))
    # The old shape is still there, as ?format=info and without a format.
    info = (await api.request("GET", "/api/documents/written?format=info")).json()
    assert info == (await api.request("GET", "/api/documents/written")).json()
    assert info["kind"] == "rich" and info["text"].startswith("Notes\n\nPlain, bold")


async def test_a_json_put_of_a_tiptap_editors_get_json_reads_back_equal(api: Api) -> None:
    seed = doc(*STARTER_KIT)
    written = json.loads(run_node_script(["js/tiptap_json.mjs", "--editor"], json.dumps(seed)))
    put = await api.request("PUT", "/api/documents/from-editor", json=written)
    assert put.status_code == 200, put.text
    assert await tree(api, "from-editor") == written  # exactly, null attributes and all
    # ... and a Tiptap editor opening it (y-prosemirror) sees the same document.
    state = await api.request("GET", "/api/documents/from-editor?format=yjs")
    assert tiptap_reads(state.content) == written
    # POST is the same as PUT; a second PUT replaces the tree as one change.
    again = await api.request("POST", "/api/documents/from-editor", json=doc(paragraph("new")))
    assert again.status_code == 200
    assert await tree(api, "from-editor") == doc(paragraph("new"))


async def test_a_plain_document_reads_as_one_paragraph_per_line(api: Api) -> None:
    plain = Doc()
    plain.get("content", type=Text).insert(0, "line one\n\nline three")
    await api.request(
        "PUT", "/api/documents/plain-lines", content=plain.get_update(), headers=OCTETS
    )
    assert await tree(api, "plain-lines") == doc(
        paragraph("line one"), {"type": "paragraph"}, paragraph("line three")
    )


# ---- PATCH while others type ---------------------------------------------------------------


async def test_a_patch_while_a_python_client_types_merges_both(
    server: ServerProcess, api: Api
) -> None:
    name = "typed-and-patched"
    start = doc(paragraph("first"), paragraph("second"), paragraph("third", id="p-3"))
    assert (await api.request("PUT", f"/api/documents/{name}", json=start)).status_code == 200
    typed = "while a script patches"
    async with TetherClient(server.ws_url, token=server.token()) as client:
        handle = await client.open(name)
        first_text = handle.doc.get("default", type=XmlFragment).children[0].children[0]
        assert isinstance(first_text, XmlText) and str(first_text) == "first"

        async def type_along() -> None:
            for char in " " + typed:
                first_text.insert(len(str(first_text)), char)  # ASCII: bytes are characters
                await asyncio.sleep(0.01)  # a typist's pace, not a synchronisation

        async def patch() -> list[int]:
            await asyncio.sleep(0.05)
            replaced = await api.request(
                "PATCH",
                f"/api/documents/{name}?format=json&nodeAttributeName=id&nodeAttributeValue=p-3",
                json=paragraph("third, patched", id="p-3"),
            )
            appended = await api.request(
                "PATCH",
                f"/api/documents/{name}?format=json&mode=append",
                json=[paragraph("appended"), paragraph("and more")],
            )
            return [replaced.status_code, appended.status_code]

        statuses = (await asyncio.gather(type_along(), patch()))[1]
        assert statuses == [204, 204]
        await handle.wait_acked(timeout=30)
        expected = doc(
            paragraph("first " + typed),
            paragraph("second"),
            paragraph("third, patched", id="p-3"),
            paragraph("appended"),
            paragraph("and more"),
        )
        assert await tree(api, name) == expected
        # The typist's own copy has the script's blocks too.
        await handle.wait_for(lambda: read_content(handle.doc).text().endswith("and more"))
        assert read_content(handle.doc).text() == "\n\n".join(
            ["first " + typed, "second", "third, patched", "appended", "and more"]
        )


async def test_a_whole_document_patch_replaces_only_the_blocks_that_differ(api: Api) -> None:
    name = "diffed"
    blocks = [paragraph(f"block {i}") for i in range(6)]
    await api.request("PUT", f"/api/documents/{name}", json=doc(*blocks))
    changed = [*blocks[:2], paragraph("block 2, edited"), *blocks[3:]]
    reply = await api.request("PATCH", f"/api/documents/{name}?format=json", json=doc(*changed))
    assert reply.status_code == 204, reply.text
    assert await tree(api, name) == doc(*changed)
    # One paragraph was replaced (its element, its text's item and 7 characters deleted), not
    # the six a whole replacement deletes.
    assert deleted_items(await api.request("GET", f"/api/documents/{name}?format=yjs")) == 9
    # The same document again changes nothing.
    same = await api.request("PATCH", f"/api/documents/{name}?format=json", json=doc(*changed))
    assert same.status_code == 204
    assert await tree(api, name) == doc(*changed)


def deleted_items(reply: httpx.Response) -> int:
    """How many items (characters of text count one each) the document's delete set holds."""
    state = Doc()
    state.apply_update(reply.content)
    data = state.get_update(state.get_state())  # no structs: only the delete set
    at = 0

    def number() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    assert number() == 0  # clients with structs
    total = 0
    for _ in range(number()):
        number()  # the client
        for _ in range(number()):
            number()  # the clock
            total += number()
    return total


async def test_a_binary_or_base64_patch_applies_a_yjs_update(api: Api) -> None:
    name = "patched-updates"
    await api.request("PUT", f"/api/documents/{name}", json=doc(paragraph("rich")))
    plain = Doc()
    plain.get("content", type=Text).insert(0, "beside")
    binary = await api.request(
        "PATCH", f"/api/documents/{name}?format=binary", content=plain.get_update(), headers=OCTETS
    )
    assert binary.status_code == 204, binary.text
    more = Doc()
    more.get("notes", type=Text).insert(0, "in base64")
    encoded = base64.b64encode(more.get_update())
    b64 = await api.request("PATCH", f"/api/documents/{name}?format=base64", content=encoded)
    assert b64.status_code == 204, b64.text
    state = Doc()
    state.apply_update((await api.request("GET", f"/api/documents/{name}?format=yjs")).content)
    assert str(state.get("content", type=Text)) == "beside"
    assert str(state.get("notes", type=Text)) == "in base64"
    assert await tree(api, name) == doc(paragraph("rich"))


# ---- HTML in ---------------------------------------------------------------------------------


async def test_hostile_html_keeps_only_safe_content(api: Api) -> None:
    hostile = (
        b"<h2 onmouseover='steal()'>Report</h2>"
        b"<p>Read <a href='javascript:alert(document.cookie)'>this</a> and"
        b" <a href='https://example.org/ok'>that</a>.<script>fetch('/steal')</script></p>"
        b"<img src=x onerror='alert(1)'><iframe srcdoc='<script>alert(2)</script>'></iframe>"
        b"<p style='background:url(javascript:alert(3))'><b onclick='x()'>bold</b></p>"
        b"<svg onload='alert(4)'><a xlink:href='javascript:alert(5)'>svg</a></svg>"
    )
    put = await api.request("PUT", "/api/documents/hostile-html", content=hostile, headers=HTML)
    assert put.status_code == 200, put.text
    got = await tree(api, "hostile-html")
    assert tiptap_checks(got)  # a document Tiptap's schema takes
    assert got == doc(
        {"type": "heading", "attrs": {"level": 2}, "content": [{"type": "text", "text": "Report"}]},
        {
            "type": "paragraph",
            "content": [
                {"type": "text", "text": "Read this and "},
                {
                    "type": "text",
                    "text": "that",
                    "marks": [{"type": "link", "attrs": {"href": "https://example.org/ok"}}],
                },
                {"type": "text", "text": "."},
            ],
        },
        {
            "type": "paragraph",
            "content": [
                {
                    "type": "text",
                    "text": "image",
                    "marks": [{"type": "link", "attrs": {"href": "x"}}],
                }
            ],
        },
        {
            "type": "paragraph",
            "content": [{"type": "text", "text": "bold", "marks": [{"type": "bold"}]}],
        },
    )
    stored = (await api.request("GET", "/api/documents/hostile-html?format=yjs")).content
    for word in (b"script", b"javascript", b"onerror", b"onclick", b"alert", b"steal", b"style"):
        assert word not in stored.lower(), word
    exported = (await api.request("GET", "/api/documents/hostile-html?format=html")).text
    assert "script" not in exported.lower() and " on" not in exported.lower()


# ---- duplicate and versions ------------------------------------------------------------------


async def test_duplicate_copies_the_state_into_a_new_name_and_refuses_an_existing_one(
    server: ServerProcess, api: Api
) -> None:
    await api.request("PUT", "/api/documents/dup/source", json=doc(paragraph("original")))
    copy = await api.request("POST", "/api/duplicate/dup/source", json={"name": "dup/copy"})
    assert copy.status_code == 201, copy.text
    assert copy.json() == {"name": "dup/copy", "source": "dup/source"}
    assert await tree(api, "dup/copy") == doc(paragraph("original"))
    # Two documents from then on: an edit of one is not in the other.
    await api.request("PUT", "/api/documents/dup/source", json=doc(paragraph("changed")))
    assert await tree(api, "dup/copy") == doc(paragraph("original"))

    again = await api.request("POST", "/api/duplicate/dup/source", json={"name": "dup/copy"})
    assert again.status_code == 409
    missing = await api.request("POST", "/api/duplicate/dup/never", json={"name": "dup/x"})
    assert missing.status_code == 404
    bad = await api.request("POST", "/api/duplicate/dup/source", json={"name": ""})
    assert bad.status_code == 400
    # A token for dup/* only may not write the copy elsewhere; a readonly one may not write it.
    only_dup = {"Authorization": f"Bearer {server.token(['dup/*'])}"}
    elsewhere = await api.request(
        "POST", "/api/duplicate/dup/source", json={"name": "other/copy"}, headers=only_dup
    )
    assert elsewhere.status_code == 403
    readonly = {"Authorization": f"Bearer {server.token(scope='readonly')}"}
    read_only = await api.request(
        "POST", "/api/duplicate/dup/source", json={"name": "dup/ro"}, headers=readonly
    )
    assert read_only.status_code == 403


async def test_one_version_is_deleted_and_the_others_stay(server: ServerProcess, api: Api) -> None:
    name = "versioned-json"
    await api.request("PUT", f"/api/documents/{name}", json=doc(paragraph("v1")))
    first = (await api.request("POST", f"/api/versions/{name}", json={"label": "one"})).json()
    await api.request("PUT", f"/api/documents/{name}", json=doc(paragraph("v2")))
    second = (await api.request("POST", f"/api/versions/{name}", json={"label": "two"})).json()
    # A version's tree, as the document's.
    one = await api.request("GET", f"/api/versions/{name}?id={first['id']}&format=json")
    assert one.json() == doc(paragraph("v1"))

    readonly = {"Authorization": f"Bearer {server.token(scope='readonly')}"}
    refused = await api.request(
        "DELETE", f"/api/versions/{name}?id={first['id']}", headers=readonly
    )
    assert refused.status_code == 403
    assert (await api.request("DELETE", f"/api/versions/{name}?id=x")).status_code == 400
    gone = await api.request("DELETE", f"/api/versions/{name}?id={first['id']}")
    assert gone.status_code == 200 and gone.json() == {
        "name": name,
        "id": first["id"],
        "deleted": True,
    }
    listed = (await api.request("GET", f"/api/versions/{name}")).json()["versions"]
    assert [v["id"] for v in listed] == [second["id"]]
    again = await api.request("DELETE", f"/api/versions/{name}?id={first['id']}")
    assert again.status_code == 404


# ---- refusals ----------------------------------------------------------------------------------


async def test_bad_json_and_html_are_refused_with_the_reason_and_change_nothing(
    api: Api,
) -> None:
    name = "refusals"
    await api.request("PUT", f"/api/documents/{name}", json=doc(paragraph("kept")))
    deep: dict[str, Any] = paragraph("deep")
    for _ in range(200):
        deep = {"type": "blockquote", "content": [deep]}
    cases = [
        (b"{not json", JSON, 400, "not JSON"),
        (b"", JSON, 400, "empty body"),
        (b'{"type": "paragraph"}', JSON, 422, "ProseMirror document"),
        (b'{"type":"doc","content":[{"type":"heading","attrs":{"level":0}}]}', JSON, 422, "level"),
        (b'{"type":"doc","content":[{"type":"a b"}]}', JSON, 422, "type name"),
        (json.dumps(doc(deep)).encode(), JSON, 422, "max_nesting_depth"),
        (b"[" * 300_000 + b"]" * 300_000, JSON, 422, "max_nesting_depth"),
        (b"<blockquote>" * 300 + b"x", HTML, 422, "max_nesting_depth"),
        (b"<p>" + b"a" * MAX_HTML + b"</p>", HTML, 413, "max_html_bytes"),
        (b"\xff<p>", HTML, 400, "UTF-8"),
        (b"<p>x</p>", {"Content-Type": "application/xml"}, 415, "Content-Type"),
    ]
    for body, headers, status, words in cases:
        reply = await api.request("PUT", f"/api/documents/{name}", content=body, headers=headers)
        assert reply.status_code == status, (body[:40], reply.text)
        assert words in reply.json()["error"], (body[:40], reply.text)
    assert await tree(api, name) == doc(paragraph("kept"))


async def test_bad_patches_are_refused_with_the_reason_and_change_nothing(api: Api) -> None:
    name = "patch-refusals"
    await api.request("PUT", f"/api/documents/{name}", json=doc(paragraph("kept", id="a")))
    url = f"/api/documents/{name}"
    cases = [
        (f"{url}?format=yaml", b"x", {}, 400, "format"),
        (url, b"x", {"Content-Type": "text/plain"}, 400, "format"),
        (f"{url}?format=json&mode=prepend", b"{}", JSON, 400, "mode"),
        (f"{url}?format=json&nodeAttributeName=id", b"{}", JSON, 400, "together"),
        (f"{url}?format=binary&mode=append", b"\x00", OCTETS, 400, "format=json"),
        (f"{url}?format=base64", b"not base64!", {}, 400, "Base64"),
        (f"{url}?format=binary", b"\x05\x07garbage", OCTETS, 400, "malformed"),
        (f"{url}?format=binary", b"", OCTETS, 400, "empty body"),
        (
            f"{url}?format=json",
            b'{"type":"doc","content":[{"type":"heading","attrs":{"level":9}}]}',
            JSON,
            422,
            "level",
        ),
        (
            f"{url}?format=json&nodeAttributeName=id&nodeAttributeValue=nope",
            json.dumps(paragraph("x")).encode(),
            JSON,
            422,
            "no node",
        ),
        ("/api/documents/never-made?format=json&mode=append", b"[]", JSON, 404, "no such"),
    ]
    for path, body, headers, status, words in cases:
        reply = await api.request("PATCH", path, content=body, headers=headers)
        assert reply.status_code == status, (path, reply.text)
        assert words in reply.json()["error"], (path, reply.text)
    assert await tree(api, name) == doc(paragraph("kept", id="a"))


async def test_openapi_describes_the_new_operations_the_tests_exercised(api: Api) -> None:
    paths = api.spec["paths"]
    assert "patch" in paths["/api/documents/{name}"]
    assert "delete" in paths["/api/versions/{name}"]
    assert "post" in paths["/api/duplicate/{name}"]
    assert "json" in paths["/api/documents/{name}"]["get"]["parameters"][0]["schema"]["enum"]
