"""Several tether nodes on one PostgreSQL: the node's extension that keeps its documents in step
with the others' (``node``), the ledger of what it holds (``ledger``), the store it uses
(``stores``), presence across nodes (``presence``), and the Redis bus between them (``bus``).
"""
