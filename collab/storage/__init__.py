"""A document's durable bytes (a snapshot plus an update log): the ``Store`` interface, SQLite and
PostgreSQL behind it, and when a log is folded. Knows no Yjs, sockets or servers.
"""
