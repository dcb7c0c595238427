"""Several tether nodes on one PostgreSQL: the node's extension that keeps its documents in step
with the others', and the Redis bus between them.
"""
