"""The web editor in real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pycrdt import Doc, Text

from tests.hostproc import REPO, HostProcess
from tests.serverproc import ServerProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - reported by the skip below
    sync_playwright = None  # type: ignore[assignment]

if sync_playwright is None or not Path(CHROMIUM).exists():
    pytest.skip(
        "browser tests need Playwright and Debian's chromium (.ci/setup installs both)",
        allow_module_level=True,
    )

FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCRIPT = '{"pieces": [" and", " the", " gulls", " cried."], "delay": 0.02}'
# These pages test streaming and the AI buttons: whole streams, shown as the model writes them.
WHOLE_STREAMS: dict[str, object] = {"ai_stop": "tokens", "ai_heal": "off", "ai_junk_filter": "off"}


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("web"),
        ai_provider="scripted",
        ai_script=SCRIPT,
        **WHOLE_STREAMS,
    )
    with proc:
        yield proc


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


# Every Content-Security-Policy violation any page reported (the pages must work under it).
CSP_VIOLATIONS: list[str] = []


def open_page(
    browser: Browser, server: ServerProcess, document: str, token: str, editor: str = "plain"
) -> Page:
    """The editor page on ``document``; these tests drive the plain (CodeMirror) editor, which
    a new document only gets when asked (``?editor=plain``): it opens rich by default."""
    context = browser.new_context(viewport={"width": 1000, "height": 520})
    page = context.new_page()
    page.on(
        "console",
        lambda m: CSP_VIOLATIONS.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(f"{server.http_url}/d/{document}?token={token}&editor={editor}")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-editor", editor, timeout=15000)
    return page


def editor_text(page: Page) -> str:
    return str(page.evaluate("() => window.tether.ytext.toString()"))


def type_at_end(page: Page, text: str) -> None:
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def test_typing_in_one_page_appears_in_the_other_with_the_remote_cursor(
    browser: Browser, web_server: ServerProcess
) -> None:
    token = web_server.token(["web-*"])
    first = open_page(browser, web_server, "web-two", token)
    second = open_page(browser, web_server, "web-two", token)
    type_at_end(first, "Hello from the first page 😀")
    expect(second.locator(".cm-content")).to_contain_text("Hello from the first page 😀")
    expect(second.locator(".cm-ySelectionCaret")).to_have_count(1, timeout=10000)
    expect(second.locator("#tether-presence li")).to_have_count(2, timeout=10000)
    ARTIFACTS.mkdir(exist_ok=True)
    first.screenshot(path=str(ARTIFACTS / "two-pages-first.png"))
    second.screenshot(path=str(ARTIFACTS / "two-pages-second.png"))
    first.context.close()
    second.context.close()
    assert CSP_VIOLATIONS == []


HOSTILE = "red;background:url(http://attacker.invalid/x.png)"


def test_a_readonly_pages_css_colour_never_styles_another_page(
    browser: Browser, web_server: ServerProcess
) -> None:
    victim = open_page(browser, web_server, "web-css", web_server.token(["web-*"]))
    fetched: list[str] = []
    victim.on("request", lambda r: fetched.append(r.url))
    attacker = open_page(
        browser, web_server, "web-css", web_server.token(["web-*"], scope="readonly")
    )
    attacker_id = attacker.evaluate("() => window.tether.ydoc.clientID")
    attacker.evaluate(
        """(hostile) => window.tether.provider.setAwarenessField(
            "user", {name: "Mallory".repeat(50), color: hostile, colorLight: hostile})""",
        HOSTILE,
    )
    item = victim.locator(f'#tether-presence li[data-client-id="{attacker_id}"]')
    expect(item.locator(".name")).to_have_text(("Mallory" * 50)[:64], timeout=10000)
    dot_style = item.locator(".dot").get_attribute("style") or ""
    assert "url" not in dot_style and "attacker" not in dot_style, dot_style
    # The server dropped the colour; the page's own guard holds even if a server did not:
    # a hostile state put straight into the page's awareness map is cleaned before use.
    cleaned = victim.evaluate(
        """(hostile) => {
            const aw = window.tether.provider.awareness;
            aw.states.set(424242, {user: {name: "x".repeat(500), color: hostile}});
            aw.emit("change", [{added: [424242], updated: [], removed: []}, "test"]);
            return aw.getStates().get(424242).user;
        }""",
        HOSTILE,
    )
    assert cleaned == {"name": "x" * 64}, cleaned
    assert not [url for url in fetched if "attacker.invalid" in url], fetched
    attacker.context.close()
    victim.context.close()
    assert CSP_VIOLATIONS == []


def test_a_ghost_suggestion_appears_and_tab_accepts_it_for_everyone(
    browser: Browser, web_server: ServerProcess
) -> None:
    token = web_server.token(["web-*"])
    writer = open_page(browser, web_server, "web-ghost", token)
    reader = open_page(browser, web_server, "web-ghost", token)
    expect(writer.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
    expect(writer.locator("#tether-suggest")).to_be_enabled()
    type_at_end(writer, "The boats came home")
    writer.keyboard.press("Control+Space")
    ghost = writer.locator("[data-testid=ghost]")
    expect(ghost).to_contain_text("gulls cried.", timeout=15000)
    writer.keyboard.press("Tab")
    expected = "The boats came home and the gulls cried."
    expect(reader.locator(".cm-content")).to_contain_text(expected, timeout=15000)
    # The accepted text is a server-side edit: it reaches the writer as it reaches the reader,
    # by fan-out, not necessarily first.
    expect(writer.locator(".cm-content")).to_contain_text(expected, timeout=15000)
    assert editor_text(writer) == editor_text(reader)
    writer.context.close()
    reader.context.close()


def test_a_junk_suggestion_shows_nothing_and_its_kind_goes_to_the_console(
    browser: Browser, tmp_path: Path
) -> None:
    # The default length and filter; this document's model answer repeats the word just typed.
    script = '{"replies": {"sailed along": [" the", " coast"]}, "delay": 0.02}'
    with ServerProcess(tmp_path, ai_provider="scripted", ai_script=script) as server:
        page = open_page(browser, server, "web-junk", server.token(["web-*"]))
        expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
        type_at_end(page, "We sailed along the")
        with page.expect_console_message(
            lambda m: "dropped as junk" in m.text, timeout=15000
        ) as logged:
            page.keyboard.press("Control+Space")
        assert "(echo)" in logged.value.text
        expect(page.locator("[data-testid=ghost]")).to_have_count(0)
        assert page.locator("#tether-ai").text_content() == ""  # no note either
        assert editor_text(page) == "We sailed along the"
        page.context.close()


def test_edits_typed_while_the_server_is_down_arrive_after_it_returns(
    browser: Browser, tmp_path: Path
) -> None:
    with ServerProcess(tmp_path / "data", ai_provider="none") as server:
        token = server.token(["web-*"])
        first = open_page(browser, server, "web-restart", token)
        second = open_page(browser, server, "web-restart", token)
        type_at_end(first, "before.")
        expect(second.locator(".cm-content")).to_contain_text("before.")
        server.stop()
        expect(first.locator("body")).not_to_have_attribute(
            "data-connection", "connected", timeout=15000
        )
        type_at_end(first, " one-offline")
        type_at_end(second, " two-offline")
        server.start()
        for page in (first, second):
            expect(page.locator(".cm-content")).to_contain_text("one-offline", timeout=20000)
            expect(page.locator(".cm-content")).to_contain_text("two-offline", timeout=20000)
        assert editor_text(first) == editor_text(second)
        first.context.close()
        second.context.close()


def test_a_page_without_access_sees_the_refusal_and_no_document_text(
    browser: Browser, web_server: ServerProcess
) -> None:
    owner = open_page(browser, web_server, "web-secret", web_server.token(["web-*"]))
    type_at_end(owner, "classified words")
    context = browser.new_context()
    page = context.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.goto(f"{web_server.http_url}/d/web-secret?token={web_server.token(['other-*'])}")
    expect(page.locator("#tether-refusal")).to_be_visible(timeout=15000)
    expect(page.locator("#tether-refusal")).to_contain_text("refused")
    # Only the card: no leftover sidebar ("Here now", shortcuts) above it (issue 12).
    expect(page.locator(".sidebar")).to_be_hidden()
    expect(page.get_by_text("Here now")).to_be_hidden()
    assert "classified" not in page.content()
    assert missing == []  # the favicon the page links is served
    context.close()
    owner.context.close()


def test_ai_buttons_grey_out_with_the_reason_while_sync_goes_on(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model worker that cannot pass its self-test (a build that faults on this CPU): the
    editor says so on its AI buttons, and editing and sync are untouched."""
    monkeypatch.setenv("TETHER_AI_FAULT", "selftest-crash")
    with ServerProcess(
        tmp_path,
        ai_provider="local",
        ai_semantic="off",
        **WHOLE_STREAMS,
    ) as server:
        assert server.wait_ai()["state"] == "degraded"
        token = server.token(["web-*"])
        first = open_page(browser, server, "web-degraded", token)
        second = open_page(browser, server, "web-degraded", token)
        expect(first.locator("body")).to_have_attribute("data-ai", "degraded", timeout=10000)
        suggest = first.locator("#tether-suggest")
        expect(suggest).to_be_disabled()
        expect(suggest).to_have_attribute("title", re.compile(r"AI unavailable: .*self-test"))
        expect(first.locator("#tether-rewrite")).to_be_disabled()
        type_at_end(first, "still syncing")
        expect(second.locator(".cm-content")).to_contain_text("still syncing")
        first.context.close()
        second.context.close()


# Every change of the Suggest button's state, seen in the page (the grey spell after a crash
# may be shorter than any polling interval).
WATCH_SUGGEST = """() => {
  const button = document.querySelector("#tether-suggest");
  window.seenSuggest = [];
  const note = () => window.seenSuggest.push(
    {disabled: button.disabled, title: button.title, ai: document.body.dataset.ai});
  new MutationObserver(note).observe(button, {attributes: true});
}"""


def test_a_worker_crash_mid_suggestion_greys_the_ai_buttons_until_ai_is_back(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_AI_FAULT", "crash-after-tokens:1")
    with ServerProcess(
        tmp_path,
        ai_provider="local",
        ai_semantic="off",
        **WHOLE_STREAMS,
    ) as server:
        page = open_page(browser, server, "web-crash", server.token(["web-*"]))
        expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
        suggest = page.locator("#tether-suggest")
        expect(suggest).to_be_enabled()
        page.evaluate(WATCH_SUGGEST)
        type_at_end(page, "It was a dark and stormy night")
        page.keyboard.press("Control+Space")
        page.wait_for_function("() => window.seenSuggest.some((s) => s.disabled)", timeout=30000)
        server.wait_ai(restarts=1, settled=("ready",))
        expect(suggest).to_be_enabled(timeout=15000)
        expect(page.locator("body")).to_have_attribute("data-ai", "ready")
        expect(suggest).to_have_attribute("title", re.compile(r"^Suggest a continuation"))
        greyed = [s["title"] for s in page.evaluate("() => window.seenSuggest") if s["disabled"]]
        assert any("SIGSEGV" in title for title in greyed), greyed
        assert all(re.match(r"AI unavailable: (?!AI)", title) for title in greyed), greyed
        expect(page.locator("[data-testid=ghost]")).to_have_count(0)
        page.context.close()


def test_the_editor_works_mounted_under_a_prefix_in_a_fastapi_app(
    browser: Browser, tmp_path: Path
) -> None:
    """examples/fastapi_mount.py: pages at /collab/..., the bundle, /collab/ws and the index's
    REST calls all under the prefix, in a real browser."""
    pytest.importorskip("fastapi")
    example = REPO / "examples" / "fastapi_mount.py"
    with HostProcess(example, tmp_path, ready_path="/hello") as host:
        pages = []
        for _ in range(2):
            context = browser.new_context(viewport={"width": 1000, "height": 520})
            page = context.new_page()
            page.goto(f"{host.http_url}/collab/d/mounted/doc?editor=plain")
            expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
            pages.append(page)
        first, second = pages
        type_at_end(first, "typed under /collab")
        expect(second.locator(".cm-content")).to_contain_text("typed under /collab")
        expect(first.locator("a.brand")).to_have_attribute("href", "/collab/")
        reply = httpx.get(host.http_url + "/collab/api/documents/mounted/doc")
        assert reply.json()["text"] == "typed under /collab"
        index = first.context.new_page()
        index.goto(f"{host.http_url}/collab/")
        expect(index.locator('a[href="/collab/d/mounted/doc"]')).to_have_count(1, timeout=10000)
        first.context.close()
        second.context.close()


@pytest.mark.slow
def test_the_index_page_filters_by_name_and_deletes_after_a_confirm(
    browser: Browser, web_server: ServerProcess
) -> None:
    token = web_server.token()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
    for name in ("idx/alpha", "idx/beta", "idx/gamma"):
        doc = Doc()
        doc.get("content", type=Text).insert(0, name)
        reply = httpx.put(
            f"{web_server.http_url}/api/documents/{name}", content=doc.get_update(), headers=headers
        )
        assert reply.status_code == 200
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{web_server.http_url}/?token={token}")
    rows = page.locator("#tether-documents tbody tr")
    expect(page.locator('tr[data-name="idx/beta"]')).to_be_visible(timeout=15000)
    page.fill("#tether-search", "BET")
    expect(page.locator('tr[data-name="idx/beta"]')).to_be_visible()
    expect(page.locator('tr[data-name="idx/alpha"]')).to_be_hidden()
    page.fill("#tether-search", "nothing-like-this")
    expect(page.locator("#tether-index-status")).to_contain_text("No documents match")
    page.fill("#tether-search", "idx/")
    assert rows.filter(has_text="idx/").count() == 3
    # Dismissing the confirm deletes nothing; accepting it deletes that one document.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click('tr[data-name="idx/alpha"] button.delete')
    expect(page.locator('tr[data-name="idx/alpha"]')).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click('tr[data-name="idx/alpha"] button.delete')
    expect(page.locator('tr[data-name="idx/alpha"]')).to_have_count(0)
    expect(page.locator("#tether-index-status")).to_contain_text("Deleted")
    gone = httpx.get(f"{web_server.http_url}/api/documents/idx/alpha", headers=headers)
    assert gone.status_code == 404
    kept = httpx.get(f"{web_server.http_url}/api/documents/idx/beta", headers=headers)
    assert kept.status_code == 200
    context.close()
