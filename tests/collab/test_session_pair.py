"""Client and server session state machines wired to a real Room, with no network at all."""

from __future__ import annotations

import pytest
from pycrdt import Text

from tests.collab.test_room import ListOutbox, room_settings
from tether.collab.auth.tokens import Authenticator, AuthError, make_token
from tether.collab.hooks import Hooks
from tether.collab.rooms.room import Room
from tether.collab.rooms.room_peer import Peer
from tether.collab.runtime.sync_metrics import Metrics
from tether.collab.storage.store import MemoryStore
from tether.protocol.sessions.client_session import AuthRefused, ClientSession
from tether.protocol.sessions.server_session import (
    AuthRequested,
    ChannelClosed,
    ChannelOpened,
    Incoming,
    Reply,
    ServerSession,
)
from tether.protocol.wire.messages import Awareness, QueryAwareness, Sync

pytestmark = pytest.mark.anyio

SECRET = "pair-secret-0123456789abcdef-0123456789"


class Wire:
    """One client session and one server session joined by lists instead of sockets."""

    def __init__(self, rooms: dict[str, Room], auth: Authenticator) -> None:
        self.client = ClientSession()
        self.server = ServerSession()
        self.rooms = rooms
        self.auth = auth
        self.to_server: list[bytes] = []
        self.to_client: list[bytes] = []
        self.peers: dict[str, Peer] = {}
        self.events: list[object] = []
        self.outbox = ListOutbox(self.to_client, self._unused)

    async def _unused(self, frame: bytes) -> None:
        raise AssertionError("frames are collected, never sent")

    def open(self, name: str, token: str) -> None:
        self.client.open(name, token)
        self.client.connected = True
        self.to_server += self.client.handshake(name)

    def pump(self) -> None:
        """Deliver frames both ways until both sides are quiet."""
        while self.to_server or self.to_client:
            while self.to_server:
                for event in self.server.receive(self.to_server.pop(0), now=0.0):
                    self._server_event(event)
            while self.to_client:
                replies, events = self.client.receive(self.to_client.pop(0))
                self.to_server += replies
                self.events += events

    def _server_event(self, event: object) -> None:
        if isinstance(event, Reply):
            self.to_client.append(event.frame)
        elif isinstance(event, AuthRequested):
            try:
                grant = self.auth.authorize(event.token, event.document)
            except AuthError as exc:
                followups = self.server.deny(event.channel, str(exc))
            else:
                followups = self.server.grant(event.channel, grant.scope)
            for followup in followups:
                self._server_event(followup)
        elif isinstance(event, ChannelOpened):
            peer = Peer(self.outbox, self.auth.verify(""), event.scope, event.channel)
            self.peers[event.channel] = peer
            self.rooms[event.document].attach(peer)
        elif isinstance(event, Incoming):
            room, peer = self.rooms[event.document], self.peers[event.channel]
            if isinstance(event.message, Sync):
                room.handle_sync(peer, event.message.message)
            elif isinstance(event.message, Awareness):
                room.handle_awareness(peer, event.message.update)
            elif isinstance(event.message, QueryAwareness):
                peer.send(peer.awareness_header + room.awareness_snapshot())
        elif isinstance(event, ChannelClosed):
            self.rooms[event.document].detach(self.peers.pop(event.channel))


def text_of(session: ClientSession, name: str) -> str:
    return str(session.documents[name].doc.get("content", type=Text))


async def room_for(store: MemoryStore, name: str) -> Room:
    from pycrdt import Doc

    return Room(name, Doc(), store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(1000))


async def test_two_client_sessions_converge_through_a_room_and_every_edit_is_acked() -> None:
    async with MemoryStore() as store:
        rooms = {"notes": await room_for(store, "notes")}
        open_auth = Authenticator("none")
        alice, bob = Wire(rooms, open_auth), Wire(rooms, open_auth)
        alice.open("notes", "")
        bob.open("notes", "")
        alice.pump()
        bob.pump()
        assert alice.client.documents["notes"].synced and bob.client.documents["notes"].synced

        doc = alice.client.documents["notes"]
        before = doc.doc.get_state()
        doc.text.insert(0, "héllo 😀")
        alice.to_server += alice.client.local_update("notes", doc.doc.get_update(before))
        alice.pump()
        bob.pump()
        await rooms["notes"].flush()
        alice.pump()
        assert text_of(bob.client, "notes") == "héllo 😀"
        assert doc.all_acked and doc.acked == doc.sent


async def test_a_document_outside_the_token_is_refused_and_nothing_of_it_arrives() -> None:
    async with MemoryStore() as store:
        rooms = {"secret": await room_for(store, "secret")}
        auth = Authenticator("jwt", SECRET)
        wire = Wire(rooms, auth)
        wire.open("secret", make_token(SECRET, ["public/*"]))
        wire.pump()
        assert any(isinstance(e, AuthRefused) for e in wire.events)
        assert not wire.client.documents["secret"].synced
        assert not rooms["secret"].peers
