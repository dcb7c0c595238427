"""The model worker: a separate process that holds the native AI code (llama.cpp, torch).

The server never imports this package's model code; it starts ``python -m tether.ai.model.worker``
and talks to it over ``protocol.wire.worker_frames`` frames. A native fault, a hang or an
out-of-memory kill here costs the suggestions in flight, never an editor's socket.
"""
