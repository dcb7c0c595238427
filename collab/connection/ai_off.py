"""What an editor hears when this server runs without AI (``--ai-provider none``): every AI
request is answered at once, ``suggestion.error`` with code ``unavailable`` and the reason, and
a status watch with state ``off``. Before, nothing answered, and a client waited out its own
timeout (the Python client's 60 s, then a bare ``TimeoutError``). Stateless messages that are
not AI requests are left to the host's own extensions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.protocol.wire.ai_messages import (
    AiStatus,
    Cancel,
    InvalidAiMessage,
    SuggestionError,
    WatchStatus,
    decode_client_message,
)

if TYPE_CHECKING:
    from ..rooms.room import Room
    from ..rooms.room_peer import Peer

REASON = "AI is off on this server"


class AiOff:
    async def on_stateless(self, room: Room, peer: Peer, payload: str) -> None:
        try:
            message = decode_client_message(payload)
        except InvalidAiMessage:
            return  # not an AI request: a host's own stateless message, or garbage
        if isinstance(message, WatchStatus):
            peer.send_stateless(AiStatus(message.id, "off", REASON).encode())
        elif not isinstance(message, Cancel):  # a cancel of nothing needs no answer
            peer.send_stateless(SuggestionError(message.id, "unavailable", REASON).encode())
