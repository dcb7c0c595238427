"""A refused write is never reported as saved (issue 38, item 3): through the real server, over
the WebSocket and the HTTP fallback, a read-only client's edit raises ``WriteRefusedError``
naming the document, its local text returns to the server's, the refused change is handed back,
nobody else sees it, and a read-write editor of the same document carries on."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from pycrdt import Doc, Text

from tests.serverproc import ServerProcess, rest_text
from tether.client import DocumentHandle, TetherClient, WriteRefusedError

pytestmark = pytest.mark.anyio

TRANSPORTS = ["ws", "http"]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def client(server: ServerProcess, token: str, transport: str) -> AsyncIterator[TetherClient]:
    async with TetherClient(server.ws_url, token=token, transport=transport) as opened:  # type: ignore[arg-type]
        yield opened


def raw_append(handle: DocumentHandle, value: str) -> None:
    """An edit made in the handle's pycrdt Doc directly, past the helpers' checks."""
    text = handle.doc.get("content", type=Text)
    text.insert(len(text), value)


def text_of(doc: Doc | None) -> str:
    assert doc is not None
    return str(doc.get("content", type=Text))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_edit_helpers_of_a_readonly_handle_raise_at_once_and_change_nothing(
    server: ServerProcess, transport: str
) -> None:
    name = unique("ro-helpers")
    with anyio.fail_after(20):
        async with client(server, server.token([name], scope="readonly"), transport) as bob:
            notes = await bob.open(name)
            assert notes.scope == "readonly"
            for edit in (
                lambda: notes.append("bob writes"),
                lambda: notes.insert(0, "bob writes"),
                lambda: notes.delete(0, 1),
            ):
                with pytest.raises(WriteRefusedError, match=name) as refused:
                    edit()
                assert refused.value.document == name
                assert "readonly" in refused.value.reason
                assert refused.value.local_doc is None
            assert str(notes) == ""
            await notes.wait_acked()  # nothing was changed, so nothing is owed
    assert await rest_text(server, name) == ""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_raw_edit_under_a_readonly_grant_raises_from_wait_acked_and_is_rolled_back(
    server: ServerProcess, transport: str
) -> None:
    name = unique("ro-raw")
    with anyio.fail_after(30):
        async with (
            client(server, server.token([name]), transport) as alice,
            client(server, server.token([name], scope="readonly"), transport) as bob,
        ):
            writer = await alice.open(name)
            writer.append("base")
            await writer.wait_acked()
            reader = await bob.open(name)
            await reader.wait_text("base")
            held = reader.doc

            raw_append(reader, " bob writes")
            assert str(reader) == "base bob writes"
            with pytest.raises(WriteRefusedError, match=name) as refused:
                await reader.wait_acked()
            assert refused.value.document == name
            assert "readonly" in refused.value.reason
            # Rolled back to what the server holds; the refused change is handed back.
            assert str(reader) == "base"
            assert refused.value.local_doc is held and reader.doc is not held
            assert text_of(refused.value.local_doc) == "base bob writes"
            assert await rest_text(server, name) == "base"

            # The writer carries on, and the rolled-back reader follows the server live.
            writer.append(" and more")
            await writer.wait_acked()
            await reader.wait_text("base and more")
            assert str(writer) == "base and more"
            await reader.wait_acked()  # the refusal was reported once
    assert await rest_text(server, name) == "base and more"


async def test_offline_edits_under_a_readonly_grant_are_refused_once_back_online(
    server: ServerProcess,
) -> None:
    name = unique("ro-offline")
    with anyio.fail_after(30):
        async with (
            client(server, server.token([name]), "ws") as alice,
            client(server, server.token([name], scope="readonly"), "ws") as bob,
        ):
            writer = await alice.open(name)
            writer.append("kept")
            await writer.wait_acked()
            reader = await bob.open(name)
            await reader.wait_text("kept")
            await bob.go_offline()
            raw_append(reader, " typed offline")
            writer.append(" online")
            await writer.wait_acked()
            bob.go_online()
            with pytest.raises(WriteRefusedError, match=name) as refused:
                await reader.wait_acked()
            assert str(reader) == "kept online"
            assert "typed offline" in text_of(refused.value.local_doc)
            assert await rest_text(server, name) == "kept online"


async def test_a_doc_handed_to_open_under_a_readonly_grant_is_refused_and_given_back(
    server: ServerProcess,
) -> None:
    name = unique("ro-own-doc")
    mine = Doc()
    mine.get("content", type=Text).insert(0, "bob's draft")
    with anyio.fail_after(20):
        async with client(server, server.token([name], scope="readonly"), "ws") as bob:
            reader = await bob.open(name, doc=mine)
            with pytest.raises(WriteRefusedError, match=name) as refused:
                await reader.wait_acked()
            assert refused.value.local_doc is mine
            assert text_of(mine) == "bob's draft"
            assert reader.doc is not mine and str(reader) == ""
    assert await rest_text(server, name) == ""


async def test_a_token_narrowed_mid_session_refuses_the_writes_sent_after_it(
    server: ServerProcess,
) -> None:
    name = unique("narrowed")
    with anyio.fail_after(20):
        async with client(server, server.token([name]), "ws") as bob:
            notes = await bob.open(name)
            notes.append("a")
            await notes.wait_acked()
            notes.set_token(server.token([name], scope="readonly"))
            # Sent after the new token, so judged under it, though the answer is not in yet.
            notes.append("b")
            with pytest.raises(WriteRefusedError, match=name):
                await notes.wait_acked()
            assert notes.scope == "readonly"
            assert str(notes) == "a"
            with pytest.raises(WriteRefusedError):
                notes.append("c")
    assert await rest_text(server, name) == "a"


async def test_a_readonly_reader_that_reconnects_is_not_told_of_writes_it_never_made(
    server: ServerProcess,
) -> None:
    """Its resync reply carries the document's delete set, which the server answers with
    SyncStatus 0 under readonly: not a refused write, since nothing in it is the reader's."""
    name = unique("ro-deletes")
    with anyio.fail_after(20):
        async with (
            client(server, server.token([name]), "ws") as alice,
            client(server, server.token([name], scope="readonly"), "ws") as bob,
        ):
            writer = await alice.open(name)
            writer.append("abc")
            writer.delete(1, 1)
            await writer.wait_acked()
            reader = await bob.open(name)
            await reader.wait_text("ac")
            held = reader.doc
            await bob.go_offline()
            bob.go_online()
            await reader.wait_acked()
            assert reader.doc is held and str(reader) == "ac"
            assert reader.state.rejected >= 1, "the delete set was answered 0 all the same"
