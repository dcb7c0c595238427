"""An update applied to a document: one pycrdt transaction carrying its origin, an update of many
clients applied in dependency order, and any failure, a Rust panic too, raised as
``InvalidUpdate``. Knows nothing of rooms, peers or storage.
"""

from __future__ import annotations

from pycrdt import Doc

from tether.protocol.updates.update_order import in_dependency_order

from .yrs_panics import is_rust_panic


class InvalidUpdate(Exception):
    """The peer sent an update pycrdt cannot apply; the document is unchanged."""


def apply_update(
    doc: Doc, update: bytes, origin: object, layers: list[bytes] | None = None
) -> None:
    """Apply with an origin; any decoding failure, including a Rust panic, is InvalidUpdate.
    An update of many clients goes in as ``layers`` in dependency order, in one transaction
    (protocol.updates.update_order: yrs' pending set is quadratic in them); given, or cut here."""
    if layers is None:
        try:
            layers = in_dependency_order(update)
        except Exception:
            layers = None  # not readable as layers: yrs judges it whole, as it always did
    try:
        with doc.transaction(origin=origin):
            if layers is None:
                doc.apply_update(update)
            else:
                for layer in layers:
                    doc.apply_update(layer)
    except Exception as exc:
        raise InvalidUpdate(str(exc)) from exc
    except BaseException as exc:
        if not is_rust_panic(exc):
            raise
        raise InvalidUpdate("update caused a decoder panic") from exc
