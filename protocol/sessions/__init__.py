"""The protocol's state machines, sans-IO: the server side of a multiplexed connection and the
client side over pycrdt documents. Frames in, events and replies out.
"""
