"""Yjs v1 update algebra on bytes: scan an update's structure, cut it in dependency order, split
it into pieces that apply in any order, merge runs as Yjs would have. Pure; knows nothing of
documents, rooms or sockets.
"""
