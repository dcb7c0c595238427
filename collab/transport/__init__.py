"""Bytes on a socket: uvicorn's WebSocket protocol as tether runs it, pre-framed writes and the
receive fast path, each connection's bounded outbox, the shared timer wheel, sockets per client
address, and the HTTP fallback (``http_stream``) that carries the same frames where WebSockets
cannot go. Knows no documents.
"""
