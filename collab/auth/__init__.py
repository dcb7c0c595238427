"""Who may open which document: tokens (JWT or open local mode), the ``docs`` claim's globs, and
the order in which hooks and the built-in check decide.
"""
