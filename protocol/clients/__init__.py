"""The Python client, the only I/O in ``protocol``: a thin asyncio loop around the client session
over a WebSocket or the HTTP fallback, and why a connect failed, in words.
"""
