"""The rich-text and Markdown attacks of issue 37 for ``tether bench attacks``: imports that
starve other readers (``markdown-runs``) or hold memory (``markdown-lists``), renders of a
50,000-paragraph document on the event loop (``render-*``), and content a Markdown import or
export loses or makes unsafe (``markdown-nesting``, ``markdown-export-xss``, ``attr-nan``).
And issue 39's hostile trees for the ProseMirror JSON and HTML imports (``tree_attacks``): a
JSON document nested 100,000 deep (``json-deep``), one of 300,000 empty paragraphs
(``json-empty-nodes``), HTML of 100,000 nested tags (``html-nested``).

Each drives the server through its REST API and ``/ws`` only, as ``bench.attack_kinds``
does, so an old checkout is attacked the same way. Figures a strike measures besides the
bystanders' (a reader's GET of an unloaded document, a new editor's time to its first sync, a
render's latency) go in its ``figures``, in milliseconds.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import httpx
from markdown_it import MarkdownIt

from .attack_base import Attack, FiguredStrike, Strike
from .launcher import ServerProcess
from .rich_fixture import (
    hostile_links,
    nested_list,
    nested_quote,
    ordered_list,
    rich_document,
)
from .surroundings import receiver_stats, webhook_receiver
from .wire_editor import WireEditor

ISSUE = 37
# The issue's sizes at scale 1.
RUNS_BYTES = 64 * 1024
RUNS_IMPORTS = 6
LISTS_BYTES = 512 * 1024
LISTS_IMPORTS = 3
PARAGRAPHS = 50_000
LIST_DEPTH = 12
QUOTE_DEPTH = 22
RENDER_FORMATS = ("html", "markdown", "text", "json")
RICH_DOC = "rich-big"
# Readers that start this long after the imports were sent find them running: a benchmark's
# aim, not a test's synchronisation.
_PROBE_DELAY = 0.3
_UNLOAD_WAIT = 30.0  # the unload grace is 5 s


TREE_ISSUE = 39
TREE_DEPTH = 100_000  # levels of a JSON document nested as quotes
EMPTY_NODES = 300_000  # empty paragraphs: as many nodes as max_import_nodes allows
HTML_TAGS = 100_000  # nested tags, every one read (block and inline elements that nest freely)


def tree_attacks(scale: float) -> list[Attack]:
    """Issue 39's hostile ProseMirror JSON and HTML bodies, each PUT once."""

    def sized(n: int) -> int:
        return max(1, round(n * scale))

    deep = deep_json(sized(TREE_DEPTH))
    empty = empty_paragraphs_json(sized(EMPTY_NODES))
    nested = nested_html(sized(HTML_TAGS))
    return [
        Attack(
            "json-deep",
            2,
            len(deep),
            partial(tree_import, "json-deep", deep, "application/json"),
            issue=TREE_ISSUE,
        ),
        Attack(
            "json-empty-nodes",
            2,
            len(empty),
            partial(tree_import, "json-empty", empty, "application/json"),
            issue=TREE_ISSUE,
        ),
        Attack(
            "html-nested",
            2,
            len(nested),
            partial(tree_import, "html-nested", nested, "text/html"),
            issue=TREE_ISSUE,
        ),
    ]


def deep_json(depth: int) -> bytes:
    """A ProseMirror document of quotes nested ``depth`` deep around one paragraph."""
    opening = b'{"type":"blockquote","content":[' * depth
    inner = b'{"type":"paragraph","content":[{"type":"text","text":"innermost"}]}'
    return b'{"type":"doc","content":[' + opening + inner + b"]}" * depth + b"]}"


def empty_paragraphs_json(count: int) -> bytes:
    return b'{"type":"doc","content":[' + b",".join([b'{"type":"paragraph"}'] * count) + b"]}"


def nested_html(tags: int) -> bytes:
    """``tags`` nested elements (divs and spans, which nest without bound in HTML), then text."""
    return b"<div><span>" * (tags // 2) + b"text at the bottom" + b"</span></div>" * (tags // 2)


@asynccontextmanager
async def tree_import(
    name: str, body: bytes, kind: str, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """One PUT of ``body`` as ``kind`` into a document of its own: its answer and time."""
    token = server.token([name])

    async def strike(it: FiguredStrike) -> str:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=2 * timeout) as http:
            reply = await it.time("put_ms", put(http, name, body, kind, token))
        it.figures["status"] = reply.status_code
        return status_of(reply)[:100]

    yield FiguredStrike(strike)


def rich_attacks(scale: float) -> list[Attack]:
    def sized(n: int) -> int:
        return max(1, round(n * scale))

    runs = b"*a* " * (sized(RUNS_BYTES) // 4 or 1)
    lists = b"-\n" * (sized(LISTS_BYTES) // 2 or 1)
    big = partial(rich_document, sized(PARAGRAPHS))
    size = len(big())  # built once, then read from the cache
    renders = [
        Attack(f"render-{fmt}", 1, size, partial(render, big, fmt), issue=ISSUE)
        for fmt in RENDER_FORMATS
    ]
    nesting = (nested_list(LIST_DEPTH), nested_quote(QUOTE_DEPTH))
    return [
        Attack(
            "markdown-runs",
            2,
            len(runs) * RUNS_IMPORTS,
            partial(markdown_runs, runs, RUNS_IMPORTS),
            issue=ISSUE,
        ),
        Attack(
            "markdown-lists",
            2,
            len(lists) * LISTS_IMPORTS,
            partial(markdown_imports, lists, LISTS_IMPORTS),
            issue=ISSUE,
        ),
        *renders,
        Attack("render-version", 1, size, partial(render_version, big), issue=ISSUE),
        Attack(
            "render-webhook",
            1,
            size,
            partial(render_webhook, big),
            surroundings=webhook_receiver,
            issue=ISSUE,
        ),
        Attack(
            "markdown-nesting",
            5,
            sum(len(text) for text in nesting),
            partial(markdown_nesting, nesting),
            issue=ISSUE,
        ),
        Attack("markdown-export-xss", 5, len(hostile_links()), markdown_export, issue=ISSUE),
        Attack("attr-nan", 5, 2 * len(ordered_list(float("nan"))), attr_nan, issue=ISSUE),
    ]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def status_of(reply: httpx.Response) -> str:
    """``HTTP 200`` or ``HTTP 422: <reason>``."""
    if reply.is_success:
        return f"HTTP {reply.status_code}"
    try:
        body = reply.json()
    except ValueError:
        body = {"error": reply.text[:60]}
    reason = str(body.get("error") or body.get("reason") or "") if isinstance(body, dict) else ""
    return f"HTTP {reply.status_code}: {reason}" if reason else f"HTTP {reply.status_code}"


def counted(outcomes: list[str]) -> str:
    """``6 x HTTP 200`` or ``4 x HTTP 200, 2 x HTTP 503: ...``, in first-seen order."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return ", ".join(f"{n} x {outcome}" for outcome, n in counts.items())


async def put(
    http: httpx.AsyncClient, name: str, body: bytes, kind: str, token: str
) -> httpx.Response:
    headers = {**bearer(token), "Content-Type": kind}
    return await http.put(f"/api/documents/{name}", content=body, headers=headers)


async def stored_and_unloaded(
    http: httpx.AsyncClient, server: ServerProcess, names: list[str], timeout: float
) -> None:
    """Store a paragraph in each of ``names`` over REST, then wait until the server has
    unloaded them all (its listing says ``loaded: false``)."""
    token = server.token(names)
    for name in names:
        reply = await put(http, name, f"Notes of {name}.".encode(), "text/plain", token)
        reply.raise_for_status()
    deadline = time.monotonic() + min(timeout, _UNLOAD_WAIT)
    while time.monotonic() < deadline:
        reply = await http.get("/api/documents", headers=bearer(token))
        reply.raise_for_status()
        loaded = {d["name"] for d in reply.json()["documents"] if d.get("loaded", True)}
        if not loaded & set(names):
            return
        await asyncio.sleep(0.2)  # the server unloads on its own timer: nothing to wait on
    raise RuntimeError(f"the server did not unload {names} in {_UNLOAD_WAIT:.0f} s")


# ---- Markdown imports: six at once starve reads and loads; three hold memory --------------


@asynccontextmanager
async def markdown_runs(
    body: bytes, imports: int, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """``imports`` PUTs of ``body`` as Markdown (one read-write token); meanwhile another
    user's readonly GET of a stored, unloaded document and a new editor's open of another."""
    async with httpx.AsyncClient(base_url=server.http_url, timeout=2 * timeout) as http:
        await stored_and_unloaded(http, server, ["quiet-read", "quiet-open"], timeout)

        async def strike(it: FiguredStrike) -> str:
            puts = asyncio.ensure_future(_imports(server, body, imports, timeout, it))
            await asyncio.sleep(_PROBE_DELAY)
            # A reader that fails (its socket dropped, say) is a figure, not the attack's end.
            await asyncio.gather(
                it.time("unloaded_get_ms", _read_as_other(server, "quiet-read", timeout)),
                it.time("open_sync_ms", _open_as_new(server, "quiet-open", timeout)),
                return_exceptions=True,
            )
            return await puts

        yield FiguredStrike(strike)


@asynccontextmanager
async def markdown_imports(
    body: bytes, imports: int, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """``imports`` PUTs of ``body`` as Markdown at once, each into a document of its own."""

    async def strike(it: FiguredStrike) -> str:
        return await _imports(server, body, imports, timeout, it)

    yield FiguredStrike(strike)


async def _imports(
    server: ServerProcess, body: bytes, imports: int, timeout: float, it: FiguredStrike
) -> str:
    token = server.token(["imported-*"], subject="importer")
    limits = httpx.Limits(max_connections=imports)
    async with httpx.AsyncClient(
        base_url=server.http_url, timeout=2 * timeout, limits=limits
    ) as http:
        puts = (put(http, f"imported-{n}", body, "text/markdown", token) for n in range(imports))
        replies = await it.time("puts_ms", asyncio.gather(*puts))
    return counted([status_of(reply) for reply in replies])


async def _read_as_other(server: ServerProcess, name: str, timeout: float) -> str:
    token = server.token([name], scope="readonly", subject="reader")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=timeout) as http:
        reply = await http.get(f"/api/documents/{name}", headers=bearer(token))
    reply.raise_for_status()
    return reply.text


async def _open_as_new(server: ServerProcess, name: str, timeout: float) -> None:
    token = server.token([name], subject="newcomer")
    editor = await WireEditor.open(server.ws_url, name, token, timeout)
    await editor.aclose()


# ---- renders of a 50,000-paragraph document -----------------------------------------------


@asynccontextmanager
async def big_document(
    server: ServerProcess, update: bytes, timeout: float
) -> AsyncIterator[WireEditor]:
    """``update`` stored as ``RICH_DOC`` by an owner who stays, so the document stays loaded
    (a render reads the room, not the store)."""
    token = server.token([RICH_DOC], subject="owner")
    async with await WireEditor.open(server.ws_url, RICH_DOC, token, timeout) as owner:
        if not await owner.send_and_wait(update, 4 * timeout):
            raise RuntimeError("the server did not store the rich document")
        yield owner


@asynccontextmanager
async def render(
    fixture: Callable[[], bytes], export: str, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """One readonly GET of the big document as ``export``."""
    update = await asyncio.to_thread(fixture)
    async with big_document(server, update, timeout):
        path = f"/api/documents/{RICH_DOC}?format={export}"
        yield FiguredStrike(partial(_timed_get, server, path, timeout))


@asynccontextmanager
async def render_version(
    fixture: Callable[[], bytes], server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """A version of the big document saved, then one readonly GET of it as text."""
    update = await asyncio.to_thread(fixture)
    async with big_document(server, update, timeout):
        token = server.token([RICH_DOC], subject="owner")
        async with httpx.AsyncClient(base_url=server.http_url, timeout=4 * timeout) as http:
            reply = await http.post(
                f"/api/versions/{RICH_DOC}", json={"label": "before"}, headers=bearer(token)
            )
        reply.raise_for_status()
        path = f"/api/versions/{RICH_DOC}?id={reply.json()['id']}&format=text"
        yield FiguredStrike(partial(_timed_get, server, path, timeout))


async def _timed_get(server: ServerProcess, path: str, timeout: float, it: FiguredStrike) -> str:
    token = server.token([RICH_DOC], scope="readonly", subject="reader")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=2 * timeout) as http:
        reply = await it.time("get_ms", http.get(path, headers=bearer(token)))
    it.figures["answer_bytes"] = len(reply.content)
    return f"{status_of(reply)}, {len(reply.content)} bytes"


@asynccontextmanager
async def render_webhook(
    fixture: Callable[[], bytes], server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """With webhooks on: the big document stored (its notice delivered), then one keystroke
    in it; the strike ends when the keystroke's notice (the whole text) arrives."""
    update = await asyncio.to_thread(fixture)
    async with big_document(server, update, timeout) as owner:
        await _deliveries_past(server.settings, 0, timeout)

        async def strike(it: FiguredStrike) -> str:
            seen = len(await _deliveries(server.settings))
            sent = time.time()
            # The owner holds no copy of the tree: a keystroke in the plain text changes the
            # document all the same, and a rich document's notice is its tree's text.
            await owner.send_and_wait(owner.typed("x"), timeout)
            at, size = await _deliveries_past(server.settings, seen, timeout)
            it.figures["delivered_ms"] = round((at - sent) * 1000, 1)
            it.figures["notice_bytes"] = size
            return f"delivered, {size} bytes"

        yield FiguredStrike(strike)


async def _deliveries_past(
    settings: dict[str, object], seen: int, timeout: float
) -> tuple[float, int]:
    """The big document's first delivery after its ``seen`` first: (its arrival, wall clock;
    its bytes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deliveries = await _deliveries(settings)
        if len(deliveries) > seen:
            at, size = deliveries[seen]
            return at, size
        await asyncio.sleep(0.02)  # the receiver is another process: ask it again
    raise TimeoutError(f"no webhook delivery in {timeout:.0f} s")


async def _deliveries(settings: dict[str, object]) -> list[tuple[float, int]]:
    """The big document's notices so far (the bystander's document has its own)."""
    deliveries = (await receiver_stats(settings))["deliveries"]
    return [(float(at), int(size)) for at, size, name in deliveries if name == RICH_DOC]


# ---- content lost or made unsafe ----------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9]+")


@asynccontextmanager
async def markdown_nesting(
    texts: tuple[str, ...], server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """Each text imported as Markdown into a document of its own, then read back as text:
    every word back, or a refusal (4xx) naming why."""

    async def strike(it: FiguredStrike) -> str:
        outcomes = []
        async with httpx.AsyncClient(base_url=server.http_url, timeout=timeout) as http:
            for number, text in enumerate(texts):
                outcomes.append(await _words_back(http, server, f"nested-{number}", text, it))
        return "; ".join(outcomes)

    yield FiguredStrike(strike)


async def _words_back(
    http: httpx.AsyncClient, server: ServerProcess, name: str, text: str, it: FiguredStrike
) -> str:
    token = server.token([name])
    reply = await put(http, name, text.encode(), "text/markdown", token)
    if not reply.is_success:
        it.figures[f"{name}_lost"] = "refused"
        return f"{name}: {status_of(reply)[:60]}"
    read = await http.get(f"/api/documents/{name}?format=text", headers=bearer(token))
    read.raise_for_status()
    sent, back = _WORD.findall(text), set(_WORD.findall(read.text))
    lost = [word for word in sent if word not in back]
    it.figures[f"{name}_lost"] = len(lost)
    if not lost:
        return f"{name}: {status_of(reply)}, every word back"
    return f"{name}: {status_of(reply)}, {len(lost)} of {len(sent)} words lost ({' '.join(lost)})"


_SCRIPT = re.compile(r"<script", re.I)
_HANDLER = re.compile(r"<([a-z][a-z0-9]*)[^>]*?\s(on[a-z]+)\s*=", re.I)
_SCRIPT_URL = re.compile(r"\]\(\s*<?\s*javascript:", re.I)


def unsafe_parts(markdown: str) -> list[str]:
    """What of ``markdown`` is live script once rendered by a CommonMark renderer (raw HTML on,
    as CommonMark says): ``<script>``, ``tag[on...]`` handlers, and ``javascript:`` link
    destinations (markdown-it itself drops those; other renderers keep them)."""
    html = MarkdownIt("commonmark").render(markdown)
    found = ["<script>"] if _SCRIPT.search(html) else []
    found += [f"{tag.lower()}[{handler.lower()}]" for tag, handler in _HANDLER.findall(html)]
    if _SCRIPT_URL.search(markdown):
        found.append("javascript: link")
    return found


@asynccontextmanager
async def markdown_export(server: ServerProcess, timeout: float) -> AsyncIterator[Strike]:
    """A document with hostile link and image addresses (a Yjs update over REST), exported as
    Markdown: what of it is live script (``unsafe_parts``)."""
    name = "hostile-links"
    token = server.token([name])

    async def strike(it: FiguredStrike) -> str:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=timeout) as http:
            stored = await put(http, name, hostile_links(), "application/octet-stream", token)
            if not stored.is_success:
                return f"import {status_of(stored)}"
            reply = await http.get(f"/api/documents/{name}?format=markdown", headers=bearer(token))
        if not reply.is_success:
            return f"export {status_of(reply)}"
        found = unsafe_parts(reply.text)
        it.figures["unsafe"] = len(found)
        return f"unsafe in the rendered export: {', '.join(found)}" if found else "clean"

    yield FiguredStrike(strike)


@asynccontextmanager
async def attr_nan(server: ServerProcess, timeout: float) -> AsyncIterator[Strike]:
    """Ordered lists starting at NaN and at infinity, each exported as HTML."""

    async def strike(it: FiguredStrike) -> str:
        outcomes = []
        for label, start in (("NaN", float("nan")), ("Infinity", float("inf"))):
            name = f"start-{label.lower()}"
            token = server.token([name])
            # A client each: a server that drops the connection must not fail the next one.
            async with httpx.AsyncClient(base_url=server.http_url, timeout=timeout) as http:
                stored = await put(
                    http, name, ordered_list(start), "application/octet-stream", token
                )
                if not stored.is_success:
                    outcomes.append(f"{label}: import {status_of(stored)}")
                    continue
                try:
                    reply = await http.get(
                        f"/api/documents/{name}?format=html", headers=bearer(token)
                    )
                except httpx.HTTPError as exc:
                    it.figures[f"{label.lower()}_status"] = "none"
                    outcomes.append(f"{label}: no answer ({type(exc).__name__})")
                    continue
            it.figures[f"{label.lower()}_status"] = reply.status_code
            outcomes.append(f"{label}: {status_of(reply)}")
        return "; ".join(outcomes)

    yield FiguredStrike(strike)
