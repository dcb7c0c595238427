"""Bytes on a socket: uvicorn's WebSocket protocol as tether runs it, pre-framed writes and the
receive fast path, each connection's bounded outbox, the shared timer wheel. Knows no documents.
"""
