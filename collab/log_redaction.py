"""Keeps credentials out of the log: a ``logging.Filter`` that blanks tokens in query strings
(``/yjs/doc?token=…``, ``/d/name?token=…``) and anything shaped like a JWT.

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
_QUERY_TOKEN = re.compile(r"(?i)((?:^|[?&;])(?:access_token|token|jwt)=)[^&;#\s\"']*")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def redact(text: str) -> str:
    """``text`` with query-string tokens and JWT-shaped strings replaced by the marker."""
    if "=" not in text and "eyJ" not in text:
        return text  # the common case costs one scan
    return _JWT.sub(MARKER, _QUERY_TOKEN.sub(lambda m: m.group(1) + MARKER, text))


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


_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "tether")


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
