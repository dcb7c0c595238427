"""Loaded documents: a room per document (its pycrdt Doc, its peers, presence, durable acks), the
manager that opens and unloads them, initial sync, and edits from outside any connection.
"""
