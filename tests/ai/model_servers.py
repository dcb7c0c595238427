"""What the tests of several model servers share: documents homed on each server by the pool's
own ring, and a suggestion asked and read to its end."""

from __future__ import annotations

import uuid

from tether.ai.model.providers.ring import BoundedRing
from tether.protocol.clients.tether_client import DocumentHandle
from tether.protocol.wire.ai_messages import SuggestionEnd

TEXTS = [
    "The harbour master checked the tide tables and",
    "In the garden the old gardener planted",
    "Every morning the ferry crossed the bay with",
    "The lighthouse keeper climbed the stairs and",
]


def homed_documents(members: list[str], per_member: int, prefix: str) -> list[str]:
    """New document names, ``per_member`` homed on each of the pool's ``members`` (its
    ``index:where`` names), in member order."""
    ring = BoundedRing(members)
    homed: dict[str, list[str]] = {member: [] for member in members}
    while min(len(found) for found in homed.values()) < per_member:
        name = f"{prefix}{uuid.uuid4().hex[:8]}"
        home = homed[ring.order(name)[0]]
        if len(home) < per_member:
            home.append(name)
    return [name for member in members for name in homed[member]]


async def suggest_to_the_end(doc: DocumentHandle) -> SuggestionEnd:
    end = None
    async for message in doc.suggest(max_tokens=3, timeout=60):
        if isinstance(message, SuggestionEnd):
            end = message
    assert end is not None
    return end
