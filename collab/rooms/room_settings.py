"""What every room and the room manager read and never change; knows no room, no store, no socket.

Built once from the server's ``Settings`` (``RoomSettings.from_settings``), handed to the
``RoomManager`` and by it to each ``Room``: one shared object instead of a list of arguments
passed through by hand. Live shared objects (the presence ``ClaimRegistry``, hooks, metrics) are
not settings and travel on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..content.reading import RICH_NAME
from ..storage.compaction import CompactionPolicy
from ..updates.guard import (
    DEFAULT_MAX_CLIENTS,
    DEFAULT_MAX_MAP_KEYS,
    DEFAULT_MAX_NESTING_DEPTH,
    DEFAULT_MAX_ROOT_TYPES,
    UpdateGuard,
)
from .import_budget import ImportLimits
from .room_presence import PresenceLimits

if TYPE_CHECKING:
    from ..config import Settings


@dataclass(frozen=True, slots=True)
class RoomSettings:
    # Seconds a room nobody is attached to stays loaded before it is flushed and forgotten.
    unload_grace: float = 5.0
    # When a document's update log is folded into a snapshot (collab.storage.compaction).
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    # The update guard's bound on nested types (yrs deletes them recursively).
    max_nesting_depth: int = DEFAULT_MAX_NESTING_DEPTH
    # ... and on the hash tables yrs rehashes whole as they grow.
    max_map_keys: int = DEFAULT_MAX_MAP_KEYS
    max_root_types: int = DEFAULT_MAX_ROOT_TYPES
    max_clients: int = DEFAULT_MAX_CLIENTS
    # A broadcast update bigger than this goes out as several (protocol.updates.update_split).
    max_message_bytes: int = 1024 * 1024
    presence: PresenceLimits = field(default_factory=PresenceLimits)
    # The Y.XmlFragment a rich document keeps its tree in (collab.content).
    rich_fragment: str = RICH_NAME
    # A Markdown import's node cap and the memory budget of imports (collab.rooms.import_budget).
    imports: ImportLimits = field(default_factory=ImportLimits)

    def new_guard(self) -> UpdateGuard:
        """An empty document's update guard, with these limits."""
        return UpdateGuard(
            self.max_nesting_depth,
            max_map_keys=self.max_map_keys,
            max_root_types=self.max_root_types,
            max_clients=self.max_clients,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> RoomSettings:
        return cls(
            unload_grace=settings.unload_grace,
            compaction=CompactionPolicy(settings.compact_threshold, settings.compact_log_ratio),
            max_nesting_depth=settings.max_nesting_depth,
            max_map_keys=settings.max_map_keys,
            max_root_types=settings.max_root_types,
            max_clients=settings.max_clients_per_document,
            max_message_bytes=settings.max_outgoing_message_bytes,
            rich_fragment=settings.rich_fragment,
            imports=ImportLimits(
                settings.max_import_nodes,
                settings.import_memory_budget,
                settings.import_budget_wait,
            ),
            presence=PresenceLimits(
                ids_per_peer=settings.awareness_ids_per_peer,
                entry_bytes=settings.awareness_entry_bytes,
                peer_bytes=settings.awareness_peer_bytes,
                document_bytes=settings.awareness_document_bytes,
            ),
        )
