"""One client's connection: the ``/ws`` (multiplexed) and ``/yjs/{doc}`` sessions over a transport,
how they end, the close codes, and who may open a socket at all (origin, per-address limits).
"""
