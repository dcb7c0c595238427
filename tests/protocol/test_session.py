from __future__ import annotations

import pytest

from tether.protocol.protocol_errors import (
    ChannelNameTooLong,
    DecodeError,
    FrameTooLarge,
    QueueBudgetExhausted,
    QueueOverflow,
    SessionViolation,
)
from tether.protocol.sessions.server_session import (
    AuthRequested,
    ChannelClosed,
    ChannelOpened,
    ChannelRefused,
    ChannelState,
    Incoming,
    QueueBudget,
    Reply,
    ServerSession,
    SessionLimits,
)
from tether.protocol.wire import messages as m
from tether.protocol.wire.sync_payloads import EMPTY_UPDATE, SyncStep1, SyncUpdate

RW = m.SCOPE_READ_WRITE
RO = m.SCOPE_READONLY

STEP1 = m.Sync("doc", SyncStep1(b"\x00"))
AWARENESS = m.Awareness("doc", b"\x01\x07\x01\x02{}")
UPDATE = m.Sync("doc", SyncUpdate(EMPTY_UPDATE))
TOKEN = m.AuthToken("doc", "secret", "4.8.0")


def feed(session: ServerSession, message: m.Message, now: float = 0.0) -> list:
    return session.receive(message.encode(), now)


def incoming(message: m.ChannelMessage, scope: str = RW) -> Incoming:
    return Incoming(message.channel, m.document_of(message.channel), scope, message)


def authenticated(channel: str = "doc", scope: str = RW) -> Reply:
    return Reply(m.Authenticated(channel, scope).encode())


def denied(channel: str = "doc", reason: str = "no") -> Reply:
    return Reply(m.PermissionDenied(channel, reason).encode())


def open_session(channel: str = "doc", scope: str = RW, now: float = 0.0) -> ServerSession:
    session = ServerSession()
    feed(session, m.AuthToken(channel, "secret"), now)
    session.grant(channel, scope)
    return session


# ---- before and after the token ----------------------------------------------------------------


def test_a_token_asks_for_verification_of_that_channels_document():
    session = ServerSession()
    assert feed(session, TOKEN) == [AuthRequested("doc", "doc", "secret")]
    assert session.state_of("doc") is ChannelState.VERIFYING


def test_a_token_request_frame_from_a_client_asks_for_an_empty_token():
    session = ServerSession()
    assert feed(session, m.AuthToken("doc", None)) == [AuthRequested("doc", "doc", "")]


def test_messages_sent_before_the_token_wait_and_are_released_in_order_after_grant():
    session = ServerSession()
    assert feed(session, STEP1) == []
    assert feed(session, AWARENESS) == []
    assert session.state_of("doc") is ChannelState.AWAITING_TOKEN
    assert feed(session, TOKEN) == [AuthRequested("doc", "doc", "secret")]
    assert session.grant("doc", RW) == [
        authenticated(),
        ChannelOpened("doc", "doc", RW),
        incoming(STEP1),
        incoming(AWARENESS),
    ]


def test_messages_sent_while_the_token_is_verified_are_released_after_authenticated():
    # What a provider does: Token, step1 and awareness without waiting for a reply.
    session = ServerSession()
    feed(session, TOKEN)
    assert feed(session, STEP1) == []
    assert feed(session, AWARENESS) == []
    events = session.grant("doc", RW)
    assert events == [
        authenticated(),
        ChannelOpened("doc", "doc", RW),
        incoming(STEP1),
        incoming(AWARENESS),
    ]


def test_messages_of_an_open_channel_flow_at_once_with_its_scope():
    session = open_session(scope=RO)
    assert feed(session, UPDATE) == [incoming(UPDATE, RO)]
    assert feed(session, m.Stateless("doc", "{}")) == [incoming(m.Stateless("doc", "{}"), RO)]
    assert feed(session, m.QueryAwareness("doc")) == [incoming(m.QueryAwareness("doc"), RO)]
    assert session.open_channels() == {"doc": RO}


def test_each_channel_waits_for_its_own_token():
    session = ServerSession()
    feed(session, m.AuthToken("a", "t"))
    feed(session, m.Sync("b", SyncStep1(b"\x00")))
    session.grant("a", RW)
    assert feed(session, m.Sync("a", SyncStep1(b"\x00")))  # a flows
    assert feed(session, m.Sync("b", SyncStep1(b"\x00"))) == []  # b still waits
    assert session.open_channels() == {"a": RW}


def test_session_awareness_channels_of_one_document_are_separate_channels():
    session = ServerSession()
    assert feed(session, m.AuthToken("doc\0s1", "t")) == [AuthRequested("doc\0s1", "doc", "t")]
    assert feed(session, m.Sync("doc\0s2", SyncStep1(b"\x00"))) == []
    assert session.grant("doc\0s1", RW)[1] == ChannelOpened("doc\0s1", "doc", RW)
    assert session.state_of("doc\0s2") is ChannelState.AWAITING_TOKEN
    assert session.channel_count == 2


def test_a_verdict_for_a_channel_that_is_not_being_verified_does_nothing():
    session = ServerSession()
    assert session.grant("doc", RW) == []
    assert session.deny("doc", "no") == []
    feed(session, STEP1)  # awaiting its token
    assert session.grant("doc", RW) == []
    assert session.state_of("doc") is ChannelState.AWAITING_TOKEN


# ---- refusal -----------------------------------------------------------------------------------


def test_deny_answers_permission_denied_and_drops_the_waiting_messages():
    session = ServerSession()
    feed(session, STEP1)
    feed(session, TOKEN)
    feed(session, AWARENESS)
    assert session.deny("doc", "no") == [denied()]
    assert session.state_of("doc") is ChannelState.DENIED


def test_later_messages_of_a_denied_channel_produce_nothing():
    session = ServerSession()
    feed(session, TOKEN)
    session.deny("doc", "no")
    for message in (STEP1, AWARENESS, UPDATE, m.Stateless("doc", "{}")):
        assert feed(session, message) == []


def test_a_new_token_after_deny_is_verified_afresh_and_can_open_the_channel():
    session = ServerSession()
    feed(session, STEP1)
    feed(session, TOKEN)
    session.deny("doc", "no")
    assert feed(session, m.AuthToken("doc", "better")) == [AuthRequested("doc", "doc", "better")]
    feed(session, AWARENESS)
    assert session.grant("doc", RW) == [
        authenticated(),
        ChannelOpened("doc", "doc", RW),
        incoming(AWARENESS),  # the step1 sent before the deny is gone
    ]


def test_a_denied_channel_does_not_affect_the_others_on_the_connection():
    session = open_session("a")
    feed(session, m.AuthToken("b", "t"))
    session.deny("b", "no")
    message = m.Sync("a", SyncStep1(b"\x00"))
    assert feed(session, message) == [incoming(message)]


def test_revoke_closes_an_open_channel_with_permission_denied():
    session = open_session()
    assert session.revoke("doc", "token expired") == [
        denied(reason="token expired"),
        ChannelClosed("doc", "doc"),
    ]
    assert session.state_of("doc") is ChannelState.DENIED
    assert feed(session, UPDATE) == []


def test_revoke_of_a_channel_that_is_not_open_does_nothing():
    session = ServerSession()
    assert session.revoke("doc", "x") == []
    feed(session, TOKEN)
    assert session.revoke("doc", "x") == []
    assert session.state_of("doc") is ChannelState.VERIFYING


# ---- re-authentication -------------------------------------------------------------------------


def test_a_new_token_on_an_open_channel_is_re_verified_without_reopening_it():
    session = open_session(scope=RW)
    assert feed(session, m.AuthToken("doc", "again")) == [AuthRequested("doc", "doc", "again")]
    assert feed(session, UPDATE) == []  # waits for the verdict
    assert session.grant("doc", RO) == [authenticated(scope=RO), incoming(UPDATE, RO)]
    assert session.open_channels() == {"doc": RO}


def test_a_failed_re_verification_closes_the_open_channel():
    session = open_session()
    feed(session, m.AuthToken("doc", "stale"))
    feed(session, UPDATE)
    assert session.deny("doc", "no") == [denied(), ChannelClosed("doc", "doc")]
    assert feed(session, UPDATE) == []


# ---- close -------------------------------------------------------------------------------------


def test_close_of_an_open_channel_detaches_it():
    session = open_session()
    assert feed(session, m.Close("doc")) == [ChannelClosed("doc", "doc")]
    assert session.state_of("doc") is None
    assert session.channel_count == 0


def test_close_of_a_channel_that_never_opened_is_silent_and_forgets_its_queue():
    session = ServerSession(SessionLimits(max_queued_messages=1))
    feed(session, STEP1)
    assert feed(session, m.Close("doc")) == []
    assert session.state_of("doc") is None
    feed(session, STEP1)  # the queue starts empty again
    feed(session, TOKEN)
    assert session.grant("doc", RW)[2:] == [incoming(STEP1)]


def test_close_of_an_unknown_channel_is_ignored():
    assert feed(ServerSession(), m.Close("nothing")) == []


def test_after_close_the_channel_needs_a_token_again():
    session = open_session()
    feed(session, m.Close("doc"))
    assert feed(session, UPDATE) == []
    assert session.state_of("doc") is ChannelState.AWAITING_TOKEN


# ---- limits and violations ---------------------------------------------------------------------


def test_too_many_messages_before_the_token_overflow_the_queue():
    session = ServerSession(SessionLimits(max_queued_messages=3))
    for _ in range(3):
        feed(session, AWARENESS)
    with pytest.raises(QueueOverflow):
        feed(session, AWARENESS)


def test_the_waiting_messages_of_all_channels_share_one_byte_budget():
    size = len(STEP1.encode())
    session = ServerSession(SessionLimits(max_queued_bytes=2 * size))
    feed(session, STEP1)
    feed(session, m.Sync("doc", SyncStep1(b"\x00")))
    with pytest.raises(QueueOverflow):
        feed(session, m.Sync("other", SyncStep1(b"\x00")))


def test_released_messages_give_their_bytes_back_to_the_budget():
    size = len(STEP1.encode())  # every channel name here has 3 characters, so every frame this size
    session = ServerSession(SessionLimits(max_queued_bytes=size))
    feed(session, STEP1)
    feed(session, TOKEN)
    session.grant("doc", RW)
    assert feed(session, m.Sync("abc", SyncStep1(b"\x00"))) == []  # fits again
    feed(session, m.AuthToken("abc", "t"))
    session.deny("abc", "no")
    assert feed(session, m.Sync("xyz", SyncStep1(b"\x00"))) == []  # and again


def test_queue_overflow_is_a_session_violation():
    assert issubclass(QueueOverflow, SessionViolation)


def test_a_document_past_the_limit_is_refused_alone_and_not_remembered():
    session = ServerSession(SessionLimits(max_documents=2))
    feed(session, m.AuthToken("a", "t"))
    feed(session, m.Sync("b", SyncStep1(b"\x00")))
    events = feed(session, m.AuthToken("c", "t"))
    reason = "too many documents on one connection (max 2): close one to open another"
    assert events == [
        Reply(m.PermissionDenied("c", reason).encode()),
        ChannelRefused("c", "max_documents"),
    ]
    assert feed(session, m.Sync("c", SyncStep1(b"\x00"))) == []  # nothing of it flows
    assert session.channel_count == 2 and session.state_of("c") is None
    assert session.grant("a", RW)[0] == Reply(m.Authenticated("a", RW).encode())  # others go on
    feed(session, m.Close("a"))
    assert feed(session, m.AuthToken("c", "t")) == [AuthRequested("c", "c", "t")]


@pytest.mark.parametrize(
    "message",
    [
        m.PermissionDenied("doc", "no"),
        m.Authenticated("doc", RW),
        m.SyncStatus("doc", True),
    ],
)
def test_a_client_sending_a_server_only_message_is_a_session_violation(message):
    session = open_session()
    with pytest.raises(SessionViolation):
        feed(session, message)


def test_an_unparseable_frame_raises_decode_error():
    with pytest.raises(DecodeError):
        ServerSession().receive(b"\x05do", 0.0)


def test_a_frame_over_the_session_limit_raises_frame_too_large():
    session = ServerSession(SessionLimits(max_frame_bytes=16))
    with pytest.raises(FrameTooLarge):
        feed(session, m.Stateless("doc", "x" * 20))


# ---- ping ----------------------------------------------------------------------------------------


def test_a_ping_is_answered_with_a_pong():
    assert feed(ServerSession(), m.Ping()) == [Reply(m.PONG_FRAME)]


def test_a_pong_needs_no_answer():
    assert feed(ServerSession(), m.Pong()) == []


def test_ping_and_pong_open_no_channel():
    session = ServerSession()
    feed(session, m.Ping())
    feed(session, m.Pong())
    assert session.channel_count == 0


# ---- auth timeout --------------------------------------------------------------------------------


def test_a_channel_waiting_for_its_token_is_overdue_after_the_timeout():
    session = ServerSession()
    feed(session, STEP1, now=100.0)
    assert session.overdue_channels(now=109.0, auth_timeout=10.0) == []
    assert session.overdue_channels(now=110.5, auth_timeout=10.0) == ["doc"]


def test_the_timeout_counts_from_the_first_message_not_from_the_token():
    session = ServerSession()
    feed(session, STEP1, now=100.0)
    feed(session, TOKEN, now=108.0)
    assert session.overdue_channels(now=110.5, auth_timeout=10.0) == ["doc"]


def test_open_and_denied_channels_are_never_overdue():
    session = open_session("a", now=0.0)
    feed(session, m.AuthToken("b", "t"), now=0.0)
    session.deny("b", "no")
    assert session.overdue_channels(now=1000.0, auth_timeout=10.0) == []


def test_a_re_verification_gets_a_fresh_timeout():
    session = open_session(now=0.0)
    feed(session, m.AuthToken("doc", "again"), now=500.0)
    assert session.overdue_channels(now=501.0, auth_timeout=10.0) == []
    assert session.overdue_channels(now=510.5, auth_timeout=10.0) == ["doc"]


def test_a_token_after_deny_gets_a_fresh_timeout():
    session = ServerSession()
    feed(session, TOKEN, now=0.0)
    session.deny("doc", "no")
    feed(session, m.AuthToken("doc", "again"), now=500.0)
    assert session.overdue_channels(now=501.0, auth_timeout=10.0) == []


def test_sessions_sharing_a_budget_are_bounded_together_and_give_it_back_on_close():
    size = len(STEP1.encode())
    budget = QueueBudget(2 * size)
    first, second = ServerSession(budget=budget), ServerSession(budget=budget)
    feed(first, STEP1)
    feed(second, STEP1)
    with pytest.raises(QueueBudgetExhausted):
        feed(second, m.Sync("abc", SyncStep1(b"\x00")))
    first.close()
    assert budget.used == size
    assert feed(second, m.Sync("abc", SyncStep1(b"\x00"))) == []


def test_a_granted_channel_gives_its_queued_bytes_back_to_the_shared_budget():
    budget = QueueBudget(1 << 20)
    session = ServerSession(budget=budget)
    feed(session, STEP1)
    assert budget.used == len(STEP1.encode())
    feed(session, TOKEN)
    session.grant("doc", RW)
    assert budget.used == 0


@pytest.mark.parametrize(
    "channel",
    ["doc\0" + "s" * 129, "d" * 2049, "é" * 1025 + "\0s1"],
)
def test_a_channel_name_over_its_limits_is_refused_before_it_is_remembered(channel: str):
    session = ServerSession(SessionLimits(max_session_id_bytes=128))
    with pytest.raises(ChannelNameTooLong):
        feed(session, m.AuthToken(channel, "t"))
    assert session.channel_count == 0


def test_a_session_id_at_its_limit_is_accepted():
    session = ServerSession(SessionLimits(max_session_id_bytes=128))
    assert feed(session, m.AuthToken("doc\0" + "s" * 128, "t"))[0].document == "doc"


def test_a_denied_or_closed_channel_leaves_the_session_without_a_granted_channel():
    session = ServerSession()
    assert not session.has_granted_channel()
    feed(session, TOKEN)
    session.grant("doc", RW)
    assert session.has_granted_channel()
    feed(session, m.AuthToken("doc", "again"))
    assert session.has_granted_channel()  # re-verifying keeps it attached
    session.deny("doc", "no")
    assert not session.has_granted_channel()
