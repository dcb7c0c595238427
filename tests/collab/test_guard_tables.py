"""collab.updates.guard: keys per map and root types per document are bounded (yrs rehashes each
table whole as it doubles, a loop pause no slicing splits); a key set again, a duplicate and a
document read back from storage do not count against them."""

from __future__ import annotations

import pytest
from pycrdt import Doc, Map

from tether.bench.shape_updates import many_clients, many_roots, map_entries
from tether.collab.updates.guard import UpdateGuard, UpdateRefused
from tether.protocol.updates.update_merge import scan_merged


def admit(guard: UpdateGuard, update: bytes, *, stored: bool = False) -> None:
    scan = scan_merged(update)[1]
    guard.admit(scan, guard.check(scan, stored=stored))


def test_a_map_holds_at_most_its_keys_and_a_key_set_again_is_not_a_new_one() -> None:
    guard = UpdateGuard(128, max_map_keys=100)
    doc = Doc()
    entries = doc.get("m", type=Map)
    before = doc.get_state()
    with doc.transaction():
        for i in range(100):
            entries[f"k{i}"] = i
    admit(guard, doc.get_update(before))
    before = doc.get_state()
    with doc.transaction():
        for i in range(100):
            entries[f"k{i}"] = -i  # every key again: the map still has 100
    admit(guard, doc.get_update(before))
    admit(guard, doc.get_update())  # a duplicate of everything: nothing new
    before = doc.get_state()
    entries["one-more"] = 1
    with pytest.raises(UpdateRefused, match="at most 100 keys") as refused:
        admit(guard, doc.get_update(before))
    assert refused.value.limit == "map-keys"
    two = Doc()
    with two.transaction():
        two.get("a", type=Map)["key"] = 1
        two.get("b", type=Map)["key"] = 1  # each map counts on its own
    admit(UpdateGuard(128, max_map_keys=1), two.get_update())


def test_root_types_are_bounded_and_a_stored_document_still_loads() -> None:
    attack = many_roots(300).attack
    with pytest.raises(UpdateRefused, match="at most 200 root types") as refused:
        admit(UpdateGuard(128, max_root_types=200), attack)
    assert refused.value.limit == "root-types"
    admit(UpdateGuard(128, max_root_types=300), attack)
    stored = UpdateGuard(128, max_root_types=200, max_map_keys=10)
    admit(stored, attack, stored=True)  # written before the limit: loads as it is
    admit(stored, map_entries(50).attack, stored=True)
    fresh = Doc()
    fresh.get("a-new-root", type=Map)["key"] = 1
    with pytest.raises(UpdateRefused, match="root types"):  # but nothing more is added live
        admit(stored, fresh.get_update())


def test_clients_per_document_are_bounded() -> None:
    attack = many_clients(300).attack
    with pytest.raises(UpdateRefused, match="at most 200 clients") as refused:
        admit(UpdateGuard(128, max_clients=200), attack)
    assert refused.value.limit == "clients"
    guard = UpdateGuard(128, max_clients=300)
    admit(guard, attack)
    admit(guard, attack)  # the same clients again: nothing new
