"""The running process: Prometheus metrics, refusal logging, log redaction, the garbage collector's
policy and pauses, and the uvicorn server that announces where it listens.
"""
