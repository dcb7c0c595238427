"""The rich (Tiptap) editor in real headless Chromium: two pages co-edit with bold and lists and
see each other's carets, ghost text is accepted with Tab (with the marks of the text it
continues), typing through a ghost keeps its rest, Esc drops it, a rewrite of a selection shows
its diff and replaces the selection, and a document holding only plain text opens in the plain
editor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.jsclient import tiptap_reads
from tests.serverproc import ServerProcess
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    CSP_VIOLATIONS,
    SCRIPT,
    WHOLE_STREAMS,
    Browser,
    Page,
    browser,
    expect,
    open_page,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rich_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("web-rich"),
        ai_provider="scripted",
        ai_script=SCRIPT,
        **WHOLE_STREAMS,
    )
    with proc:
        yield proc


def open_rich(browser: Browser, server: ServerProcess, document: str) -> Page:  # noqa: F811
    """A new document opens in the rich editor, with no ``?editor=``."""
    context = browser.new_context(viewport={"width": 1000, "height": 560})
    page = context.new_page()
    page.goto(f"{server.http_url}/d/{document}?token={server.token(['rich-*'])}")
    expect(page.locator("body")).to_have_attribute("data-synced", "true", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-editor", "rich", timeout=15000)
    expect(page.locator("body")).to_have_attribute("data-scope", "read-write", timeout=15000)
    return page


def type_at_end(page: Page, text: str) -> None:
    page.locator(".tiptap").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def wait_text(page: Page, expected: str) -> None:
    """Until the editor's document text (not its DOM, which carries the others' caret labels
    and the ghost) holds ``expected``."""
    page.wait_for_function(
        "(expected) => window.tether.editor.getText().includes(expected)",
        arg=expected,
        timeout=15000,
    )


def stored(server: ServerProcess, name: str) -> dict[str, Any]:
    """The document as the server holds it, read by Tiptap's own schema."""
    reply = httpx.get(
        f"{server.http_url}/api/documents/{name}",
        params={"format": "yjs"},
        headers={"Authorization": f"Bearer {server.token([name])}"},
    )
    assert reply.status_code == 200, reply.text
    return tiptap_reads(reply.content)


def markdown(server: ServerProcess, name: str) -> str:
    reply = httpx.get(
        f"{server.http_url}/api/documents/{name}",
        params={"format": "markdown"},
        headers={"Authorization": f"Bearer {server.token([name])}"},
    )
    assert reply.status_code == 200, reply.text
    return reply.text


def test_two_pages_co_edit_with_bold_and_lists_and_see_each_others_carets(
    browser: Browser,  # noqa: F811
    rich_server: ServerProcess,
) -> None:
    first = open_rich(browser, rich_server, "rich-two")
    second = open_rich(browser, rich_server, "rich-two")
    type_at_end(first, "Plans for the week ")
    first.keyboard.press("Control+b")
    first.keyboard.type("bold move")
    first.keyboard.press("Control+b")
    first.keyboard.press("Enter")
    first.keyboard.type("- first item")  # the input rule makes a bulleted list
    expect(second.locator(".tiptap strong")).to_have_text("bold move", timeout=15000)
    # (contain: the other page's caret, with its name, is drawn inside the text it is in)
    expect(second.locator(".tiptap ul li")).to_contain_text("first item", timeout=15000)
    second.locator(".tiptap ul li p").click()  # (Tiptap keeps a paragraph after the list)
    second.keyboard.press("End")
    second.keyboard.type(" and more")
    expect(first.locator(".tiptap ul li")).to_contain_text("first item and more", timeout=15000)
    # Each page shows the other's caret with its name.
    expect(first.locator(".collaboration-carets__caret")).to_have_count(1, timeout=15000)
    expect(second.locator(".collaboration-carets__label")).to_have_count(1, timeout=15000)
    expect(first.locator("#tether-presence li")).to_have_count(2, timeout=15000)
    expect(first.locator("body")).to_have_attribute("data-pending", "0", timeout=15000)
    assert first.evaluate("() => window.tether.editor.getJSON()") == second.evaluate(
        "() => window.tether.editor.getJSON()"
    )
    assert markdown(rich_server, "rich-two") == (
        "Plans for the week **bold move**\n\n- first item and more\n"
    )
    first.context.close()
    second.context.close()
    assert CSP_VIOLATIONS == []


def test_tab_accepts_a_ghost_with_the_marks_of_the_text_it_continues(
    browser: Browser,  # noqa: F811
    rich_server: ServerProcess,
) -> None:
    writer = open_rich(browser, rich_server, "rich-ghost")
    reader = open_rich(browser, rich_server, "rich-ghost")
    expect(writer.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
    writer.locator(".tiptap").click()
    writer.keyboard.press("Control+b")
    writer.keyboard.type("The boats came home")
    writer.keyboard.press("Control+Space")
    ghost = writer.locator("[data-testid=ghost]")
    expect(ghost).to_have_text(" and the gulls cried.", timeout=15000)
    writer.keyboard.press("Tab")
    expected = "The boats came home and the gulls cried."
    wait_text(reader, expected)
    wait_text(writer, expected)
    expect(ghost).to_have_count(0)
    # The cursor is after the accepted text: typing goes on from there.
    writer.keyboard.type(" Z")
    wait_text(reader, expected + " Z")
    paragraph = stored(rich_server, "rich-ghost")["content"][0]["content"]
    assert [node["text"] for node in paragraph] == [expected + " Z"]
    assert paragraph[0]["marks"] == [{"type": "bold"}]
    writer.context.close()
    reader.context.close()


def test_typing_through_a_ghost_keeps_its_rest_and_escape_drops_it(
    browser: Browser,  # noqa: F811
    rich_server: ServerProcess,
) -> None:
    page = open_rich(browser, rich_server, "rich-through")
    expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
    type_at_end(page, "Gulls over the harbour")
    page.keyboard.press("Control+Space")
    ghost = page.locator("[data-testid=ghost]")
    expect(ghost).to_have_text(" and the gulls cried.", timeout=15000)
    page.keyboard.type(" and")
    expect(ghost).to_have_text(" the gulls cried.")
    page.keyboard.press("Tab")
    wait_text(page, "Gulls over the harbour and the gulls cried.")
    page.keyboard.press("Enter")
    page.keyboard.type("Second line")
    page.keyboard.press("Control+Space")
    expect(ghost).to_have_text(" and the gulls cried.", timeout=15000)
    page.keyboard.press("Escape")
    expect(ghost).to_have_count(0)
    expect(page.locator(".tiptap p").nth(1)).to_have_text("Second line")
    page.context.close()


def test_a_rewrite_of_a_selection_shows_its_diff_and_replaces_it_in_its_paragraph(
    browser: Browser,  # noqa: F811
    rich_server: ServerProcess,
) -> None:
    page = open_rich(browser, rich_server, "rich-rewrite")
    expect(page.locator("body")).to_have_attribute("data-ai", "ready", timeout=10000)
    type_at_end(page, "Title")
    page.keyboard.press("Enter")
    page.keyboard.type("replace this part")
    page.keyboard.press("Shift+Home")  # select the second paragraph's text
    page.locator("#tether-rewrite").click()
    diff = page.locator("#tether-rewrite-diff")
    expect(diff.locator("del").first).to_contain_text("replace", timeout=15000)
    expect(diff).to_contain_text("gulls cried.", timeout=15000)
    page.locator("#tether-rewrite-accept").click()
    expect(page.locator(".tiptap p").nth(1)).to_have_text("and the gulls cried.", timeout=15000)
    expect(page.locator(".tiptap p").nth(0)).to_have_text("Title")
    page.context.close()


def test_a_document_of_plain_text_opens_in_the_plain_editor(
    browser: Browser,  # noqa: F811
    rich_server: ServerProcess,
) -> None:
    name = "rich-plain-text"
    reply = httpx.put(
        f"{rich_server.http_url}/api/documents/{name}",
        content="# Notes\n\nkept as Markdown source",
        headers={
            "Authorization": f"Bearer {rich_server.token([name])}",
            "Content-Type": "text/plain",
        },
    )
    assert reply.status_code == 200, reply.text
    context = browser.new_context(viewport={"width": 1000, "height": 560})
    page = context.new_page()
    page.goto(f"{rich_server.http_url}/d/{name}?token={rich_server.token(['rich-*'])}")
    expect(page.locator("body")).to_have_attribute("data-editor", "plain", timeout=15000)
    expect(page.locator(".cm-content")).to_contain_text("kept as Markdown source")
    expect(page.locator(".tiptap")).to_have_count(0)
    context.close()
    # And a page asked for the plain editor gets it on a new document.
    plain = open_page(browser, rich_server, "rich-asked-plain", rich_server.token(["rich-*"]))
    expect(plain.locator(".cm-content")).to_have_count(1)
    plain.context.close()
