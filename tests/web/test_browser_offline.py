"""The web editor offline, in real headless Chromium: the document kept in the browser
(IndexedDB) and the page shell kept by its service worker, so a reload with the server down
shows every edit and they all reach the server when it is back; a status that follows the
socket; the read-only state; local copies off and cleared; the token out of the address bar."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.httpproxy import ThreadedProxy
from tests.serverproc import ServerProcess
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    CSP_VIOLATIONS,
    SCRIPT,
    WHOLE_STREAMS,
    Browser,
    Page,
    browser,
    editor_text,
    expect,
    type_at_end,
)

LOCAL_DATABASES = """async () => (await indexedDB.databases())
    .map((db) => db.name).filter((name) => name.startsWith("tether|"))"""


@pytest.fixture(scope="module")
def offline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("web-offline"),
        ai_provider="scripted",
        ai_script=SCRIPT,
        **WHOLE_STREAMS,
    )
    with proc:
        yield proc


def open_editor(
    browser: Browser,  # noqa: F811
    server: ServerProcess,
    document: str,
    token: str,
    query: str = "",
) -> Page:
    context = browser.new_context(viewport={"width": 1100, "height": 560})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the unsaved-edits warning, if asked
    page.on(
        "console",
        lambda m: CSP_VIOLATIONS.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(f"{server.http_url}/d/{document}?token={token}&editor=plain{query}")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-editor", "plain", timeout=15000)
    return page


def wait_saved_locally(page: Page) -> None:
    expect(page.locator("body")).to_have_attribute("data-local", "saved", timeout=10000)


def wait_all_saved(page: Page) -> None:
    body = page.locator("body")
    expect(body).to_have_attribute("data-connection", "connected", timeout=20000)
    expect(body).to_have_attribute("data-unsaved", "false", timeout=20000)
    expect(page.locator("#tether-pending")).to_have_text("all changes saved", timeout=20000)


def server_text(server: ServerProcess, document: str) -> str:
    reply = httpx.get(
        f"{server.http_url}/api/documents/{document}",
        headers={"Authorization": f"Bearer {server.token()}"},
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["text"])


def reload_warned(page: Page) -> list[str]:
    """Reload the page, accepting the browser's question; the kinds of dialog it asked."""
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.type))
    page.reload()
    return asked


@pytest.mark.slow
def test_edits_typed_offline_survive_a_reload_without_the_server_and_reach_it_when_it_returns(
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    with ServerProcess(tmp_path / "data", ai_provider="none") as server:
        token = server.token(["off-*"])
        page = open_editor(browser, server, "off-reload", token)
        expect(page.locator("body")).to_have_attribute("data-shell", "kept", timeout=15000)
        type_at_end(page, "Typed online.")
        wait_all_saved(page)
        server.stop()
        expect(page.locator("body")).to_have_attribute("data-connection", "offline", timeout=15000)
        type_at_end(page, " Typed offline.")
        expect(page.locator("#tether-pending")).to_contain_text("not yet saved")
        wait_saved_locally(page)
        asked = reload_warned(page)
        assert asked == ["beforeunload"], asked  # unacknowledged edits: the browser asked
        # The shell came from the service worker, the text from the local copy.
        body = page.locator("body")
        expect(body).to_have_attribute("data-connection", "offline", timeout=15000)
        expect(page.locator(".cm-content")).to_contain_text(
            "Typed online. Typed offline.", timeout=15000
        )
        expect(page.locator("#tether-pending")).to_have_text("edits not yet saved")
        # Still editable offline (the last grant was read-write), and kept again.
        type_at_end(page, " After the reload.")
        wait_saved_locally(page)
        server.start()
        wait_all_saved(page)
        expected = "Typed online. Typed offline. After the reload."
        assert editor_text(page) == expected
        assert server_text(server, "off-reload") == expected
        other = open_editor(browser, server, "off-reload", token)
        expect(other.locator(".cm-content")).to_contain_text(expected)
        assert editor_text(other) == expected
        page.context.close()
        other.context.close()
    assert CSP_VIOLATIONS == []


@pytest.mark.slow
def test_a_server_killed_while_typing_and_a_reloaded_tab_lose_nothing(
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    with ServerProcess(tmp_path / "data", ai_provider="none") as server:
        token = server.token(["kill-*"])
        page = open_editor(browser, server, "kill-typing", token)
        type_at_end(page, "one two three ")
        server.kill()  # while its acks may still be on their way
        page.keyboard.type("four five six")
        wait_saved_locally(page)
        reload_warned(page)
        expect(page.locator(".cm-content")).to_contain_text(
            "one two three four five six", timeout=15000
        )
        server.start()
        wait_all_saved(page)
        assert server_text(server, "kill-typing") == "one two three four five six"
        page.context.close()


def test_after_the_network_or_the_server_is_away_the_status_returns_to_a_websocket_in_seconds(
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    with ServerProcess(tmp_path / "data", ai_provider="none") as server:
        page = open_editor(browser, server, "blip-status", server.token(["blip-*"]))
        body = page.locator("body")
        status = page.locator("#tether-status")
        expect(status).to_have_text("connected · WebSocket")
        page.context.set_offline(True)
        expect(body).to_have_attribute("data-online", "false", timeout=5000)
        expect(status).to_have_text("offline", timeout=5000)
        type_at_end(page, "typed without a network")
        page.context.set_offline(False)
        # Back within a few seconds, over a WebSocket, and saved: not a sticky "offline".
        expect(status).to_have_text("connected · WebSocket", timeout=8000)
        expect(body).to_have_attribute("data-online", "true")
        wait_all_saved(page)
        # A server restart: the failed attempts meanwhile (a WebSocket, then HTTP, neither
        # reaching it) must not leave the page on the HTTP stream for a minute afterwards.
        server.stop()
        page.wait_for_function("() => Number(document.body.dataset.failures) >= 2", timeout=15000)
        server.start()
        expect(status).to_have_text("connected · WebSocket", timeout=10000)
        expect(body).to_have_attribute("data-transport", "ws")
        assert server_text(server, "blip-status") == "typed without a network"
        page.context.close()


def test_a_page_put_on_the_http_stream_by_a_blip_moves_back_to_a_websocket_in_seconds(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    """WebSockets refused for a moment (the page falls back to HTTP, which works): once they
    pass again the page is back on one within seconds (tries from 1 s, doubling), not after
    the minute kept for proxies that always refuse them."""
    with ThreadedProxy(offline_server.port, refuse_upgrades=False) as proxy:
        page = browser.new_context().new_page()
        token = offline_server.token(["probe-*"])
        page.goto(f"{proxy.http_url}/d/probe-doc?token={token}&editor=plain")
        body = page.locator("body")
        expect(body).to_have_attribute("data-transport", "ws", timeout=15000)
        proxy.refuse_upgrades = True
        page.evaluate("() => window.tether.websocketProvider.webSocket.close()")
        expect(body).to_have_attribute("data-transport", "http-stream", timeout=15000)
        expect(page.locator("#tether-status")).to_have_text("connected · HTTP stream")
        proxy.refuse_upgrades = False
        expect(page.locator("#tether-status")).to_have_text("connected · WebSocket", timeout=15000)
        type_at_end(page, "over a WebSocket again")
        wait_all_saved(page)
        page.context.close()


def test_a_readonly_page_is_not_editable_says_read_only_and_a_refused_write_is_not_saved(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    writer = open_editor(browser, offline_server, "ro-doc", offline_server.token(["ro-*"]))
    type_at_end(writer, "the owner's words")
    wait_all_saved(writer)
    reader = open_editor(
        browser, offline_server, "ro-doc", offline_server.token(["ro-*"], scope="readonly")
    )
    expect(reader.locator("#tether-scope")).to_be_visible()
    expect(reader.locator("#tether-scope")).to_have_text("read-only")
    expect(reader.locator("body")).to_have_attribute("data-scope", "readonly")
    expect(reader.locator(".cm-content")).to_have_attribute("contenteditable", "false")
    type_at_end(reader, "reader typing")
    assert editor_text(reader) == "the owner's words"
    # A write that gets past the editor anyway: the server refuses it, and the page says so
    # instead of "all changes saved".
    reader.evaluate("() => window.tether.ytext.insert(0, 'sneaky ')")
    pending = reader.locator("#tether-pending")
    expect(pending).to_have_text("read-only: 1 edit not saved", timeout=10000)
    expect(reader.locator("body")).to_have_attribute("data-refused", "1")
    assert server_text(offline_server, "ro-doc") == "the owner's words"
    writer.context.close()
    reader.context.close()


def test_local_off_keeps_nothing_in_indexeddb_and_clears_what_was_kept(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    token = offline_server.token(["lo-*"])
    page = open_editor(browser, offline_server, "lo-kept", token)
    type_at_end(page, "kept here")
    wait_saved_locally(page)
    assert len(page.evaluate(LOCAL_DATABASES)) == 1
    wait_all_saved(page)
    # The same browser, this document with ?local=off: its copy goes, nothing new is kept.
    page.goto(f"{offline_server.http_url}/d/lo-kept?editor=plain&local=off")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-local", "off")
    expect(page.locator("#tether-local")).to_have_text("no local copy")
    type_at_end(page, " and more")
    wait_all_saved(page)
    assert page.evaluate(LOCAL_DATABASES) == []
    page.context.close()


def test_a_deployment_with_local_copies_off_keeps_none_and_serves_no_worker(
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    with ServerProcess(tmp_path / "data", ai_provider="none", web_local_copies="off") as server:
        assert httpx.get(server.http_url + "/sw.js").status_code == 404
        page = open_editor(browser, server, "dep-off", server.token())
        type_at_end(page, "nothing kept")
        wait_all_saved(page)
        assert page.evaluate(LOCAL_DATABASES) == []
        registrations = page.evaluate(
            "async () => (await navigator.serviceWorker.getRegistrations()).length"
        )
        assert registrations == 0
        page.context.close()


def test_a_deleted_document_takes_its_local_copy_with_it(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    page = open_editor(browser, offline_server, "del-doc", offline_server.token(["del-*"]))
    type_at_end(page, "soon gone")
    wait_all_saved(page)
    assert len(page.evaluate(LOCAL_DATABASES)) == 1
    reply = httpx.delete(
        f"{offline_server.http_url}/api/documents/del-doc",
        headers={"Authorization": f"Bearer {offline_server.token()}"},
    )
    assert reply.status_code in (200, 204), reply.text
    expect(page.locator("#tether-refusal")).to_contain_text("deleted", timeout=10000)
    page.wait_for_function(f"async () => (await ({LOCAL_DATABASES})()).length === 0", timeout=10000)
    page.context.close()


def test_a_token_that_expires_keeps_the_local_copy_and_its_unsaved_edits(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    """An expired token says nothing about access: signing in again fixes it, so the copy,
    and what was typed in it, stays (only a deletion, or a refusal of access with nothing
    unsaved, clears it)."""
    page = open_editor(browser, offline_server, "exp-doc", offline_server.token(["exp-*"], ttl=4))
    type_at_end(page, "kept through expiry")
    wait_all_saved(page)
    expect(page.locator("#tether-refusal")).to_contain_text("token expired", timeout=15000)
    assert len(page.evaluate(LOCAL_DATABASES)) == 1
    page.context.close()


def test_the_token_leaves_the_address_bar_and_the_typed_name_and_its_colour_stay(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    token = offline_server.token(["name-*"])
    page = open_editor(browser, offline_server, "name-doc", token)
    assert "token" not in page.url and "editor=plain" in page.url
    assert page.evaluate("() => sessionStorage.getItem('tether.token')") == token
    assert page.evaluate("() => localStorage.getItem('tether.token')") is None
    other = open_editor(browser, offline_server, "name-doc", token)
    page.fill("#tether-name", "Ada Lovelace")
    page.keyboard.press("Enter")
    page.locator(".cm-content").click()  # the field's change is committed on leaving it
    expect(other.locator("#tether-presence")).to_contain_text("Ada Lovelace", timeout=10000)
    color = page.evaluate("() => window.tether.user.color")
    page.reload()  # from the tab's sessionStorage: no ?token= in the address any more
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("#tether-name")).to_have_value("Ada Lovelace")
    assert page.evaluate("() => window.tether.user.color") == color
    awareness = page.evaluate(
        "() => JSON.stringify(window.tether.provider.awareness.getLocalState().user)"
    )
    assert json.loads(awareness)["name"] == "Ada Lovelace"
    page.context.close()
    other.context.close()


def test_a_rewrite_that_drops_content_shows_what_and_accept_confirms_only_after_that(
    browser: Browser,  # noqa: F811
    offline_server: ServerProcess,
) -> None:
    page = open_editor(browser, offline_server, "drop-doc", offline_server.token(["drop-*"]))
    expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
    type_at_end(page, "We decided to ship it on Friday.")
    page.keyboard.press("Control+a")
    page.evaluate(
        """() => {
            window.sentAi = [];
            const provider = window.tether.provider;
            const send = provider.sendStateless.bind(provider);
            provider.sendStateless = (payload) => {
                window.sentAi.push(JSON.parse(payload));
                send(payload);
            };
        }"""
    )
    page.locator("#tether-rewrite").click()
    dropped = page.locator("#tether-rewrite-dropped")
    expect(dropped).to_contain_text("Would drop:", timeout=15000)
    expect(dropped).to_contain_text("Friday")
    accept = page.locator("#tether-rewrite-accept")
    expect(accept).to_have_text("Accept anyway")
    accept.click()
    expect(page.locator(".cm-content")).to_have_text("and the gulls cried.", timeout=15000)
    accepts = [m for m in page.evaluate("() => window.sentAi") if m["type"] == "accept"]
    assert accepts and accepts[-1].get("confirm_dropped") is True, accepts
    page.context.close()
