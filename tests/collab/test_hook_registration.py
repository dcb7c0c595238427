"""Extensions are checked when registered: a method named like a hook that is none (a
misspelled hook, which would never be called) is an error naming it and the hooks; hooks run by
priority, then in registration order; a subclass of ``Extension`` has only the hooks it writes."""

from __future__ import annotations

import pytest

from tether import Extension, Settings, TetherServer, UnknownHook
from tether.collab.hooks import HOOKS, Hooks


class Misspelled:
    def on_chnage(self, room: object, update: bytes, origin: object) -> None:
        pass


class HocuspocusStyle:
    async def onLoadDocument(self, room: object) -> None:
        pass


class Deleted:
    def __init__(self, seen: list[str], label: str, priority: int | None = None) -> None:
        self.seen, self.label = seen, label
        if priority is not None:
            self.priority = priority

    def on_deleted(self, name: str) -> None:
        self.seen.append(self.label)


def test_a_misspelled_hook_is_refused_at_registration_naming_it_and_the_hooks() -> None:
    with pytest.raises(UnknownHook) as refused:
        Hooks([Misspelled()])
    assert "Misspelled.on_chnage is not a tether hook (on_change?)" in str(refused.value)
    assert all(hook in str(refused.value) for hook in HOOKS)
    with pytest.raises(UnknownHook, match="on_load"):
        Hooks().add(HocuspocusStyle())


def test_a_server_given_a_misspelled_hook_does_not_start() -> None:
    with pytest.raises(UnknownHook, match="on_chnage"):
        TetherServer(Settings(auth="none", ai_provider="none"), extensions=[Misspelled()])


def test_a_hook_that_cannot_be_called_and_a_priority_that_is_no_int_are_refused() -> None:
    class NotCallable:
        on_change = 3

    class BadPriority:
        priority = "high"

    with pytest.raises(UnknownHook, match="cannot be called"):
        Hooks([NotCallable()])
    with pytest.raises(UnknownHook, match="priority"):
        Hooks([BadPriority()])


def test_methods_that_look_like_no_hook_are_left_alone() -> None:
    class Helper:
        name = "helper"

        def once(self) -> None: ...

        def health(self) -> dict[str, str]:
            return {}

    Hooks([Helper()])  # no error


def test_hooks_run_by_priority_then_in_registration_order() -> None:
    seen: list[str] = []
    hooks = Hooks([Deleted(seen, "first"), Deleted(seen, "low", priority=1)])
    hooks.add(Deleted(seen, "high", priority=200))
    hooks.add(Deleted(seen, "second"))
    hooks.on_deleted("doc")
    assert seen == ["high", "first", "second", "low"]


def test_an_extension_subclass_has_only_the_hooks_it_writes() -> None:
    seen: list[str] = []

    class Typed(Extension):
        def on_deleted(self, name: str) -> None:
            seen.append(name)

    hooks = Hooks([Typed()])
    assert hooks.has("on_deleted")
    assert not hooks.has("on_authenticate")  # Extension's own stub is no hook of Typed
    assert not hooks.has("remote_presence")
    hooks.on_deleted("doc")
    assert seen == ["doc"]
