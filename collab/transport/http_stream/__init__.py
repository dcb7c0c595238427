"""The HTTP fallback transport: the ``/ws`` frames over batched POSTs and an event stream, for
editors whose proxies refuse WebSockets.
"""
