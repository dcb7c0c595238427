"""The wire, sans-IO, by concern: ``wire`` (the codecs), ``updates`` (Yjs update algebra on
bytes), ``sessions`` (the server and client state machines) and ``clients`` (the Python client,
the only I/O here); ``protocol_errors`` is the error tree they share. PROTOCOL.md writes down
every frame.
"""
