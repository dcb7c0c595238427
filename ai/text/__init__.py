"""Text in and out of the model: the prompt built from the server-held document, regions,
positions and anchors, how long a completion is, and what counts as junk.
"""
