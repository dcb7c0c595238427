"""The protocol's error tree; knows nothing of sockets, documents or storage.

    ProtocolError                 something about the bytes or the message flow is wrong
    ├── DecodeError               unparseable bytes (truncated, overlong, bad UTF-8)
    ├── UnknownMessageType        a well-formed frame of a type we do not speak
    ├── FrameTooLarge             a frame above the configured limit
    └── SessionViolation          a well-formed message at the wrong time or over a limit
        ├── QueueOverflow         too many messages queued before a document's auth resolved
        ├── QueueBudgetExhausted  every connection's pre-auth queues together are full
        └── ChannelNameTooLong    a channel (document or session id part) over its limit

Errors caused by the remote peer carry ``remote=True``; the transport maps each class to one
close code in one place (``collab.errors_map``), and never copies exception text from
third-party libraries to the peer.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error raised by the protocol package."""

    remote: bool = True


class DecodeError(ProtocolError):
    """The peer's bytes do not parse: truncated varint, overlong length, invalid UTF-8."""


class UnknownMessageType(ProtocolError):
    """A frame whose type number we do not implement."""


class FrameTooLarge(ProtocolError):
    """A frame larger than the configured maximum."""


class SessionViolation(ProtocolError):
    """A well-formed message that breaks the session rules (order, limits)."""


class QueueOverflow(SessionViolation):
    """The bounded queue of messages waiting for a document's authentication is full."""


class QueueBudgetExhausted(SessionViolation):
    """The server-wide budget for messages waiting for authentication is spent (transient)."""


class ChannelNameTooLong(SessionViolation):
    """A channel name whose document or session id part is longer than allowed."""
