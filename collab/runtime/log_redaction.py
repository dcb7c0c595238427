"""Keeps credentials out of the log: a ``logging.Filter`` that blanks tokens in query strings
(``/yjs/doc?token=…``, ``/d/name?token=…``), anything shaped like a JWT, and the password of a
URL (``postgresql://user:secret@host/db``, ``redis://:secret@host``; ``redact_url``).

uvicorn logs each request's path with its query string (the access log, and the WebSocket
"[accepted]"/403 lines on ``uvicorn.error``); a token there is a credential on disk, in log
shipping and in every operator's terminal. Knows nothing of the server: ``install`` attaches
the filter to the loggers and handlers that exist once logging is configured.
"""

from __future__ import annotations

import logging
import re

MARKER = "[REDACTED]"

# token=… in a query string (also access_token/jwt), up to the next separator; and bare JWTs
# (three base64url parts, the first one a JSON header: "eyJ").
_QUERY_TOKEN = re.compile(
    r"(?i)((?:^|[?&;])(?:access_token|token|jwt|password|passwd)=)[^&;#\s\"']*"
)
# scheme://user:password@ — the password up to the last "@" before the host (a password may
# hold "@" or "/" when percent-encoding was forgotten; the host part never holds "@").
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@]*:)([^\s]*)@")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def redact(text: str) -> str:
    """``text`` with query-string tokens, URL passwords and JWT-shaped strings replaced by the
    marker."""
    if "://" in text:
        text = redact_url(text)
    if "=" not in text and "eyJ" not in text:
        return text  # the common case costs one scan
    return _JWT.sub(MARKER, _QUERY_TOKEN.sub(lambda m: m.group(1) + MARKER, text))


def redact_url(text: str) -> str:
    """Every ``scheme://user:password@`` in ``text`` with the password replaced (and a
    ``password=`` query parameter)."""
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MARKER + "@", text)
    return _QUERY_TOKEN.sub(lambda m: m.group(1) + MARKER, text) if "=" in text else text


def has_password(url: str) -> bool:
    return redact_url(url) != url


class RedactTokens(logging.Filter):
    """Redacts in place, keeping ``args`` a tuple: uvicorn's access formatter unpacks it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in args.items()}
        return True


_LOGGERS = (
    "",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "hypercorn.error",
    "hypercorn.access",
    "gunicorn.error",
    "gunicorn.access",
    "tether",
)


def install() -> None:
    """Filter every record of the loggers above and every record their handlers write (a
    handler's filter also sees what child loggers, e.g. ``websockets``, propagate to it)."""
    token_filter = RedactTokens()
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(token_filter)
        for handler in logger.handlers:
            if not any(isinstance(f, RedactTokens) for f in handler.filters):
                handler.addFilter(token_filter)
