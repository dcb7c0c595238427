"""What the client session does with SyncStatus 0, driven frame by frame with no network: a
read-write grant's 0 is owed again (the server's step1 asks for it), a readonly grant's 0 for a
local change is a refused write rolled back to the server's state, and a 0 for a frame that
carried nothing of ours is no refusal at all."""

from __future__ import annotations

from pycrdt import Doc, Text

from tether.protocol.sessions.client_session import (
    ClientDocument,
    ClientEvent,
    ClientSession,
    Synced,
    WriteRefused,
)
from tether.protocol.wire.messages import Authenticated, Sync, SyncStatus, decode_frame
from tether.protocol.wire.sync_payloads import EMPTY_UPDATE, SyncStep1, SyncStep2, SyncUpdate

NAME = "doc"


def opened(scope: str, server: Doc) -> tuple[ClientSession, ClientDocument]:
    """A session whose document is granted ``scope`` and synced with ``server``."""
    session = ClientSession()
    state = session.open(NAME, "token")
    session.connected = True
    session.handshake(NAME)
    session.receive(Authenticated(NAME, scope).encode())
    replies, _ = session.receive(Sync(NAME, SyncStep1(server.get_state())).encode())
    assert replies == [Sync(NAME, SyncStep2(EMPTY_UPDATE)).encode()]
    session.receive(Sync(NAME, SyncStep2(server.get_update())).encode())
    session.receive(SyncStatus(NAME, True).encode())  # for that empty reply
    assert state.synced and state.all_acked
    return session, state


def server_with(text: str) -> Doc:
    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc


def local_edit(session: ClientSession, state: ClientDocument, value: str) -> list[bytes]:
    before = state.doc.get_state()
    state.text.insert(len(state.text), value)
    return session.local_update(NAME, state.doc.get_update(before))


def step1_of(frame: bytes) -> bytes:
    message = decode_frame(frame)
    assert isinstance(message, Sync) and isinstance(message.message, SyncStep1)
    return message.message.state_vector


def refusals(events: list[ClientEvent]) -> list[WriteRefused]:
    return [e for e in events if isinstance(e, WriteRefused)]


def test_a_read_write_zero_is_owed_until_the_servers_step1_is_answered_and_acked() -> None:
    server = server_with("base")
    session, state = opened("read-write", server)
    assert local_edit(session, state, " mine")
    replies, events = session.receive(SyncStatus(NAME, False).encode())
    assert replies == [] and not refusals(events)
    assert not state.all_acked, "a write turned away is not saved"
    replies, _ = session.receive(Sync(NAME, SyncStep1(server.get_state())).encode())
    assert len(replies) == 1 and not state.all_acked
    session.receive(SyncStatus(NAME, True).encode())
    assert state.all_acked and str(state.text) == "base mine"


def test_a_readonly_zero_for_a_local_change_rolls_back_to_the_servers_state() -> None:
    server = server_with("base")
    session, state = opened("readonly", server)
    local = state.doc
    assert local_edit(session, state, " mine")
    replies, events = session.receive(SyncStatus(NAME, False).encode())
    assert [step1_of(f) for f in replies] == [b"\x00"], "the whole state, into a fresh Doc"
    assert not state.all_acked
    assert local_edit(session, state, " more") == [], "the refused copy sends nothing"

    # Another editor's update before the answer reaches both Docs.
    before = server.get_state()
    server.get("content", type=Text).insert(0, ">")
    session.receive(Sync(NAME, SyncUpdate(server.get_update(before))).encode())
    assert str(state.text) == ">base mine more"

    replies, events = session.receive(Sync(NAME, SyncStep2(server.get_update())).encode())
    [refused] = refusals(events)
    assert refused.local_doc is local and "readonly" in refused.reason
    assert state.doc is not local and state.doc.client_id != local.client_id
    assert str(state.text) == ">base" == str(server.get("content", type=Text))
    assert str(local.get("content", type=Text)) == ">base mine more"
    assert state.all_acked


def test_a_rollback_asks_only_once_the_handshakes_answer_is_in() -> None:
    """A server rebuilding the document answers only a peer's latest step1, and an answer does
    not say which step1 it answers: the rollback's waits until no other is outstanding."""
    server = server_with("base")
    session = ClientSession()
    state = session.open(NAME, "token")
    state.text.insert(0, "draft")  # before the grant: carried by the step2 reply
    session.connected = True
    session.handshake(NAME)
    session.receive(Authenticated(NAME, "readonly").encode())
    session.receive(Sync(NAME, SyncStep1(server.get_state())).encode())
    replies, _ = session.receive(SyncStatus(NAME, False).encode())
    assert replies == [], "the handshake's step1 is still unanswered"
    replies, events = session.receive(
        Sync(NAME, SyncStep2(server.get_update(state.doc.get_state()))).encode()
    )
    assert any(isinstance(e, Synced) for e in events) and not refusals(events)
    # The fresh Doc took that answer too: it asks only for what it still lacks.
    [asked] = [step1_of(f) for f in replies]
    assert state.rollback is not None and asked == state.rollback.get_state()
    _, events = session.receive(Sync(NAME, SyncStep2(server.get_update(asked))).encode())
    assert refusals(events) and str(state.text) == "base"


def test_a_rollback_cut_off_by_a_disconnect_resumes_on_the_next_handshake() -> None:
    server = server_with("base")
    session, state = opened("readonly", server)
    local_edit(session, state, " mine")
    session.receive(SyncStatus(NAME, False).encode())
    session.disconnected()
    session.connected = True
    frames = session.handshake(NAME)
    assert step1_of(frames[1]) == b"\x00", "asked from the fresh Doc, not the refused one"
    session.receive(Authenticated(NAME, "readonly").encode())
    replies, _ = session.receive(Sync(NAME, SyncStep1(server.get_state())).encode())
    assert replies == [Sync(NAME, SyncStep2(EMPTY_UPDATE)).encode()], "nothing refused resent"
    _, events = session.receive(Sync(NAME, SyncStep2(server.get_update())).encode())
    assert refusals(events) and str(state.text) == "base"
    session.receive(SyncStatus(NAME, True).encode())
    assert state.all_acked


def test_a_readonly_zero_for_a_reply_with_nothing_of_ours_is_no_refusal() -> None:
    server = server_with("abc")
    del server.get("content", type=Text)[1:2]
    session, state = opened("readonly", server)
    session.disconnected()
    session.connected = True
    session.handshake(NAME)
    session.receive(Authenticated(NAME, "readonly").encode())
    replies, _ = session.receive(Sync(NAME, SyncStep1(server.get_state())).encode())
    [reply] = replies
    assert reply != Sync(NAME, SyncStep2(EMPTY_UPDATE)).encode(), "it carries the delete set"
    session.receive(Sync(NAME, SyncStep2(EMPTY_UPDATE)).encode())
    replies, events = session.receive(SyncStatus(NAME, False).encode())
    assert replies == [] and not refusals(events)
    assert state.all_acked and state.rollback is None
