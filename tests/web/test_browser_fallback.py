"""The web editor in real headless Chromium with every WebSocket blocked: the pages reach the
server only through a loopback proxy that refuses each Upgrade with 403 (as corporate proxies
do), so the editor must fall back to the HTTP transport by itself, converge, and say so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.httpproxy import LoopbackProxy, ThreadedProxy
from tests.serverproc import ServerProcess
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    CSP_VIOLATIONS,
    Browser,
    Page,
    browser,
    editor_text,
    expect,
    type_at_end,
)


@pytest.fixture(scope="module")
def fallback_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("web-fallback")) as proc:
        yield proc


def open_behind(
    browser: Browser,  # noqa: F811
    proxy: LoopbackProxy,
    document: str,
    token: str,
    editor: str,
) -> Page:
    page = browser.new_context(viewport={"width": 1000, "height": 520}).new_page()
    page.goto(f"{proxy.http_url}/d/{document}?token={token}&editor={editor}")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=20000)
    expect(page.locator("body")).to_have_attribute("data-editor", editor, timeout=20000)
    return page


def page_text(page: Page, editor: str) -> str:
    if editor == "plain":
        return editor_text(page)
    return str(page.evaluate("() => window.tether.editor.getText()"))


def type_into(page: Page, editor: str, text: str) -> None:
    if editor == "plain":
        type_at_end(page, text)
        return
    page.locator(".tiptap").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


@pytest.mark.parametrize(
    ("buffering", "transport", "label", "editor"),
    [
        (False, "http-stream", "HTTP stream", "plain"),
        (True, "http-poll", "HTTP polling", "rich"),
    ],
)
def test_two_pages_with_websockets_blocked_converge_over_http_and_say_so(
    browser: Browser,  # noqa: F811
    fallback_server: ServerProcess,
    buffering: bool,
    transport: str,
    label: str,
    editor: str,
) -> None:
    token = fallback_server.token(["fallback-*"])
    document = f"fallback-{transport}"
    content = ".cm-content" if editor == "plain" else ".tiptap"
    with ThreadedProxy(fallback_server.port, buffer_responses=buffering) as proxy:
        first = open_behind(browser, proxy, document, token, editor)
        second = open_behind(browser, proxy, document, token, editor)
        for page in (first, second):
            expect(page.locator("body")).to_have_attribute("data-transport", transport)
            expect(page.locator("#tether-status")).to_have_text(f"connected · {label}")
        type_into(first, editor, "over HTTP 😀")
        expect(second.locator(content)).to_contain_text("over HTTP 😀", timeout=15000)
        type_into(second, editor, " and back")
        expect(first.locator(content)).to_contain_text("over HTTP 😀 and back", timeout=15000)
        expect(second.locator("#tether-presence li")).to_have_count(2, timeout=15000)
        expect(first.locator("body")).to_have_attribute("data-pending", "0", timeout=15000)
        assert page_text(first, editor) == page_text(second, editor) == "over HTTP 😀 and back"
        assert proxy.refused_upgrades >= 2, "each page tried a WebSocket first"
        http_lines = [line for line in proxy.request_lines if " /http/" in line]
        assert http_lines and not any(token in line for line in http_lines)
        for page in (first, second):
            page.context.close()
    assert CSP_VIOLATIONS == []
