"""The shared timer wheel lets an ended connection go at once (collab.transport.timer_wheel)."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from tether.collab.transport.timer_wheel import ConnectionTimer

pytestmark = pytest.mark.anyio


class Connection:
    def __init__(self) -> None:
        self.fired = asyncio.Event()
        self.timer = ConnectionTimer(self.on_timer)

    def on_timer(self) -> None:
        self.fired.set()


async def test_a_cancelled_timer_no_longer_holds_its_connection_while_its_bucket_waits() -> None:
    connection = Connection()
    connection.timer.arm_in(60.0)  # the idle timeout, say
    connection.timer.arm_in(30.0)  # an earlier deadline: a second entry in the wheel
    gone = weakref.ref(connection)
    connection.timer.cancel()  # the connection ended
    del connection
    gc.collect()
    assert gone() is None, "the wheel's entries kept the ended connection alive"


async def test_a_timer_that_is_not_cancelled_fires() -> None:
    connection = Connection()
    connection.timer.arm_in(0.0)
    async with asyncio.timeout(5):
        await connection.fired.wait()
