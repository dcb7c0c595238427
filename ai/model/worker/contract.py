"""What the server and its model worker agree on besides the channel's frames
(``protocol.wire.worker_frames``): how the worker's own log lines are told from native output, and
what its exit statuses mean. Imports nothing: the server reads it without loading any model code."""

LOG_MARK = "\x1e"  # ASCII record separator: no native library starts a line with it
OUT_OF_MEMORY_EXIT = 75  # the worker exits with this after a MemoryError
