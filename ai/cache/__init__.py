"""The suggestion cache (exact, type-ahead and semantic layers, per document) and the sentence
embeddings its semantic layer uses.
"""
