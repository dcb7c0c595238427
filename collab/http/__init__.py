"""The HTTP surface besides sockets: the REST documents API, its OpenAPI description, small fixed
answers for browsers, and outgoing webhooks.
"""
