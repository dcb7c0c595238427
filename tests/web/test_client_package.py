"""tether-client in a team's own app, in real headless Chromium: a small Tiptap 3 host and a
small CodeMirror 6 host (tests/web/host/, not tether's page), each a HocuspocusProvider plus the
package's extension, bundled with esbuild and served from a static server of their own origin.
Ghost text appears after a pause, Tab accepts it (inside a bold run, with its marks), two pages
converge, typing through a ghost keeps its rest, and a rewrite's diff shows what it drops and
is applied only once that is confirmed."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.clientjs import require_client_js
from tests.serverproc import ServerProcess
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    SCRIPT,
    WHOLE_STREAMS,
    Browser,
    Page,
    browser,
    expect,
)

HOST = Path(__file__).resolve().parent / "host"
GHOST = " and the gulls cried."


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return  # the test's output is the test's


@pytest.fixture(scope="module")
def host_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Both host apps bundled (as an app that installed tether-client would bundle them) and
    served on 127.0.0.1: the address of the site."""
    require_client_js()
    node = shutil.which("node")
    assert node is not None
    site = tmp_path_factory.mktemp("host-site")
    for app, out in (("tiptap_app.js", "tiptap"), ("codemirror_app.js", "codemirror")):
        built = subprocess.run(
            [node, str(HOST / "build.mjs"), app, str(site / out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert built.returncode == 0, built.stderr[-2000:]
    handler = functools.partial(_Quiet, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def ai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("client-package"),
        ai_provider="scripted",
        ai_script=SCRIPT,
        **WHOLE_STREAMS,
    ) as proc:
        yield proc


def open_host(
    browser: Browser,  # noqa: F811
    site: str,
    server: ServerProcess,
    app: str,
    document: str,
) -> Page:
    """The host app ``app`` (tiptap or codemirror) on ``document``, synced and AI ready."""
    page = browser.new_context(viewport={"width": 900, "height": 500}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    query = urlencode({"ws": server.ws_url, "doc": document, "token": server.token([document])})
    page.goto(f"{site}/{app}/index.html?{query}")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=15000)
    assert errors == []
    return page


def wait_text(page: Page, expected: str) -> None:
    """Until the host's document text is ``expected``."""
    page.wait_for_function("(t) => window.host.text() === t", arg=expected, timeout=15000)


def test_in_a_tiptap_app_ghost_text_comes_after_a_pause_and_tab_accepts_it_inside_a_bold_run(
    browser: Browser,  # noqa: F811
    host_site: str,
    ai_server: ServerProcess,
) -> None:
    writer = open_host(browser, host_site, ai_server, "tiptap", "host-tiptap")
    reader = open_host(browser, host_site, ai_server, "tiptap", "host-tiptap")
    writer.locator(".tiptap").click()
    writer.keyboard.press("Control+b")
    writer.keyboard.type("The boats home")
    writer.keyboard.press("Control+b")
    wait_text(reader, "The boats home")
    # Into the bold run, between "boats" and " home", and type there: the pause asks.
    for _ in range(5):
        writer.keyboard.press("ArrowLeft")
    writer.keyboard.type(" came")
    ghost = writer.locator("[data-testid=ghost]")
    expect(ghost).to_have_text(GHOST, timeout=15000)
    expect(ghost).to_have_class(re.compile(r"\btether-ghost\b"))
    writer.keyboard.press("Tab")
    expected = "The boats came and the gulls cried. home"
    wait_text(reader, expected)
    wait_text(writer, expected)
    expect(ghost).to_have_count(0)
    # The server wrote it with the marks of the text it continues; the cursor is after it.
    writer.keyboard.type("!")
    wait_text(reader, "The boats came and the gulls cried.! home")
    paragraph = reader.evaluate("() => window.host.editor.getJSON().content[0].content")
    bold = [{"type": "bold"}]
    assert paragraph == [
        {"type": "text", "marks": bold, "text": "The boats came and the gulls cried.! home"}
    ]
    assert writer.evaluate("() => window.host.editor.getJSON()") == reader.evaluate(
        "() => window.host.editor.getJSON()"
    )
    writer.wait_for_function(
        "() => window.host.events.some((e) => e.type === 'accepted')", timeout=15000
    )
    writer.context.close()
    reader.context.close()


def test_in_a_tiptap_app_a_rewrite_shows_what_it_drops_and_applies_only_once_confirmed(
    browser: Browser,  # noqa: F811
    host_site: str,
    ai_server: ServerProcess,
) -> None:
    page = open_host(browser, host_site, ai_server, "tiptap", "host-rewrite")
    page.locator(".tiptap").click()
    page.keyboard.type("We decided to ship it on Friday.")
    page.keyboard.press("Escape")  # a ghost the pause may have asked for
    page.keyboard.press("Shift+Home")
    page.keyboard.press("Control+Shift+r")
    panel = page.locator("#rewrite")
    expect(panel.locator("#dropped")).to_contain_text("weekday: Friday", timeout=15000)
    expect(panel.locator("#diff del", has_text="Friday")).to_have_count(1)
    expect(panel.locator("#diff ins", has_text="gulls")).to_have_count(1, timeout=15000)
    expect(panel.locator("#accept")).to_have_text("Accept anyway")
    panel.locator("#accept-unconfirmed").click()
    expect(panel).to_have_attribute("data-error", "confirm_required")
    wait_text(page, "We decided to ship it on Friday.")
    panel.locator("#accept").click()
    page.wait_for_function("() => window.host.text().trim() === 'and the gulls cried.'")
    expect(panel).to_have_attribute("data-state", "applied", timeout=15000)
    page.context.close()


def test_in_a_codemirror_app_ghost_text_comes_after_a_pause_and_tab_accepts_it_for_both(
    browser: Browser,  # noqa: F811
    host_site: str,
    ai_server: ServerProcess,
) -> None:
    writer = open_host(browser, host_site, ai_server, "codemirror", "host-cm")
    reader = open_host(browser, host_site, ai_server, "codemirror", "host-cm")
    writer.locator(".cm-content").click()
    writer.keyboard.type("The boats came home 😀")
    ghost = writer.locator("[data-testid=ghost]")
    expect(ghost).to_have_text(GHOST, timeout=15000)
    writer.keyboard.press("Tab")
    expected = "The boats came home 😀" + GHOST
    wait_text(reader, expected)
    wait_text(writer, expected)
    writer.keyboard.type(" Z")  # the cursor is after the accepted text
    wait_text(reader, expected + " Z")
    assert reader.evaluate("() => window.host.view.state.doc.toString()") == expected + " Z"
    writer.context.close()
    reader.context.close()


def test_in_a_codemirror_app_typing_through_a_ghost_keeps_its_rest_and_escape_drops_it(
    browser: Browser,  # noqa: F811
    host_site: str,
    ai_server: ServerProcess,
) -> None:
    page = open_host(browser, host_site, ai_server, "codemirror", "host-cm-through")
    page.locator(".cm-content").click()
    page.keyboard.type("Gulls over the harbour")
    ghost = page.locator("[data-testid=ghost]")
    expect(ghost).to_have_text(GHOST, timeout=15000)
    page.keyboard.type(" and")
    expect(ghost).to_have_text(" the gulls cried.")
    page.keyboard.press("Tab")
    wait_text(page, "Gulls over the harbour" + GHOST)
    page.keyboard.press("Enter")
    page.keyboard.type("Second line")
    expect(ghost).to_have_text(GHOST, timeout=15000)
    page.keyboard.press("Escape")
    expect(ghost).to_have_count(0)
    wait_text(page, "Gulls over the harbour" + GHOST + "\nSecond line")
    page.context.close()


def test_in_a_tiptap_app_the_typed_rest_of_a_ghost_is_text_even_when_it_looks_like_html(
    browser: Browser,  # noqa: F811
    host_site: str,
    tmp_path: Path,
) -> None:
    """After a type-through, Tab types the rest in this editor: the model's words, as text."""
    script = '{"replies": {"Some markup": [" <b>loud", "</b> words"]}, "delay": 0.02}'
    settings = {"ai_provider": "scripted", "ai_script": script, **WHOLE_STREAMS}
    with ServerProcess(tmp_path, **settings) as server:
        page = open_host(browser, host_site, server, "tiptap", "host-markup")
        page.locator(".tiptap").click()
        page.keyboard.type("Some markup")
        ghost = page.locator("[data-testid=ghost]")
        expect(ghost).to_have_text(" <b>loud</b> words", timeout=15000)
        page.keyboard.type(" ")
        expect(ghost).to_have_text("<b>loud</b> words")
        page.keyboard.press("Tab")
        wait_text(page, "Some markup <b>loud</b> words")
        paragraph = page.evaluate("() => window.host.editor.getJSON().content[0].content")
        assert paragraph == [{"type": "text", "text": "Some markup <b>loud</b> words"}]
        page.context.close()
