"""Wire codecs, pure: lib0 encoding, the Yjs sync and awareness payloads, the multiplexed and
y-websocket frames, the AI messages, the HTTP fallback's framing, relative positions and the model
worker channel's frames. Bytes in, values out; knows nothing of sessions, documents or sockets.
"""
