"""Serving suggestions: flights (generations and the requests they feed), where an answer comes
from, the scheduler, prefetch and context refresh, streaming, accepting, the HTTP path.
"""
