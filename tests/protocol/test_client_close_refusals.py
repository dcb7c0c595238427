"""Refusals that come without a SyncStatus, driven frame by frame with no network: a connection
closed for an invalid update makes suspects of the documents awaiting an ack (rolled back unless
the server holds all they had), a change over the frame limit revokes its channel (asked for
again, rolled back), neither refused change is sent again, and a document refused three times
in a row is no longer synced."""

from __future__ import annotations

from pycrdt import Doc, Map, Text

from tether.protocol.sessions.client_session import (
    MAX_REFUSALS_IN_ROW,
    ClientDocument,
    ClientEvent,
    ClientSession,
    WriteRefused,
    is_refusal_close,
)
from tether.protocol.wire.messages import (
    Authenticated,
    AuthToken,
    Close,
    PermissionDenied,
    Sync,
    SyncStatus,
    decode_frame,
)
from tether.protocol.wire.sync_payloads import EMPTY_UPDATE, SyncStep1, SyncStep2, SyncUpdate

REFUSAL = (1002, "invalid update: update refused: a map holds at most 8 keys")
TOO_LARGE = "update too large: 70021 bytes, this server takes at most 65536"


def server_with(text: str) -> Doc:
    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc


def synced(session: ClientSession, name: str, server: Doc) -> ClientDocument:
    """Open ``name`` on a connected session and sync it with ``server`` (read-write)."""
    state = session.open(name, "token")
    session.handshake(name)
    session.receive(Authenticated(name, "read-write").encode())
    session.receive(Sync(name, SyncStep1(server.get_state())).encode())
    session.receive(Sync(name, SyncStep2(server.get_update())).encode())
    session.receive(SyncStatus(name, True).encode())
    assert state.synced and state.all_acked
    return state


def connected(**servers: Doc) -> tuple[ClientSession, dict[str, ClientDocument]]:
    session = ClientSession()
    session.connected = True
    return session, {name: synced(session, name, doc) for name, doc in servers.items()}


def edit(session: ClientSession, state: ClientDocument, value: str, keys: int = 0) -> bytes:
    """A local change (text, and ``keys`` new map keys) sent as one update; its bytes."""
    before = state.doc.get_state()
    with state.doc.transaction():
        state.text.insert(len(state.text), value)
        for key in range(keys):
            state.doc.get("meta", type=Map)[f"k{key}"] = key
    update = state.doc.get_update(before)
    assert session.local_update(state.channel, update) == [
        Sync(state.channel, SyncUpdate(update)).encode()
    ]
    return update


def reconnect(session: ClientSession, name: str, server: Doc) -> list[bytes]:
    """The handshake on a new connection up to the server's step1 answered; what was sent."""
    session.connected = True
    sent = session.handshake(name)
    session.receive(Authenticated(name, "read-write").encode())
    replies, _ = session.receive(Sync(name, SyncStep1(server.get_state())).encode())
    return sent + replies


def step1_of(frame: bytes) -> bytes:
    message = decode_frame(frame)
    assert isinstance(message, Sync) and isinstance(message.message, SyncStep1)
    return message.message.state_vector


def refusals(events: list[ClientEvent]) -> list[WriteRefused]:
    return [e for e in events if isinstance(e, WriteRefused)]


def test_only_a_1002_close_for_an_invalid_update_is_a_refusal() -> None:
    assert is_refusal_close(*REFUSAL)
    assert not is_refusal_close(1002, "protocol error: truncated varint")
    assert not is_refusal_close(1011, "invalid update: no")
    assert not is_refusal_close(1000, "")


def test_a_refusal_close_rolls_back_the_unacknowledged_document_and_never_resends_it() -> None:
    server, other_server = server_with("base"), server_with("other")
    session, docs = connected(bad=server, other=other_server)
    bad, other = docs["bad"], docs["other"]
    held = bad.doc
    edit(session, bad, " refused", keys=9)
    assert session.disconnected(REFUSAL) == []
    assert bad.rollback is not None and other.rollback is None
    bad.text.insert(len(bad.text), " later")  # typed while offline: in the refused copy

    sent = reconnect(session, "bad", server)
    assert step1_of(sent[1]) == b"\x00", "the whole state, into a fresh Doc"
    assert sent[-1] == Sync("bad", SyncStep2(EMPTY_UPDATE)).encode(), "nothing of ours resent"
    _, events = session.receive(Sync("bad", SyncStep2(server.get_update())).encode())
    [refused] = refusals(events)
    assert refused.reason == REFUSAL[1] and refused.local_doc is held and not refused.stopped
    assert bad.doc is not held and str(bad.text) == "base"
    assert str(held.get("content", type=Text)) == "base refused later"
    session.receive(SyncStatus("bad", True).encode())
    assert bad.all_acked

    # The document with nothing unacknowledged resyncs as ever, its Doc kept.
    kept = other.doc
    sent = reconnect(session, "other", other_server)
    assert step1_of(sent[1]) == kept.get_state()
    assert other.doc is kept and other.rollback is None


def test_a_suspect_the_server_holds_in_full_resumes_and_sends_what_it_typed_since() -> None:
    """Its update was applied before the refused one came: no refusal, nothing lost."""
    server = server_with("base")
    session, docs = connected(calm=server)
    calm = docs["calm"]
    held = calm.doc
    server.apply_update(edit(session, calm, " applied"))  # the ack never came: the close did
    session.disconnected(REFUSAL)
    assert calm.rollback is not None, "a suspect until the server's state says otherwise"
    calm.text.insert(len(calm.text), " offline")

    reconnect(session, "calm", server)
    replies, events = session.receive(Sync("calm", SyncStep2(server.get_update())).encode())
    assert not refusals(events)
    assert calm.doc is held and calm.rollback is None and calm.refusals_in_row == 0
    [pushed] = replies
    message = decode_frame(pushed)
    assert isinstance(message, Sync) and isinstance(message.message, SyncUpdate)
    server.apply_update(message.message.update)
    assert str(server.get("content", type=Text)) == "base applied offline"
    assert not calm.all_acked
    session.receive(SyncStatus("calm", True).encode())  # the handshake's empty reply
    session.receive(SyncStatus("calm", True).encode())  # what was pushed
    assert calm.all_acked and calm.refusals_in_row == 0


def test_a_close_of_another_kind_resends_as_ever() -> None:
    server = server_with("base")
    session, docs = connected(doc=server)
    doc = docs["doc"]
    edit(session, doc, " mine")
    session.disconnected((1013, "slow consumer: send queue over send_queue_frames"))
    assert doc.rollback is None and doc.dirty_offline
    sent = reconnect(session, "doc", server)
    message = decode_frame(sent[-1])
    assert isinstance(message, Sync) and isinstance(message.message, SyncStep2)
    assert message.message.update != EMPTY_UPDATE, "the unacknowledged edit goes again"


def test_a_document_refused_three_times_in_a_row_is_no_longer_synced() -> None:
    server = server_with("base")
    session, docs = connected(bad=server)
    bad = docs["bad"]
    for _ in range(MAX_REFUSALS_IN_ROW - 1):
        edit(session, bad, " x", keys=9)
        assert session.disconnected(REFUSAL) == []
        reconnect(session, "bad", server)
        _, events = session.receive(Sync("bad", SyncStep2(server.get_update())).encode())
        assert refusals(events) and str(bad.text) == "base"
        session.receive(SyncStatus("bad", True).encode())
    last = bad.doc
    edit(session, bad, " x", keys=9)
    [stopped] = session.disconnected(REFUSAL)
    assert stopped.stopped and stopped.local_doc is last
    assert "3 times in a row" in stopped.reason and stopped.reason.startswith(REFUSAL[1])
    assert "bad" not in session.documents, "never handshaken again"


def test_an_applied_write_between_refusals_starts_the_count_again() -> None:
    server = server_with("base")
    session, docs = connected(doc=server)
    doc = docs["doc"]
    for _ in range(MAX_REFUSALS_IN_ROW + 1):
        edit(session, doc, " x", keys=9)
        assert session.disconnected(REFUSAL) == []
        reconnect(session, "doc", server)
        session.receive(Sync("doc", SyncStep2(server.get_update())).encode())
        session.receive(SyncStatus("doc", True).encode())
        server.apply_update(edit(session, doc, "!"))
        session.receive(SyncStatus("doc", True).encode())
        assert doc.refusals_in_row == 0


def test_a_change_over_the_frame_limit_is_asked_for_again_and_rolled_back() -> None:
    server = server_with("base")
    session, docs = connected(big=server)
    big = docs["big"]
    held = big.doc
    edit(session, big, " pasted")
    replies, events = session.receive(PermissionDenied("big", TOO_LARGE).encode())
    assert not events and big.refused is None, "not a lost document: a refused write"
    token, step1 = (decode_frame(f) for f in replies[:2])
    assert isinstance(token, AuthToken) and token.token == "token"
    assert isinstance(step1, Sync) and step1_of(replies[1]) == b"\x00"
    session.receive(SyncStatus("big", True).encode())  # a late ack of the revoked channel
    session.receive(Authenticated("big", "read-write").encode())
    replies, _ = session.receive(Sync("big", SyncStep1(server.get_state())).encode())
    assert replies == [Sync("big", SyncStep2(EMPTY_UPDATE)).encode()], "the paste stays out"
    _, events = session.receive(Sync("big", SyncStep2(server.get_update())).encode())
    [refused] = refusals(events)
    assert refused.reason == TOO_LARGE and refused.local_doc is held
    assert str(big.text) == "base"
    session.receive(SyncStatus("big", True).encode())
    assert big.all_acked


def test_a_document_too_large_three_times_in_a_row_is_closed() -> None:
    server = server_with("base")
    session, docs = connected(big=server)
    big = docs["big"]
    for _ in range(MAX_REFUSALS_IN_ROW - 1):
        edit(session, big, " pasted")
        session.receive(PermissionDenied("big", TOO_LARGE).encode())
        session.receive(Authenticated("big", "read-write").encode())
        session.receive(Sync("big", SyncStep1(server.get_state())).encode())
        session.receive(Sync("big", SyncStep2(server.get_update())).encode())
        session.receive(SyncStatus("big", True).encode())
    edit(session, big, " pasted")
    replies, events = session.receive(PermissionDenied("big", TOO_LARGE).encode())
    assert replies == [Close("big").encode()]
    [stopped] = refusals(events)
    assert stopped.stopped and "big" not in session.documents
